"""Teacher-forced metrics against a count by hand: a stand-in model that is right
on a chosen set of supervised tokens and wrong on the others."""

import contextlib

import numpy as np
import pytest
import torch

from workloads.evaluate import generation_accuracy, settled_rows, teacher_forced
from workloads.tasks import IsTreeConfig, build_task
from workloads.tasks.ar import ARConfig
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


def test_a_metric_added_to_the_registry_is_computed_over_every_batch(monkeypatch):
    # A new teacher-forced metric is one entry in workloads/metrics.py: here the
    # accuracy on each sample's last supervised token (for mqar, its last query).
    from workloads.metrics import METRICS, Metric

    def last_query(t):
        last = t.supervised.long().cumsum(1).argmax(1)  # the first position holding the row's last supervised token
        return t.right[torch.arange(len(last)), last].sum(), len(last)

    monkeypatch.setitem(METRICS, "val_last_query", Metric("val_last_query", "max", "last_q", "last query", "last query",
                                                          None, tally=last_query))
    task = build_task(MQARConfig(n=4, seq_len=32, vocab=64))
    batches = [task.batch(0, 0, 0, 30), task.batch(0, 0, 30, 20)]
    gen = torch.Generator().manual_seed(1)
    right_last, models = [], []
    for batch in batches:
        mask = batch.supervised[:, 1:]
        wrong = (torch.rand(mask.shape, generator=gen) < 0.3) & mask
        last = [max(np.flatnonzero(row)) for row in mask.numpy()]
        right_last += [not wrong[r, c] for r, c in enumerate(last)]
        models.append(WrongOn(batch, wrong, task.vocab_size))
    model = iter(models)
    metrics = teacher_forced(lambda tokens: next(model)(tokens), batches, contextlib.nullcontext)
    assert metrics["val_last_query"] == sum(right_last) / 50 and 0 < metrics["val_last_query"] < 1
    assert set(metrics) == {name for name, m in METRICS.items() if m.tally}


class PrefixOracle:
    """A stand-in model whose next token is a function of the whole prefix, so that
    its full forward, prefill and step agree by construction: the samples' own next
    token, except at `wrong` prefixes, and TRUE (IsTree's answer "a tree") after
    any prefix it has not seen."""

    def __init__(self, task, batch, wrong: set, fallback: int):
        self.task, self.fallback, self.table = task, fallback, {}
        tokens = batch.tokens.tolist()
        for r, length in enumerate(batch.lengths.tolist()):
            key = ()
            for p in range(length - 1):
                key = hash((key, tokens[r][p]))
                wanted = tokens[r][p + 1]
                self.table[key] = (wanted + 1) % task.vocab_size if (r, p + 1) in wrong else wanted
        self.rows_decoded = 0

    def _one_hot(self, keys):
        nxt = torch.tensor([self.table.get(k, self.fallback) for k in keys])
        return torch.nn.functional.one_hot(nxt, self.task.vocab_size).float()

    def __call__(self, tokens):
        keys, out = [()] * tokens.shape[0], []
        for p in range(tokens.shape[1]):
            keys = [hash((k, t)) for k, t in zip(keys, tokens[:, p].tolist())]
            out.append(self._one_hot(keys))
        return torch.stack(out, dim=1)

    def prefill(self, tokens, max_length):
        self.rows_decoded += tokens.shape[0]
        self.keys = [()] * tokens.shape[0]
        for p in range(tokens.shape[1]):
            self.keys = [hash((k, t)) for k, t in zip(self.keys, tokens[:, p].tolist())]
        return self._one_hot(self.keys), None

    def step(self, token, state):
        self.keys = [hash((k, t)) for k, t in zip(self.keys, token.tolist())]
        return self._one_hot(self.keys)


@pytest.mark.parametrize("task_config", [IsTreeConfig(n=6, setup="cot"), IsTreeConfig(n=6, setup="retrieval"),
                                         IsTreeConfig(n=6, setup="vanilla"), ARConfig(n=6, setup="retrieval")],
                         ids=["istree-cot", "istree-retrieval", "istree-vanilla", "ar-retrieval"])
def test_generation_decided_by_teacher_forcing_scores_as_full_decoding(task_config):
    task = build_task(task_config)
    batches = [task.batch(0, 1, start, 40) for start in (0, 40)]
    rng = np.random.default_rng(0)
    models, harmless_only = [], 0
    for batch in batches:
        wrong = set()
        for r, length in enumerate(batch.lengths.tolist()):
            row = batch.tokens[r].tolist()
            answered = [p for p in range(task.prompt_length + 1, length) if task.uses_retriever and row[p - 1] == task.end_search_id]
            if rng.random() < 0.4:  # a wrong token somewhere in what the model writes
                wrong.add((r, int(rng.integers(task.prompt_length, length))))
            elif answered:  # a wrong guess where the retriever answers: generation never uses it
                wrong.add((r, answered[int(rng.integers(len(answered)))]))
                harmless_only += 1
        models.append(PrefixOracle(task, batch, wrong, fallback=getattr(task, "true_id", task.pad_id)))

    class PerBatch:  # each batch has its own table; generation sees them all at once
        def __init__(self):
            self.table = {k: v for m in models for k, v in m.table.items()}
            self.model = models[0]
            self.model.table = self.table

        def __call__(self, tokens):
            return self.model(tokens)

        def prefill(self, tokens, max_length):
            return self.model.prefill(tokens, max_length)

        def step(self, token, state):
            return self.model.step(token, state)

    model = PerBatch()
    predictions = []
    teacher_forced(model, batches, contextlib.nullcontext, predictions)
    settled = sum(int(settled_rows(task, b, p).sum()) for b, p in zip(batches, predictions))
    full = generation_accuracy(model, task, batches, contextlib.nullcontext)
    decoded_full, model.model.rows_decoded = model.model.rows_decoded, 0
    quick = generation_accuracy(model, task, batches, contextlib.nullcontext, predictions)
    assert quick == full
    assert 0 < settled < 80 and decoded_full == 80 and model.model.rows_decoded == 80 - settled
    assert 0 < full < 1
    if task.uses_retriever:
        assert harmless_only > 10 and settled >= harmless_only
