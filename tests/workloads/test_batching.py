"""Length-grouped micro-batches: the split is an exact optimum over cuts of the
sorted rows, and training on the groups gives the padded batch's loss and gradient."""

import itertools

import numpy as np
import pytest
import torch

from workloads import batching
from workloads.batching import OVERHEAD_FLOPS, group_rows, overhead_tokens, padded_tokens
from workloads.config import trial_config
from workloads.tasks import IsTreeConfig
from workloads.train import Trial


def _brute_force(lengths, max_groups, overhead):
    """The cheapest cost over every cut of the rows, sorted longest first, into at most max_groups groups."""
    ordered = sorted(lengths, reverse=True)
    best = np.inf
    for k in range(1, min(max_groups, len(ordered)) + 1):
        for cuts in itertools.combinations(range(1, len(ordered)), k - 1):
            bounds = (0, *cuts, len(ordered))
            best = min(best, sum((j - i) * ordered[i] + overhead for i, j in zip(bounds, bounds[1:])))
    return best


@pytest.mark.parametrize("seed", range(30))
def test_groups_hold_every_row_once_and_are_the_cheapest_split(seed):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 60, size=rng.integers(1, 9))
    max_groups, overhead = int(rng.integers(1, 5)), int(rng.integers(0, 40))
    groups = group_rows(lengths, max_groups, overhead, min_saving=0.0)
    assert sorted(np.concatenate(groups).tolist()) == list(range(len(lengths)))
    assert 1 <= len(groups) <= max_groups
    assert padded_tokens(lengths, groups) + overhead * len(groups) == _brute_force(lengths.tolist(), max_groups, overhead)


def test_no_overhead_and_enough_groups_leave_no_padding():
    lengths = np.array([5, 9, 5, 3, 9, 9])
    groups = group_rows(lengths, max_groups=3, overhead_tokens=0)
    assert padded_tokens(lengths, groups) == lengths.sum()
    assert group_rows(lengths, max_groups=1, overhead_tokens=0)[0].tolist() == [1, 4, 5, 0, 2, 3]  # stable, longest first


def test_a_large_overhead_keeps_one_padded_batch():
    assert len(group_rows(np.array([50, 2, 2, 2]), max_groups=4, overhead_tokens=10**6)) == 1


def test_widths_round_up_to_the_multiple():
    lengths = np.array([17, 15, 3])
    groups = group_rows(lengths, max_groups=3, overhead_tokens=0, multiple=8)
    assert padded_tokens(lengths, groups, multiple=8) == 24 + 16 + 8
    # With two groups either cut costs 56, and one 24-wide group 72.
    assert padded_tokens(lengths, group_rows(lengths, max_groups=2, overhead_tokens=0, multiple=8), multiple=8) == 56


def _gradients(arch: str, setup: str, groups: int):
    config = trial_config(arch, "tiny", IsTreeConfig(n=8, setup=setup), samples=1000, batch_size=24,
                          warmup_samples=10, lr=1e-3, length_groups=groups, device="cpu")
    trial = Trial(config)
    batch = trial.task.batch(0, 0, 0, 24)
    trial.optimizer.zero_grad(set_to_none=True)
    loss = trial.backward(batch)
    return loss, {name: p.grad.clone() for name, p in trial.model.named_parameters()}, batch


@pytest.mark.parametrize("arch", ["transformer", "mamba", "hybrid", "mamba2", "gated_deltanet"])
@pytest.mark.parametrize("setup", ["cot", "retrieval"])
def test_grouped_micro_batches_give_the_padded_batchs_loss_and_gradient(arch, setup, monkeypatch):
    monkeypatch.setitem(OVERHEAD_FLOPS, "cpu", 0.0)  # small batches: split them whatever the saving
    monkeypatch.setattr(batching, "MIN_SAVING", 0.0)
    loss_one, grads_one, batch = _gradients(arch, setup, groups=1)
    loss_many, grads_many, _ = _gradients(arch, setup, groups=4)
    lengths = batch.lengths.numpy()
    assert len(group_rows(lengths, 4, 0, min_saving=0.0)) > 1, "the batch must really be split for the test to mean anything"
    assert loss_many.item() == pytest.approx(loss_one.item(), rel=1e-5)
    for name, g in grads_one.items():
        scale = g.abs().max().item() + 1e-12
        assert (grads_many[name] - g).abs().max().item() <= 1e-4 * scale, name


def test_rows_pad_with_unsupervised_tokens():
    _, _, batch = _gradients("transformer", "cot", groups=1)
    part = batch.rows([2, 0], batch.tokens.shape[1] + 5)
    assert part.tokens.shape == (2, batch.tokens.shape[1] + 5)
    assert torch.equal(part.tokens[0, : batch.tokens.shape[1]], batch.tokens[2])
    assert not part.supervised[:, batch.tokens.shape[1]:].any()
    assert part.labels.tolist() == [batch.labels[2].item(), batch.labels[0].item()]


def test_a_groups_cost_in_tokens_falls_as_the_model_grows():
    tiny, large = overhead_tokens("cpu", 20_000), overhead_tokens("cpu", 2_000_000)
    assert tiny > 100 * large / 2 and large >= 1
    # A tiny model's CoT batch (little padding) stays whole; a retrieval batch of it is split.
    from workloads.tasks import IsTreeConfig, build_task

    for setup, whole in (("cot", True), ("retrieval", False)):
        lengths = build_task(IsTreeConfig(n=6, setup=setup)).batch(0, 0, 0, 64).lengths.numpy()
        assert (len(group_rows(lengths, 4, tiny)) == 1) == whole, setup


def test_a_split_that_saves_little_is_not_made():
    lengths = np.array([100] * 60 + [95] * 4)  # 0.3% padding
    assert len(group_rows(lengths, 4, 0)) == 1
    assert len(group_rows(lengths, 4, 0, min_saving=0.0)) == 2
