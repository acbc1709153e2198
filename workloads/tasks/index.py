"""Index (the paper's): x_0 .. x_{n-1}, then a position i as the query; the answer
is x_i.

Data tokens: values 0..values-1, then positions values..values+n-1. With the
retriever the model asks for the position and the retriever answers with the
context's token at that position (the regular expression `BOS (?:.){i}(.)`).
"""

from typing import Literal

from pydantic import Field

from workloads.tasks.registry import register
from workloads.tasks.base import TaskConfigBase
from workloads.tasks._sequence import D0, LookupTask, layout


class IndexConfig(TaskConfigBase):
    name: Literal["index"] = "index"
    n: int = Field(ge=1, le=4096, description="tokens in the context")
    values: int = Field(16, ge=2, description="size of the alphabet of the context")
    setup: Literal["vanilla", "retrieval"] = "vanilla"

    @property
    def vocab_size(self) -> int:
        return D0 + self.values + self.n

    @property
    def longest_sample(self) -> int:
        """BOS, n tokens, SEP, position, EOS, answer; the retrieval trace adds 5 tokens."""
        return self.n + 5 + (5 if self.setup == "retrieval" else 0)


class IndexTask(LookupTask):
    def __init__(self, config: IndexConfig):
        self.n_data = config.values + config.n
        self.prompt_length = config.n + 4
        self.longest = config.longest_sample
        super().__init__(config)

    def draw(self, rng):
        c = self.config
        xs = [int(x) for x in rng.integers(0, c.values, size=c.n)]
        i = int(rng.integers(0, c.n))
        position = c.values + i
        return layout(xs, [position], xs[i], c.setup, key=[position], found=xs[i]), xs[i]

    def retrieve(self, tokens: list[int]) -> int:
        i = tokens[-2] - D0 - self.config.values  # the queried position
        return tokens[1 + i] if 0 <= i < self.config.n and 1 + i < len(tokens) else 0


register(IndexConfig, IndexTask)
