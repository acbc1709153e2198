"""What the look-up tasks (ar, index, ...) share: their vocabulary, sample layout,
per-sample random streams, batching, retrieval setup and generation protocol.

A sample is `BOS context SEP query EOS answer` (vanilla): loss on the answer
only. In the retrieval setup the model first asks the retriever,
`... EOS STARTSEARCH key ENDSEARCH [found] EOS answer`: it writes the query (with
loss), the retriever writes what it finds in the context (no loss), then the
model writes the answer (with loss). Generation ends with the token after the
first EOS it writes (or, in vanilla, with its first token), which is the answer.

Tokens: the specials below, then data token d at id len(SPECIALS) + d, written
as its decimal id.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from workloads.tasks.base import TaskBase

if TYPE_CHECKING:
    import numpy as np

SPECIALS = ("PAD", "BOS", "SEP", "EOS", "STARTSEARCH", "ENDSEARCH")
PAD, BOS, SEP, EOS, START, END = range(len(SPECIALS))
D0 = len(SPECIALS)  # the id of data token 0
SETUPS = ("vanilla", "retrieval")


def sample_rng(seed: int, stream: int, index: int):
    """The random stream of one sample: a function of (seed, stream, index) alone."""
    import numpy as np

    return np.random.default_rng([seed, stream, index])


def layout(context: list[int], query: list[int], answer: int, setup: str, key: list[int] | None = None,
           found: int | None = None) -> tuple[list[int], list[int]]:
    """Token ids and loss mask of one sample from data tokens (ids from 0):
    `context` and `query` are data tokens; in retrieval, `key` is what the model
    asks the retriever for and `found` what the retriever answers."""
    tokens = [BOS, *(D0 + t for t in context), SEP, *(D0 + t for t in query), EOS]
    sup = [0] * len(tokens)
    if setup == "retrieval":
        asked = [START, *(D0 + t for t in key), END]
        tokens += [*asked, D0 + found, EOS]
        sup += [1] * len(asked) + [0, 1]
    tokens.append(D0 + answer)
    sup.append(1)
    return tokens, sup


class LookupTask(TaskBase):
    """The task-interface half of a look-up task; a subclass sets `n_data` (data
    tokens), `prompt_length` and `longest`, and implements `draw(rng)` and
    `retrieve(tokens)`."""

    n_data: int
    prompt_length: int
    longest: int
    generates = True

    def __init__(self, config):
        self.config = config
        self.n = config.n
        self.setup = config.setup
        self.vocab = SPECIALS + tuple(str(d) for d in range(self.n_data))
        self.pad_id, self.eos_id, self.end_search_id = PAD, EOS, END
        self.uses_retriever = config.setup == "retrieval"
        self.max_length = self.longest

    @property
    def vocab_size(self) -> int:
        return len(self.vocab)

    def draw(self, rng) -> tuple[list[int], int]:
        """One sample's token ids and loss mask, and its answer (a data token)."""
        raise NotImplementedError

    def retrieve(self, tokens: list[int]) -> int:
        """The retriever: the token id it writes after `tokens`, which end in ENDSEARCH."""
        raise NotImplementedError

    def batch(self, seed: int, stream: int, start: int, count: int):
        import numpy as np
        import torch

        from workloads.tasks.base import Batch

        rows = [self.draw(sample_rng(seed, stream, start + i)) for i in range(count)]
        width = max(len(t) for (t, _), _ in rows)
        tokens = np.full((count, width), PAD, np.int64)
        sup = np.zeros((count, width), np.bool_)
        for i, ((t, s), _) in enumerate(rows):
            tokens[i, : len(t)], sup[i, : len(s)] = t, s
        return Batch(tokens=torch.from_numpy(tokens), supervised=torch.from_numpy(sup),
                     lengths=torch.tensor([len(t) for (t, _), _ in rows]),
                     labels=torch.tensor([answer for _, answer in rows], dtype=torch.int64))

    def retrieve_rows(self, tokens: np.ndarray, lengths: np.ndarray, rows: np.ndarray) -> np.ndarray:
        import numpy as np

        return np.array([self.retrieve(tokens[r, : lengths[r]].tolist()) for r in rows], np.int64)

    @property
    def _answer_eos(self) -> int:
        """Where to look for the EOS before the answer: the prompt's own in vanilla,
        the model's first after the prompt with a retriever."""
        return self.prompt_length if self.uses_retriever else self.prompt_length - 1

    def stopped(self, seqs: np.ndarray, pos: int) -> np.ndarray:
        """Rows whose token at `pos` ends generation: the answer, after its EOS."""
        import numpy as np

        if pos - 1 < self._answer_eos:
            return np.zeros(len(seqs), bool)
        return seqs[:, pos - 1] == EOS

    def answers(self, seqs: np.ndarray) -> np.ndarray:
        """Each row's answer as a data token (the labels' code), -1 where none:
        the token after the EOS that precedes the answer."""
        import numpy as np

        gen = seqs[:, self._answer_eos :]
        ends = gen[:, :-1] == EOS
        first = np.where(ends.any(axis=1), ends.argmax(axis=1), -1)
        out = np.full(len(seqs), -1, np.int64)
        for r, e in enumerate(first):
            if e >= 0 and gen[r, e + 1] >= D0:
                out[r] = gen[r, e + 1] - D0
        return out

    def samples(self, seed: int, stream: int, start: int, count: int) -> list[dict]:
        """Samples as plain records: token strings, loss mask and answer."""
        return [self._record(*self.draw(sample_rng(seed, stream, start + i))) for i in range(count)]

    def _record(self, row: tuple[list[int], list[int]], answer: int) -> dict:
        tokens, sup = row
        return {"tokens": [self.vocab[t] for t in tokens], "supervised": sup, "label": answer}


def first_following(tokens: list[int], key: list[int], end: Callable[[int], bool]) -> int:
    """The token after the first occurrence of the token run `key` before the first
    token for which `end` holds: the regular expression `key (.)` over the context."""
    width = len(key)
    for i in range(len(tokens) - width):
        if any(end(t) for t in tokens[i : i + width + 1]):
            break
        if tokens[i : i + width] == key:
            return tokens[i + width]
    return PAD
