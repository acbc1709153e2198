"""Teacher-forced metrics against a count by hand: a stand-in model that is right
on a chosen set of supervised tokens and wrong on the others."""

import contextlib

import torch

from workloads.evaluate import teacher_forced
from workloads.tasks import build_task
from workloads.tasks.mqar import MQARConfig


class WrongOn:
    """Logits that put the next token first, except where `wrong` (B, T) is set."""

    def __init__(self, batch, wrong, vocab):
        self.batch, self.wrong, self.vocab = batch, wrong, vocab

    def __call__(self, tokens):
        target = self.batch.next_tokens.clone()
        target[self.wrong] = (target[self.wrong] + 1) % self.vocab
        return torch.nn.functional.one_hot(target, self.vocab).float()


def test_token_accuracy_counts_supervised_tokens_and_exact_match_counts_samples():
    task = build_task(MQARConfig(n=4, seq_len=32, vocab=64))
    batch = task.batch(0, 0, 0, 50)
    mask = batch.supervised[:, 1:]
    gen = torch.Generator().manual_seed(0)
    wrong = (torch.rand(mask.shape, generator=gen) < 0.1) & mask  # a tenth of the queries answered wrong
    wrong |= (torch.rand(mask.shape, generator=gen) < 0.5) & ~mask  # unsupervised tokens do not count
    metrics = teacher_forced(WrongOn(batch, wrong, task.vocab_size), [batch], contextlib.nullcontext)
    right = mask & ~wrong
    assert metrics["val_token_accuracy"] == right.sum().item() / mask.sum().item()
    assert metrics["val_exact_match"] == (right.sum(1) == mask.sum(1)).sum().item() / len(mask)
    assert (mask.sum(1) == 4).all()  # every sample: its n = 4 queries
    assert 0 < metrics["val_exact_match"] < metrics["val_token_accuracy"] < 1
