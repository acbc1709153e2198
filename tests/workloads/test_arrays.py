"""Trial arrays (workloads/arrays.py, issue 50): an array of K members with their
own rates and seeds equals the K trials trained alone, step by step (losses,
gradients, weights, within fp32 rounding), for every family; a member whose loss
is not finite fails alone, at the step its lone trial would, and the others stay
equal to their lone runs."""

import time

import pytest
import torch

from workloads.arrays import MembersInTurn, TrialArray
from workloads.models.stacked import StackedLinear, StackedRMSNorm
from workloads.config import trial_config
from workloads.models.config import PRESETS, preset
from workloads.models.mamba.layer import mamba_ssm_scan
from workloads.tasks import IsTreeConfig
from workloads.train import NonFiniteLoss, Trial, _Run

STEPS = 4
RATES, SEEDS = (3e-3, 1e-3, 5e-3), (0, 1, 2)


def _configs(arch, rates=RATES, seeds=SEEDS, **train):
    """Both sides in one pass per batch (length_groups 1), rows in the batch's order:
    a tiny lone trial never splits its batch, an array may (its micro-batch overhead
    is shared by K members), and another order of sums matters here. The embedding's
    last column is nearly constant over the vocabulary, so in a hybrid, whose
    attention layer feeds the head with no norm between, the gradient along it is
    rounding noise, which Adam scales to the rate. The array's grouping is checked
    on its own below, on losses and gradients."""
    protocol = dict(samples=4096, batch_size=16, warmup_samples=32, eval_every=4096, val_samples=16, eval_batch_size=16,
                    grad_clip=0.5, length_groups=1) | train
    setup = protocol.pop("setup", "cot")
    return [trial_config(arch, "tiny", IsTreeConfig(n=6, setup=setup), lr=lr, seed=seed, **protocol)
            for lr, seed in zip(rates, seeds)]


def _alone(config, steps):
    """A lone trial's losses over `steps` steps (its own loop: length groups, its
    AdamW, LambdaLR and clip_grad_norm_), and the trial; stops at a NonFiniteLoss."""
    trial = Trial(config)
    trial.model.train()
    run, losses = _Run(trial, None, None, (), time.monotonic), []
    for _ in range(steps):
        run.train_step()
        losses.append(float(run.pending[-1]))
    return losses, trial


def _close(a, b, what, atol=2e-6):
    assert a.keys() == b.keys(), what
    for key in a:
        torch.testing.assert_close(a[key], b[key], rtol=2e-4, atol=atol, msg=lambda m: f"{what} {key}: {m}")


def _weights_close(a, b, rate, steps, what):
    """Weights after `steps` steps at peak rate `rate`: within 1% of what those steps
    can move a weight. Losses and gradients agree to rounding; Adam divides each
    gradient by its own scale, so where a gradient is rounding noise (in a hybrid,
    whose attention layer feeds the head with no norm between, along the
    embedding's last, near-constant column) another order of sums moves a weight by
    a share of the rate. A member stepped at another's rate, or clipped by the
    array's norm, differs by whole updates (both mutations fail this)."""
    _close(a, b, what, atol=0.01 * rate * steps)


@pytest.mark.parametrize("arch", list(PRESETS))
def test_an_array_equals_its_members_trained_alone(arch, thread_pools):
    configs = _configs(arch)
    array = TrialArray(configs)
    for k, trial in enumerate(array.trials):  # each member starts as its lone trial does (its seed's init)
        _close(array.member_model(k).state_dict(), Trial(configs[k]).model.state_dict(), f"{arch} init member {k}")
    steps = torch.stack([array.step() for _ in range(STEPS)], dim=1)  # (K, STEPS)
    for k, config in enumerate(configs):
        losses, lone = _alone(config, STEPS)
        torch.testing.assert_close(steps[k], torch.tensor(losses), rtol=1e-5, atol=1e-6)
        grads = {n: p.grad for n, p in lone.model.named_parameters() if p.grad is not None}
        _close(array.model.member_state(k, grads=True), grads, f"{arch} gradient member {k}")
        weights = dict(lone.model.named_parameters())
        _weights_close(dict(array.member_model(k).named_parameters()), weights, config.train.lr, STEPS,
                       f"{arch} weights member {k}")


def test_a_diverging_member_fails_alone_at_its_lone_trials_step(thread_pools):
    rates = (3e-3, 1e12, 5e-3)  # the second diverges
    configs = _configs("transformer", rates=rates)
    with pytest.raises(NonFiniteLoss) as lone_failure:
        trial = Trial(configs[1])
        run = _Run(trial, None, None, (), time.monotonic)
        for _ in range(32):
            step, _ = run.train_step()
        run.flush_losses(step)
    array = TrialArray(configs)
    for step in range(1, 9):
        ended = array.check(array.step(), step)
        assert ended == ([1] if step == lone_failure.value.step else []), (step, ended)
    assert list(array.failed) == [1] and array.failed[1].step == lone_failure.value.step
    for k in (0, 2):
        losses, lone = _alone(configs[k], 8)
        _weights_close(dict(array.member_model(k).named_parameters()), dict(lone.model.named_parameters()),
                       rates[k], 8, f"member {k}")


@pytest.mark.parametrize("arch", ["transformer", "mamba", "hybrid"])
def test_an_arrays_length_groups_change_its_losses_and_gradients_only_by_rounding(arch, thread_pools):
    """Grouped into micro-batches on the widest member's length at each place (a
    retrieval batch, long rows of unequal length), one step gives each member the
    loss and gradient of the batch in one pass."""
    grouped = TrialArray(_configs(arch, setup="retrieval", length_groups=4, batch_size=32))
    whole = TrialArray(_configs(arch, setup="retrieval", length_groups=1, batch_size=32))
    grouped.group_overhead = 0  # split wherever padding is saved
    assert len(grouped.batches()[0]) > 1 and len(whole.batches()[0]) == 1
    torch.testing.assert_close(grouped.step(), whole.step(), rtol=1e-5, atol=1e-6)
    assert grouped.samples == whole.samples == 32
    for k in range(grouped.k):
        _close(grouped.model.member_state(k, grads=True), whole.model.member_state(k, grads=True), f"{arch} member {k}")


def test_which_parts_fuse(thread_pools):
    """What docs/gpu.md says: every Linear and RMSNorm of the Transformer is stacked;
    Mamba's mixer has a fused form; a mixer without one runs its members in turn,
    its layer's norm stacked."""
    from workloads.models.mamba.array import StackedMambaMixer

    for arch, kind in (("transformer", None), ("hybrid", StackedMambaMixer), ("mamba2", MembersInTurn)):
        parts = TrialArray(_configs(arch, rates=RATES[:2], seeds=SEEDS[:2])).model.parts
        assert not [p for p, m in parts.items() if isinstance(m, MembersInTurn) and kind is not MembersInTurn], arch
        assert all(isinstance(parts[p], StackedLinear) for p in parts if p.endswith(("q_proj", "down_proj")))
        assert all(isinstance(parts[p], StackedRMSNorm) for p in parts if p.endswith("norm"))
        if kind is not None:
            recurrent = {f"layers.{i}.mixer" for i, layer in enumerate(preset(arch, "tiny").layers) if layer != "attention"}
            assert {p for p, m in parts.items() if isinstance(m, kind)} == recurrent, arch


def test_trials_that_differ_in_more_than_rate_and_seed_are_refused():
    a, b = _configs("transformer", rates=RATES[:1]) + _configs("transformer", rates=RATES[1:2], batch_size=8)
    with pytest.raises(ValueError, match=r"cannot train in one array with .*train\.batch_size"):
        TrialArray([a, b])


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available() or mamba_ssm_scan() is None, reason="needs CUDA and mamba-ssm")
def test_the_fused_mamba_scan_on_cuda_equals_its_members_each_in_turn():
    """One selective-scan call for K members (channels side by side, B and C by
    group) gives each member's output and gradients of its own mixer."""
    from workloads.models.mamba.array import StackedMambaMixer
    from workloads.models.mamba.layer import MambaMixer

    members = []
    for seed in range(3):
        torch.manual_seed(seed)
        members.append(MambaMixer(64, n_layers=2).cuda())
    fused, alone = StackedMambaMixer(members).cuda(), MembersInTurn(members).cuda()
    h = torch.randn(3 * 4, 50, 64, device="cuda", requires_grad=True)
    out_fused, out_alone = fused(h), alone(h)
    torch.testing.assert_close(out_fused, out_alone, rtol=1e-4, atol=1e-5)
    g = torch.randn_like(out_fused)
    (out_fused * g).sum().backward()
    (out_alone * g).sum().backward()
    for name, p in fused.named_parameters():
        for k, member in enumerate(alone.members):
            torch.testing.assert_close(p.grad[k], member.get_parameter(name).grad, rtol=1e-3, atol=1e-4, msg=name)
