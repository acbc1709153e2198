"""c-gram retrieval (the paper's): a context of n tokens in which one (c-1)-gram
occurs exactly once, then that gram as the query; the answer is the token that
followed it. c = 2 asks for the token after a token that occurs once (AR's
shape without the pairing).

With the retriever the model asks for the gram and the retriever answers with
the token after its first occurrence in the context (the regular expression
`g_1 ... g_{c-1} (.)`).
"""

from typing import Literal

from pydantic import Field, model_validator

from workloads.tasks.registry import register
from workloads.tasks.base import TaskConfigBase
from workloads.tasks._sequence import D0, SEP, LookupTask, first_following, layout


class CGramConfig(TaskConfigBase):
    name: Literal["cgram"] = "cgram"
    n: int = Field(ge=2, le=4096, description="tokens in the context")
    c: int = Field(3, ge=2, le=16, description="the gram and its answer: c - 1 tokens are the query")
    values: int = Field(16, ge=2, description="size of the alphabet of the context")
    setup: Literal["vanilla", "retrieval"] = "vanilla"

    @model_validator(mode="after")
    def _room(self):
        if self.n < self.c:
            raise ValueError(f"n ({self.n}) must be at least c ({self.c}): the gram and its answer lie in the context")
        if self.values ** (self.c - 1) < self.n:
            # Fewer possible grams than positions: a gram that occurs once gets rare.
            raise ValueError(f"values^(c-1) = {self.values ** (self.c - 1)} is below n ({self.n}); raise values or c")
        return self

    @property
    def vocab_size(self) -> int:
        return D0 + self.values

    @property
    def longest_sample(self) -> int:
        """BOS, n tokens, SEP, c-1 query tokens, EOS, answer; retrieval adds c + 3."""
        query = self.c - 1
        return self.n + query + 4 + (query + 4 if self.setup == "retrieval" else 0)


class CGramTask(LookupTask):
    def __init__(self, config: CGramConfig):
        self.n_data = config.values
        self.prompt_length = config.n + config.c + 2
        self.longest = config.longest_sample
        super().__init__(config)

    def draw(self, rng):
        c, width = self.config, self.config.c - 1
        while True:  # resample until the chosen gram occurs once (at most n - c + 1 windows)
            xs = [int(x) for x in rng.integers(0, c.values, size=c.n)]
            p = int(rng.integers(0, c.n - width))
            gram = xs[p : p + width]
            if sum(xs[i : i + width] == gram for i in range(c.n - width + 1)) == 1:
                break
        answer = xs[p + width]
        return layout(xs, gram, answer, c.setup, key=gram, found=answer), answer

    def retrieve(self, tokens: list[int]) -> int:
        width = self.config.c - 1
        return first_following(tokens, tokens[-1 - width : -1], end=lambda t: t == SEP)


register(CGramConfig, CGramTask)
