"""Associative recall (the paper's AR): n key-value pairs with distinct keys,
then one of the keys as the query; the answer is its value.

Keys and values come from disjoint ranges of data tokens (keys 0..keys-1, values
keys..keys+values-1). With the retriever the model asks for the query key and
the retriever answers with the token that follows the key's first occurrence in
the context (the regular expression `key (.)`).
"""

from typing import Literal

from pydantic import Field, model_validator

from workloads.tasks.registry import register
from workloads.tasks.base import TaskConfigBase
from workloads.tasks._sequence import D0, SEP, LookupTask, first_following, layout


class ARConfig(TaskConfigBase):
    name: Literal["ar"] = "ar"
    n: int = Field(ge=1, le=4096, description="key-value pairs in the context")
    keys: int = Field(256, ge=1, description="size of the key alphabet (at least n: keys are distinct)")
    values: int = Field(256, ge=2, description="size of the value alphabet")
    setup: Literal["vanilla", "retrieval"] = "vanilla"

    @model_validator(mode="after")
    def _enough_keys(self):
        if self.keys < self.n:
            raise ValueError(f"keys ({self.keys}) must be at least n ({self.n}): the n keys are distinct")
        return self

    @property
    def vocab_size(self) -> int:
        return D0 + self.keys + self.values

    @property
    def longest_sample(self) -> int:
        """BOS, n pairs, SEP, query, EOS, answer; the retrieval trace adds 5 tokens."""
        return 2 * self.n + 5 + (5 if self.setup == "retrieval" else 0)


class ARTask(LookupTask):
    def __init__(self, config: ARConfig):
        self.n_data = config.keys + config.values
        self.prompt_length = 2 * config.n + 4
        self.longest = config.longest_sample
        super().__init__(config)

    def draw(self, rng):
        c = self.config
        keys = rng.choice(c.keys, size=c.n, replace=False)
        values = c.keys + rng.integers(0, c.values, size=c.n)
        q = int(rng.integers(0, c.n))
        context = [int(t) for pair in zip(keys, values) for t in pair]
        answer = int(values[q])
        return layout(context, [int(keys[q])], answer, c.setup, key=[int(keys[q])], found=answer), answer

    def retrieve(self, tokens: list[int]) -> int:
        return first_following(tokens, [tokens[-2]], end=lambda t: t == SEP)


register(ARConfig, ARTask)
