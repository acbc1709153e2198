"""A stand-in 'model' for generation tests: it writes each sample's own
continuation, except right after ENDSEARCH, where it writes a wrong token that
the retriever must override."""

import torch


class Replay:
    def __init__(self, task, batch, wrong: int):
        self.task, self.ref, self.wrong = task, batch.tokens, wrong

    def _logits(self, pos, prev):
        nxt = self.ref[:, pos].clone() if pos < self.ref.shape[1] else torch.full_like(self.ref[:, 0], self.task.pad_id)
        if self.task.uses_retriever:
            nxt[prev == self.task.end_search_id] = self.wrong
        return torch.nn.functional.one_hot(nxt, self.task.vocab_size).float()

    def prefill(self, tokens, max_length):
        self.pos = tokens.shape[1]
        return self._logits(self.pos, tokens[:, -1]), None

    def step(self, token, state):
        self.pos += 1
        return self._logits(self.pos, token)
