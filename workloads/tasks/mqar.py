"""Multi-query associative recall, as zoology generates it (Arora, Eyuboglu et al.
2023, zoology/data/multiquery_ar.py): n key-value pairs, then every key queried
once at power-law distributed gaps; loss only on the values.

Per sample, as zoology: keys drawn without replacement from 1..vocab/2-1, values
without replacement from vocab/2..vocab-1; the pairs k v first; then query j
sits at 2 n + 2 gap_j, the gaps drawn without replacement from 0..space-1
(space = (seq_len - 2 n) / 2) with probability proportional to power_a *
g^(power_a - 1), g = gap + 1; every other input token is 0, or, with
random_non_queries, uniform over the vocabulary. The model reads seq_len tokens;
at each query's position it is trained to predict the key's value, which, as in
zoology, is not the next input token (`Batch.targets`). Our random stream is per
sample (seed, stream, index), not zoology's one numpy seed per data set, so the
samples are zoology's distribution, not its exact arrays. No generation protocol
(several answers per sample): exact match is teacher-forced, all n values right.
"""

from fractions import Fraction
from typing import Literal

from pydantic import Field, model_validator

from workloads.tasks.registry import register
from workloads.tasks.base import TaskBase, TaskConfigBase
from workloads.tasks.findings import capacity_or_training
from workloads.tasks._sequence import sample_rng


class MQARConfig(TaskConfigBase):
    name: Literal["mqar"] = "mqar"
    n: int = Field(ge=1, le=4096, description="key-value pairs (zoology's num_kv_pairs)")
    seq_len: int = Field(64, ge=4, description="tokens the model reads (zoology's input_seq_len), even")
    vocab: int = Field(8192, ge=8, description="vocabulary size (zoology's vocab_size)")
    power_a: float = Field(0.01, gt=0, le=1, description="power law of the gaps; 1 is uniform")
    random_non_queries: bool = True
    setup: Literal["vanilla"] = "vanilla"

    @model_validator(mode="after")
    def _fits(self):
        # zoology's own assertions
        if self.seq_len % 2:
            raise ValueError(f"seq_len ({self.seq_len}) must be even")
        if self.vocab <= self.seq_len:
            raise ValueError(f"vocab ({self.vocab}) must exceed seq_len ({self.seq_len})")
        if 4 * self.n > self.seq_len:
            raise ValueError(f"seq_len ({self.seq_len}) must hold the n = {self.n} pairs and n queries: at least 4n")
        if self.n >= self.vocab // 2:
            raise ValueError(f"vocab ({self.vocab}) must have more than n = {self.n} keys in its lower half")
        return self

    @property
    def vocab_size(self) -> int:
        return self.vocab

    @property
    def longest_sample(self) -> int:
        return self.seq_len + 1  # every sample: seq_len inputs and the last target


class MQARTask(TaskBase):
    generates = False
    # No finding of the paper is about MQAR; the capacity-or-training questions of
    # docs/findings.md (g) are asked of it as of IsTree (issue 62).
    claims = capacity_or_training(("vanilla",), Fraction(1, 10), 3)

    def __init__(self, config: MQARConfig):
        import numpy as np

        self.config = config
        self.n = config.n
        self.vocab = tuple(str(i) for i in range(config.vocab))
        self.pad_id = 0
        self.max_length = config.longest_sample
        self.uses_retriever = False
        space = (config.seq_len - 2 * config.n) // 2
        p = config.power_a * np.arange(1, space + 1) ** (config.power_a - 1)
        self._gap_p = p / p.sum()

    @property
    def vocab_size(self) -> int:
        return self.config.vocab

    def draw(self, rng):
        """Inputs (seq_len + 1 tokens, the last never read), targets and loss mask."""
        import numpy as np

        c, n = self.config, self.config.n
        half = c.vocab // 2
        keys = rng.choice(np.arange(1, half), size=n, replace=False)
        values = rng.choice(np.arange(half, c.vocab), size=n, replace=False)
        gaps = rng.choice(len(self._gap_p), size=n, replace=False, p=self._gap_p)
        tokens = np.zeros(c.seq_len + 1, np.int64)
        tokens[0 : 2 * n : 2], tokens[1 : 2 * n : 2] = keys, values
        at = 2 * n + 2 * gaps  # the queries' positions
        tokens[at] = keys
        targets = np.zeros_like(tokens)
        targets[at + 1] = values  # position `at` is trained to predict the value
        sup = np.zeros(len(tokens), np.bool_)
        sup[at + 1] = True
        if c.random_non_queries:
            empty = tokens[:-1] == 0
            tokens[:-1][empty] = rng.integers(0, c.vocab, size=int(empty.sum()))
        return tokens, targets, sup, values[np.argsort(at)]

    def batch(self, seed: int, stream: int, start: int, count: int):
        import numpy as np
        import torch

        from workloads.tasks.base import Batch

        rows = [self.draw(sample_rng(seed, stream, start + i)) for i in range(count)]
        tokens, targets, sup, answers = (np.stack(parts) for parts in zip(*rows))
        return Batch(tokens=torch.from_numpy(tokens), supervised=torch.from_numpy(sup),
                     lengths=torch.full((count,), tokens.shape[1]), labels=torch.from_numpy(answers),
                     targets=torch.from_numpy(targets))

    def samples(self, seed: int, stream: int, start: int, count: int) -> list[dict]:
        """Samples as plain records: input tokens, loss mask, and at each supervised
        position its target (the value), in `targets`."""
        out = []
        for i in range(count):
            tokens, targets, sup, answers = self.draw(sample_rng(seed, stream, start + i))
            out.append({"tokens": [str(t) for t in tokens], "supervised": sup.astype(int).tolist(),
                        "targets": [str(t) if s else "" for t, s in zip(targets, sup)],
                        "label": answers.tolist()})
        return out


register(MQARConfig, MQARTask)
