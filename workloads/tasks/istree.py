"""IsTree (docs/experiment.md): is a graph on n vertices with n-1 edges a tree?

The three setups differ only in what the model writes after the first EOS:
the answer (vanilla), a DFS Euler tour then the answer (cot), or the same DFS with
every look-up asked of a retriever (retrieval). The heavy lifting is compiled in
`istree_kernels`; this module is the typed face of it. torch and the kernels
(numba) are imported where they are used, so that reading a config is instant.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar, Literal, Sequence

from pydantic import Field

from workloads.tasks._istree_findings import CHANCE, CLAIMS, TRAINING_NOISE
from workloads.tasks.base import Batch, TaskBase, TaskConfigBase
from workloads.tasks.registry import register

if TYPE_CHECKING:
    import numpy as np


def _kernels():
    from workloads.tasks import istree_kernels

    return istree_kernels

# Graph sizes the task supports: n-1 >= 3 edges, and the kernels' n x n adjacency
# and ~55n-token retrieval traces stay small. The spec checks the same bounds.
N_MIN, N_MAX = 4, 1024
N_SPECIALS = 16  # istree_kernels.SPECIALS: [ ] , - PAD EOS TRUE FALSE SPACE NEWLINE UNK BOS STARTSEARCH ENDSEARCH FAILED ~

Setup = Literal["vanilla", "cot", "retrieval"]
Family = Literal["binary", "random"]


class IsTreeConfig(TaskConfigBase):
    default_n: ClassVar[tuple[int, ...]] = (16, 32, 64)  # the paper's graph sizes
    name: Literal["istree"] = "istree"
    n: int = Field(ge=N_MIN, le=N_MAX, description="vertices in each graph")
    family: Family = "binary"
    setup: Setup = "cot"

    @property
    def vocab_size(self) -> int:
        """The reference's 16 special tokens, then the vertices 0..n."""
        return N_SPECIALS + self.n + 1

    @property
    def longest_sample(self) -> int:
        """Tokens in the longest sample (BOS to answer): a tree's, whose trace visits
        every vertex, where a non-tree's stops at its first cycle. Every tree of n
        vertices writes as many: 3n with the answer alone, 5n with its chain of
        thought, 40n - 25 with its retrieval trace (tests check it against the renderer)."""
        return {"vanilla": 3 * self.n, "cot": 5 * self.n, "retrieval": 40 * self.n - 25}[self.setup]


class IsTreeTask(TaskBase):
    """Streams IsTree samples, tokenised with the reference's vocabulary (its 16
    special tokens, then the vertices 0..n), which depends only on n."""

    title = "IsTree"
    n_label = "n (vertices)"
    generates = True  # has a generation protocol: the answer after the trace
    # Exact match of a model that guesses, by setup: vanilla supervises the answer
    # alone (classes balanced); a trace is never guessed whole. The report marks it.
    exact_match_chance = CHANCE
    generation_chance = 0.5  # the answer guessed: a model that fails still scores this in generation
    token_accuracy_chance = {"vanilla": 0.5}  # the answer alone is its one supervised token; a trace's are not guessed

    @staticmethod
    def label_text(label) -> str:
        return "tree" if label else "not a tree"

    claims = CLAIMS  # the paper's findings, (a) to (g): docs/findings.md
    training_noise = TRAINING_NOISE  # a one-seed comparison's training noise (its calibration: _istree_findings.py)

    @classmethod
    def findings(cls, best, unfinished=None):
        """The paper's findings as this sweep shows them, with the cells at guessing level."""
        from dataclasses import replace

        from workloads.tasks._istree_findings import at_guessing

        return replace(super().findings(best, unfinished), guessing=tuple(at_guessing(best)))

    def __init__(self, config: IsTreeConfig):
        K = _kernels()
        self.config = config
        n = config.n
        self.n = n
        self.vocab = K.SPECIALS + tuple(str(v) for v in range(n + 1))
        self._ids = {tok: i for i, tok in enumerate(self.vocab)}
        self.pad_id = K.PAD
        self.eos_id = K.EOS
        self.true_id = K.TRUE
        self.false_id = K.FALSE
        self.end_search_id = K.END
        self.uses_retriever = config.setup == "retrieval"
        self.prompt_length = 3 * (n - 1) + 2  # BOS, n-1 edges of 3 tokens, EOS
        self._family = K.FAMILIES.index(config.family)
        self._setup = K.SETUPS.index(config.setup)
        self.max_length = K.max_length(n, self._setup)

    @property
    def vocab_size(self) -> int:
        return len(self.vocab)

    def token_id(self, token: str) -> int:
        return self._ids[token]

    def decode(self, ids) -> list[str]:
        return [self.vocab[i] for i in ids]

    def batch(self, seed: int, stream: int, start: int, count: int) -> Batch:
        """Samples start..start+count-1 of stream `stream` under `seed`."""
        import numpy as np
        import torch

        tokens = np.full((count, self.max_length), self.pad_id, np.int64)
        sup = np.zeros((count, self.max_length), np.uint8)
        lengths = np.empty(count, np.int64)
        labels = np.empty(count, np.bool_)
        _kernels().fill_batch(self.n, self._family, self._setup, seed, stream, start, tokens, sup, lengths, labels)
        width = int(lengths.max())
        return Batch(
            tokens=torch.from_numpy(np.ascontiguousarray(tokens[:, :width])),
            supervised=torch.from_numpy(sup[:, :width].astype(np.bool_)),
            lengths=torch.from_numpy(lengths),
            labels=torch.from_numpy(labels),
        )

    def retrieve(self, ids) -> int:
        """The retriever's answer to the query that ends `ids` (last token ENDSEARCH)."""
        import numpy as np

        seq = np.asarray(ids, dtype=np.int64)
        return int(_kernels().retrieve(seq, len(seq), self.n))

    def retrieve_rows(self, tokens: np.ndarray, lengths: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """Answers for the rows of a (B, T) int64 array whose sequences end in ENDSEARCH."""
        import numpy as np

        answers = np.empty(len(rows), np.int64)
        _kernels().retrieve_rows(tokens, lengths, rows.astype(np.int64), self.n, answers)
        return answers

    def stopped(self, seqs: np.ndarray, pos: int) -> np.ndarray:
        """Rows whose token at `pos` ends generation: an answer, TRUE or FALSE."""
        return (seqs[:, pos] == self.true_id) | (seqs[:, pos] == self.false_id)

    def answers(self, seqs: np.ndarray) -> np.ndarray:
        """Per row of generated (B, T) tokens: 1 where the first answer after the
        prompt is TRUE, 0 where FALSE, -1 where it wrote neither (the labels' code)."""
        import numpy as np

        gen = seqs[:, self.prompt_length :]
        is_answer = (gen == self.true_id) | (gen == self.false_id)
        token = gen[np.arange(len(gen)), is_answer.argmax(axis=1)]
        return np.where(is_answer.any(axis=1), (token == self.true_id).astype(np.int64), -1)

    def samples(self, seed: int, stream: int, start: int, count: int) -> list[dict]:
        """Samples as plain records: token strings, label and the loss mask."""
        b = self.batch(seed, stream, start, count)
        return [
            self._record(b.tokens[i].numpy(), b.supervised[i].numpy(), int(b.lengths[i]), bool(b.labels[i]))
            for i in range(count)
        ]

    @staticmethod
    def parse_instance(text: str) -> tuple[int, list[tuple[int, int]]]:
        """A graph as `show-task --instance` takes it, '3-1,5-2 4-1' (commas or spaces
        between edges): (n, its edges), n = edges + 1; ValueError naming what is wrong."""
        edges = []
        for item in text.replace(",", " ").split():
            u, sep, v = item.partition("-")
            if not (sep and u.strip().isdigit() and v.strip().isdigit()):
                raise ValueError(f"{item!r} is not an edge like 3-1")
            edges.append((int(u), int(v)))
        if not edges:
            raise ValueError("no edges given")
        return len(edges) + 1, edges

    def render(self, edges: Sequence[tuple[int, int]]) -> dict:
        """The sample of one given graph, its edges in input order (each written u-v
        with u > v), as a record like those of `samples`."""
        n = self.n
        edges = [tuple(e) for e in edges]
        if len(edges) != n - 1:
            raise ValueError(f"IsTree samples have n-1 = {n - 1} edges, got {len(edges)}")
        for u, v in edges:
            if not (0 <= u < n and 0 <= v < n) or u == v:
                raise ValueError(f"edge {u}-{v}: vertices must be distinct and in 0..{n - 1}")
        if len({frozenset(e) for e in edges}) != len(edges):
            raise ValueError("an edge is repeated")
        import numpy as np

        eu = np.array([e[0] for e in edges], np.int64)
        ev = np.array([e[1] for e in edges], np.int64)
        tokens = np.full(self.max_length, self.pad_id, np.int64)
        sup = np.zeros(self.max_length, np.uint8)
        length, is_tree = _kernels().render(n, self._setup, eu, ev, tokens, sup)
        return self._record(tokens, sup, length, bool(is_tree))

    def _record(self, tokens: np.ndarray, sup: np.ndarray, length: int, label: bool) -> dict:
        return {"tokens": self.decode(tokens[:length].tolist()), "label": label, "supervised": sup[:length].astype(int).tolist()}


def render(n: int, setup: Setup, edges: Sequence[tuple[int, int]]) -> dict:
    """The IsTree sample of one graph: `edges` in input order, n vertices, one setup.
    Returns {"tokens": [str], "supervised": [0/1], "label": bool}."""
    return IsTreeTask(IsTreeConfig(n=n, setup=setup)).render(edges)


register(IsTreeConfig, IsTreeTask)
