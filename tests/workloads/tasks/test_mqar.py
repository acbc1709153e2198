"""MQAR as zoology generates it: layout, targets, the power law of the gaps, and
training on it (teacher-forced only: several answers per sample)."""

import numpy as np
import pytest
import torch

from workloads.config import trial_config
from workloads.evaluate import supervised_loss
from workloads.tasks import build_task
from workloads.tasks.mqar import MQARConfig
from workloads.train import run_trial


@pytest.mark.parametrize("random_non_queries", [False, True])
def test_every_sample_has_zoologys_layout(random_non_queries):
    config = MQARConfig(n=6, seq_len=64, vocab=200, random_non_queries=random_non_queries)
    batch = build_task(config).batch(seed=0, stream=0, start=0, count=300)
    n, half, space = config.n, config.vocab // 2, (config.seq_len - 2 * config.n) // 2
    assert batch.tokens.shape == (300, config.seq_len + 1) and batch.targets.shape == batch.tokens.shape
    for row in range(300):
        tokens, targets, sup = batch.tokens[row].tolist(), batch.targets[row].tolist(), batch.supervised[row].tolist()
        keys, values = tokens[0 : 2 * n : 2], tokens[1 : 2 * n : 2]
        assert len(set(keys)) == n and all(1 <= k < half for k in keys)
        assert len(set(values)) == n and all(half <= v < config.vocab for v in values)
        queries = [i - 1 for i, s in enumerate(sup) if s]  # a query's position predicts the next target
        assert len(queries) == n and all((q - 2 * n) % 2 == 0 and 0 <= (q - 2 * n) // 2 < space for q in queries)
        pairs = dict(zip(keys, values))
        assert sorted(tokens[q] for q in queries) == sorted(keys)  # every key queried once
        assert all(targets[q + 1] == pairs[tokens[q]] for q in queries)
        assert batch.labels[row].tolist() == [pairs[tokens[q]] for q in sorted(queries)]
        others = [t for i, t in enumerate(tokens[:-1]) if i >= 2 * n and i not in queries]
        if not random_non_queries:
            assert set(others) <= {0}


def test_gaps_follow_zoologys_power_law():
    config = MQARConfig(n=1, seq_len=64, vocab=128, random_non_queries=False)
    batch = build_task(config).batch(seed=1, stream=0, start=0, count=4000)
    gaps = ((batch.supervised[:, 1:].float().argmax(1) - 2 * config.n) // 2).numpy()
    space = (config.seq_len - 2) // 2
    p = np.array([config.power_a * g ** (config.power_a - 1) for g in range(1, space + 1)])
    p /= p.sum()
    freq = np.bincount(gaps, minlength=space) / len(gaps)
    assert abs(freq[0] - p[0]) < 0.03 and abs(freq[:4].sum() - p[:4].sum()) < 0.04
    assert freq[0] > 3 * freq[space // 2]  # near gaps far more likely than a uniform draw makes them


def test_samples_are_a_function_of_seed_stream_and_index():
    task = build_task(MQARConfig(n=4, seq_len=32, vocab=100))
    whole, part = task.batch(3, 0, 0, 20), task.batch(3, 0, 7, 5)
    assert torch.equal(whole.tokens[7:12], part.tokens) and torch.equal(whole.targets[7:12], part.targets)
    assert not torch.equal(whole.tokens, task.batch(3, 1, 0, 20).tokens)


def test_the_loss_is_on_the_values_which_are_not_the_next_inputs():
    task = build_task(MQARConfig(n=3, seq_len=32, vocab=100))
    batch = task.batch(0, 0, 0, 8)
    logits = torch.full((8, 32, 100), -30.0)
    logits.scatter_(2, batch.targets[:, 1:, None], 30.0)  # a model that predicts every target
    assert supervised_loss(logits, batch) < 1e-6
    assert not torch.equal(batch.tokens[:, 1:][batch.supervised[:, 1:]], batch.targets[:, 1:][batch.supervised[:, 1:]])


def test_configs_refuse_what_zoology_asserts():
    for kwargs, message in [(dict(n=4, seq_len=33), "even"), (dict(n=4, seq_len=64, vocab=64), "exceed seq_len"),
                            (dict(n=20, seq_len=64), "at least 4n")]:
        with pytest.raises(ValueError, match=message):
            MQARConfig(**kwargs)


def test_a_trial_on_mqar_trains_and_reports_no_generation_accuracy():
    config = trial_config("transformer", "tiny", MQARConfig(n=4, seq_len=32, vocab=64), lr=3e-3, samples=512,
                          batch_size=32, warmup_samples=64, eval_every=512, val_samples=64)
    metrics = run_trial(config)
    assert metrics["gen_accuracy"] is None and 0 <= metrics["val_exact_match"] <= 1 and metrics["val_loss"] > 0
