"""Trial arrays (workloads/arrays.py, issue 50): an array of K members with their
own rates and seeds equals the K trials trained alone, step by step (losses,
gradients, weights, within fp32 rounding), for every family; a member whose loss
is not finite fails alone, at the step its lone trial would, and the others stay
equal to their lone runs."""

import time

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from workloads.arrays import MembersInTurn, TrialArray
from workloads.models.stacked import StackedLinear, StackedRMSNorm
from workloads.config import trial_config
from workloads.models.config import CPU_ARCHS, preset
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
    """Weights after `steps` steps at peak rate `rate`: each tensor within 3e-4 of
    its norm, each element within one step at the rate. Losses and gradients agree
    to rounding; Adam divides each gradient by its own scale, so where a gradient is
    rounding noise (the final norm's weight along the embedding's last, nearly
    constant column; in a hybrid, whose attention layer feeds the head with no norm
    between, that column too) another order of sums moves a weight by a share of the
    rate: measured on every family, at most 0.13 lr per element and 6.9e-5 of a
    tensor's norm (gated_deltanet's norm weight, on one CPU of the project's).
    Against it, on the Transformer, Mamba, Gated DeltaNet, RWKV-7 and the hybrid: a
    member stepped at a rate 5% off, 4.2e-3 to 0.22 of the norm; clipped by the
    array's norm instead of its own, 1.1e-3 to 0.17 of it: both fail this."""
    assert a.keys() == b.keys(), what
    for key in a:
        delta = (a[key] - b[key]).detach()
        assert delta.norm() <= 3e-4 * b[key].detach().norm() + 1e-7, (what, key, float(delta.norm() / b[key].norm()))
        assert delta.abs().max() <= rate, (what, key, float(delta.abs().max() / rate))


@pytest.mark.parametrize("arch", CPU_ARCHS)
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


@pytest.mark.parametrize("arch", CPU_ARCHS)
def test_which_parts_fuse(arch, thread_pools):
    """What docs/gpu.md says: every Linear and RMSNorm is stacked and every family's
    recurrent mixer has a fused form of its own: no part runs its members in turn."""
    from workloads.models.gated_deltanet.array import StackedDeltaRuleMixer
    from workloads.models.mamba.array import StackedMambaMixer
    from workloads.models.log_linear_mamba2.array import StackedLogLinearMamba2Mixer
    from workloads.models.mamba2.array import StackedMamba2Mixer
    from workloads.models.rwkv7.array import StackedRWKV7Mixer

    forms = {"mamba": StackedMambaMixer, "mamba2": StackedMamba2Mixer, "gated_deltanet": StackedDeltaRuleMixer,
             "gated_deltaproduct": StackedDeltaRuleMixer, "rwkv7": StackedRWKV7Mixer, "kda": StackedDeltaRuleMixer,
             "gated_deltanet2": StackedDeltaRuleMixer, "log_linear_mamba2": StackedLogLinearMamba2Mixer}
    model = preset(arch, "tiny")
    parts = TrialArray(_configs(arch, rates=RATES[:2], seeds=SEEDS[:2])).model.parts
    assert not [p for p, m in parts.items() if isinstance(m, MembersInTurn)], arch
    assert all(isinstance(parts[p], StackedLinear) for p in parts if p.endswith(("q_proj", "down_proj")))
    assert all(isinstance(parts[p], StackedRMSNorm) for p in parts if p.endswith("norm"))
    recurrent = {f"layers.{i}.mixer" for i, layer in enumerate(model.layers) if layer != "attention"}
    assert {p for p, m in parts.items() if isinstance(m, forms.get(model.mixer.name, ()))} == recurrent, arch


def test_trials_that_differ_in_more_than_rate_and_seed_are_refused():
    a, b = _configs("transformer", rates=RATES[:1]) + _configs("transformer", rates=RATES[1:2], batch_size=8)
    with pytest.raises(ValueError, match=r"cannot train in one array with .*train\.batch_size"):
        TrialArray([a, b])


class _Ops(TorchDispatchMode):
    """Counts the operators called (a multi-tensor call counts once)."""

    def __init__(self):
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.count += 1
        return func(*args, **(kwargs or {}))


def _optimiser_ops(k: int) -> tuple[int, int]:
    """The operators one clip and one Adam step of an array of k tiny Transformers call."""
    array = TrialArray(_configs("transformer", rates=[1e-3] * k, seeds=range(k)))
    array.step()
    counted = []
    for run in (lambda: array.optimizer.clip(0.5), lambda: array.optimizer.step({j: 1e-3 for j in range(k)})):
        with _Ops() as ops:
            run()
        counted.append(ops.count)
    return tuple(counted)


def test_an_arrays_optimiser_calls_do_not_grow_with_its_parameters_times_its_members(thread_pools):
    """Adam's step is the same few multi-tensor calls for any K, and clipping adds
    three per member (its norm, its coefficient, its scaling), where a loop over each member's slice
    of each parameter made a step's kernel launches (and, on a GPU, its wait on
    them) grow with both."""
    (clip_2, adam_2), (clip_5, adam_5) = _optimiser_ops(2), _optimiser_ops(5)
    assert adam_5 == adam_2 <= 12
    assert clip_5 - clip_2 <= 3 * 3


@pytest.mark.gpu
@pytest.mark.parametrize("arch", ["transformer", "mamba", "hybrid"])
def test_an_arrays_step_never_waits_on_the_gpu(arch):
    """An array's step (its batches' copies, forward, backward, clipping and Adam)
    queues work without a host-device sync: torch's sync debug mode raises on one."""
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    array = TrialArray(_configs(arch, setup="retrieval", device="cuda", length_groups=4))
    array.step()
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(3):
            array.step()
    finally:
        torch.cuda.set_sync_debug_mode(0)
    torch.cuda.synchronize()


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


FUSED_FAMILIES = ["mamba2", "gated_deltanet", "gated_deltaproduct", "rwkv7", "kda", "gated_deltanet2",
                  "log_linear_mamba2"]


def _fused_forms() -> dict:
    """family: (its mixer, the mixer's fused form, the library of its CUDA kernel, that kernel or None here)."""
    from workloads.models.gated_deltanet.array import StackedDeltaRuleMixer
    from workloads.models.gated_deltanet.layer import GatedDeltaNetMixer, gated_deltanet_kernel, kernel_backward_refused
    from workloads.models.gated_deltanet2.layer import GatedDeltaNet2Mixer
    from workloads.models.gated_deltaproduct.layer import GatedDeltaProductMixer
    from workloads.models.kda.layer import KimiDeltaAttentionMixer
    from workloads.models.log_linear_mamba2.array import StackedLogLinearMamba2Mixer
    from workloads.models.log_linear_mamba2.layer import LogLinearMamba2Mixer
    from workloads.models.log_linear_mamba2.layer import _import_kernel as log_linear_kernel
    from workloads.models.mamba2.array import StackedMamba2Mixer
    from workloads.models.mamba2.layer import Mamba2Mixer, mamba2_kernel
    from workloads.models.rwkv7.array import StackedRWKV7Mixer
    from workloads.models.recurrent_parts import optional_kernel
    from workloads.models.rwkv7.layer import RWKV7Mixer, rwkv7_kernel

    fla = gated_deltanet_kernel() if not kernel_backward_refused() else None
    return {"mamba2": (Mamba2Mixer, StackedMamba2Mixer, "mamba-ssm", mamba2_kernel()),
            "gated_deltanet": (GatedDeltaNetMixer, StackedDeltaRuleMixer, "fla", fla),
            "gated_deltaproduct": (GatedDeltaProductMixer, StackedDeltaRuleMixer, "fla", fla),
            "rwkv7": (RWKV7Mixer, StackedRWKV7Mixer, "fla", rwkv7_kernel()),
            **{family: (mixer, StackedDeltaRuleMixer, "fla", optional_kernel(*mixer.KERNEL)[0])
               for family, mixer in (("kda", KimiDeltaAttentionMixer), ("gated_deltanet2", GatedDeltaNet2Mixer))},
            "log_linear_mamba2": (LogLinearMamba2Mixer, StackedLogLinearMamba2Mixer, "fla", log_linear_kernel()[0])}


def _fused_equals_in_turn(family: str, device: str, scan: str, rtol: float, atol: float):
    """Three members (their own seeds, every parameter moved off its init, which
    zeroes some outputs) as one fused mixer and each on its rows in turn: the same
    outputs and gradients. Returns the fused mixer."""
    mixer, fused_form, _, _ = _fused_forms()[family]
    members = []
    for seed in range(3):
        torch.manual_seed(seed)
        member = mixer(64, n_layers=2, scan=scan)
        with torch.no_grad():
            for p in member.parameters():
                p.add_(0.1 * torch.randn_like(p))
        members.append(member.to(device))
    fused, alone = fused_form(members).to(device), MembersInTurn(members).to(device)
    h = torch.randn(3 * 4, 50, 64, device=device)
    inputs = h.clone().requires_grad_(), h.clone().requires_grad_()
    out_fused, out_alone = fused(inputs[0]), alone(inputs[1])
    torch.testing.assert_close(out_fused, out_alone, rtol=rtol, atol=atol)
    g = torch.randn_like(out_fused)
    (out_fused * g).sum().backward()
    (out_alone * g).sum().backward()
    torch.testing.assert_close(inputs[0].grad, inputs[1].grad, rtol=10 * rtol, atol=10 * atol)
    for name, p in fused.named_parameters():
        for k, member in enumerate(alone.members):
            torch.testing.assert_close(p.grad[k], member.get_parameter(name).grad, rtol=10 * rtol, atol=10 * atol,
                                       msg=lambda m: f"{family} {name} member {k}: {m}")
    return fused


@pytest.mark.parametrize("scan", ["chunked", "recurrent"])
@pytest.mark.parametrize("family", FUSED_FAMILIES)
def test_a_fused_mixer_equals_its_members_each_in_turn(family, scan, thread_pools):
    """A newer mixer's fused form (its scan once over every member's rows, its
    per-head parameters laid out per row) in each of its CPU forms (log-linear
    Mamba-2's that trains is its quadratic one)."""
    if scan == "chunked" and family == "log_linear_mamba2":
        scan = "quadratic"
    fused = _fused_equals_in_turn(family, "cpu", scan, rtol=1e-4, atol=1e-5)
    assert fused.scan_ran == scan


@pytest.mark.gpu
@pytest.mark.parametrize("family", FUSED_FAMILIES)
def test_a_fused_mixers_cuda_kernel_equals_its_members_each_in_turn(family):
    """The kernel once for every member (Mamba-2: heads side by side, B and C by
    group; the fla mixers: over every member's rows)."""
    _, _, library, kernel = _fused_forms()[family]
    if not torch.cuda.is_available() or kernel is None:
        pytest.skip(f"needs CUDA and {library}'s kernel (with its backward on this GPU)")
    fused = _fused_equals_in_turn(family, "cuda", "auto", rtol=1e-3, atol=1e-4)
    assert fused.scan_ran == library
