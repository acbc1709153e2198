"""The peak-memory estimate that `plan` and `gpus_per_trial: auto` rely on: its
per-token activation counts equal what autograd really keeps, measured on CPU
with the layers' own code and a stand-in for mamba-ssm's scan that keeps what
the CUDA kernel keeps (selective_scan_fn: u, delta, A, B, C, D, z, delta_bias,
the per-chunk states and the ungated output)."""

import math

import pytest
import torch

import workloads.models.mamba.layer as mamba
from workloads.config import trial_config
from workloads.memory import activation_floats_per_token, estimate, trial_estimate
from workloads.models import PRESETS, build_model, preset
from workloads.models.config import CPU_ARCHS
from workloads.models.mamba import SCAN_CHUNK
from workloads.models.mamba.selective_scan import scan_cpu
from workloads.tasks import IsTreeConfig
from workloads.tasks.istree import IsTreeTask


class KernelSavingScan(torch.autograd.Function):
    """Forward only: computes the scan and saves for backward exactly the tensors,
    of the shapes and dtypes, that mamba-ssm's SelectiveScanFn saves with a gate z."""

    @staticmethod
    def forward(ctx, u, delta, A, B, C, D, z, delta_bias):
        batch, d_inner, length = u.shape
        dt = torch.nn.functional.softplus(delta + delta_bias[:, None])
        y, last = scan_cpu(u.transpose(1, 2).float(), dt.transpose(1, 2).float(), A, B.transpose(1, 2).float(),
                           C.transpose(1, 2).float())
        out = y.transpose(1, 2) + u * D[:, None]
        states = u.new_zeros(batch, d_inner, math.ceil(length / SCAN_CHUNK), 2 * A.shape[1], dtype=torch.float32)
        ctx.save_for_backward(u, delta, A, B, C, D, z, delta_bias, states, out)
        return out * torch.nn.functional.silu(z), last

    @staticmethod
    def backward(ctx, *grads):
        raise NotImplementedError("a stand-in for counting saved tensors")


def kernel_saving_scan(u, delta, A, B, C, D=None, z=None, delta_bias=None, delta_softplus=False, return_last_state=False):
    assert delta_softplus and return_last_state
    return KernelSavingScan.apply(u, delta, A, B, C, D, z, delta_bias)


def saved_bytes(model, tokens) -> int:
    """Bytes of the distinct storages autograd keeps for backward in a forward pass,
    weights and buffers left out (they live for the whole run)."""
    own = {t.untyped_storage().data_ptr() for t in [*model.parameters(), *model.buffers()]}
    seen = {}

    def pack(t):
        storage = t.untyped_storage()
        if storage.data_ptr() not in own:
            seen[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(tokens)
    return sum(seen.values())


@pytest.mark.parametrize("arch, size", [(a, s) for a in ("transformer", "mamba", "hybrid") for s in ("0.5M", "1M", "2M")])
def test_activation_count_is_what_autograd_keeps(monkeypatch, arch, size):
    cfg = preset(arch, size).with_fields(scan="cuda")  # the CUDA path, with the stand-in kernel
    monkeypatch.setattr(mamba, "mamba_ssm_scan", lambda: kernel_saving_scan)
    torch.manual_seed(0)
    model = build_model(cfg, vocab_size=81)
    batch, length = 2, 2 * SCAN_CHUNK  # two scan chunks
    tokens = torch.randint(0, 81, (batch, length))
    measured = saved_bytes(model, tokens)
    predicted = batch * length * activation_floats_per_token(cfg) * 4
    assert measured == pytest.approx(predicted, rel=0.02), (measured, predicted)


def _chunked_form_bytes(cfg) -> tuple[int, float]:
    """What autograd keeps for a model of `cfg` over 2 x 128 tokens, and what its count predicts."""
    torch.manual_seed(0)
    model = build_model(cfg, vocab_size=81)
    batch, length = 2, 128
    measured = saved_bytes(model, torch.randint(0, 81, (batch, length)))
    return measured, batch * length * activation_floats_per_token(cfg) * 4


@pytest.mark.parametrize("arch, size, dims", [("gated_deltanet", "0.5M", {}), ("gated_deltanet", "2M", {}),
                                             ("gated_deltanet_hybrid", "1M", {}),
                                             ("gated_deltanet", "tiny", {"heads": 4, "head_dim": 16, "chunk": 64}),
                                             ("gated_deltanet", "tiny", {"expand_v": 1, "chunk": 16})])
def test_gated_deltanet_count_is_what_its_chunked_form_keeps(arch, size, dims):
    """The form that trains wherever fla's backward does not run (GPUs included):
    the count is exact with two or more heads, and never below what is kept."""
    cfg = preset(arch, size).with_fields(scan="chunked", **dims)
    measured, predicted = _chunked_form_bytes(cfg)
    assert measured <= predicted <= (1.12 if cfg.mixer.heads == 1 else 1.01) * measured, (measured, predicted)


@pytest.mark.parametrize("arch, size, dims", [("rwkv7", "tiny", {}), ("rwkv7", "0.5M", {}), ("rwkv7_hybrid", "1M", {}),
                                             ("rwkv7", "tiny", {"chunk": 32, "head_dim": 16}),
                                             ("gated_deltaproduct", "tiny", {}), ("gated_deltaproduct", "0.5M", {}),
                                             ("gated_deltaproduct_hybrid", "1M", {}),
                                             ("gated_deltaproduct", "0.5M", {"householder": 3, "chunk": 16})])
def test_the_newest_rnns_counts_are_what_their_chunked_forms_keep(arch, size, dims):
    """RWKV-7 and Gated DeltaProduct train on our chunked forms wherever fla is not
    installed: their counts never fall below what autograd keeps, and stay within
    a quarter above it (at width 32; a twentieth at 64 and up)."""
    cfg = preset(arch, size).with_fields(scan="chunked", **dims)
    measured, predicted = _chunked_form_bytes(cfg)
    assert measured <= predicted <= 1.25 * measured, (measured, predicted)


@pytest.mark.parametrize("arch, size, dims", [("kda", "tiny", {}), ("kda", "2M", {}), ("kda_hybrid", "1M", {}),
                                             ("kda", "tiny", {"chunk": 32, "heads": 2}),
                                             ("gated_deltanet2", "0.5M", {}), ("gated_deltanet2_hybrid", "1M", {}),
                                             ("gated_deltanet2", "0.5M", {"chunk": 8})])
def test_the_channel_wise_delta_rules_counts_are_what_their_chunked_forms_keep(arch, size, dims):
    """Kimi Delta Attention and Gated DeltaNet-2 train on our chunked form wherever
    fla is not installed: their counts never fall below what autograd keeps, and
    stay within a twentieth above it."""
    cfg = preset(arch, size).with_fields(scan="chunked", **dims)
    measured, predicted = _chunked_form_bytes(cfg)
    assert measured <= predicted <= 1.05 * measured, (measured, predicted)


@pytest.mark.parametrize("setup", ["vanilla", "cot", "retrieval"])
def test_the_longest_sample_is_every_trees_and_bounds_every_batch(setup):
    for n in (4, 5, 16, 37, 64):
        config = IsTreeConfig(n=n, setup=setup)
        task = IsTreeTask(config)
        path, star = [(v + 1, v) for v in range(n - 1)], [(v, 0) for v in range(1, n)]
        assert len(task.render(path)["tokens"]) == len(task.render(star)["tokens"]) == config.longest_sample
        longest = max(int(task.batch(0, 0, i * 64, 64).lengths.max()) for i in range(4))
        assert longest == config.longest_sample  # a batch of 64 holds a tree
        assert task.vocab_size == config.vocab_size


def test_parameter_counts_without_building_equal_the_built_models():
    for arch in CPU_ARCHS:  # Mamba-3's are built on a GPU (tests/workloads/models/test_mamba3.py)
        for size, cfg in PRESETS[arch].items():
            assert cfg.n_params == build_model(cfg, vocab_size=33).num_params(), (arch, size)


def test_estimate_grows_with_graph_size_batch_and_setup_and_shrinks_in_bf16():
    def gib(setup="retrieval", n=32, batch=64, precision="fp32", arch="mamba"):
        trial = trial_config(arch, "1M", IsTreeConfig(n=n, setup=setup), batch_size=batch, precision=precision)
        return trial_estimate(trial).gib

    assert gib("vanilla") < gib("cot") < gib("retrieval")
    assert gib(n=16) < gib(n=32) < gib(n=64)
    assert gib(batch=32) < gib(batch=64)
    assert gib(precision="bf16") < gib()
    # The long retrieval trials are the ones that need a whole GPU: tens of GB.
    assert gib(n=64) > 10 and gib("vanilla", n=16) < 2


def test_estimate_parts_add_up():
    trial = trial_config("hybrid", "0.5M", IsTreeConfig(n=16, setup="cot"))
    e = estimate(trial, vocab_size=33, n_params=460_000)
    assert e.total == e.activations + e.logits + e.optimizer + e.overhead + e.validation
    assert e.optimizer == 460_000 * 16  # fp32 weights, gradients and Adam's two moments
    # The validation set is kept whole for the trial: tokens, targets and mask per padded position.
    assert e.validation == trial.train.val_samples * trial.task.longest_sample * 17


def test_an_array_keeps_its_members_activations_together_and_one_process_and_validation_set():
    """An array runs every layer on all its members' rows at once: what autograd
    keeps is its members' together (measured), and its estimate counts that, each
    member's logits, weights and Adam, and the worker and the validation set once
    (K lone estimates counted K of each, so `fuse: auto` and an array's GPU share
    asked for more than it uses)."""
    from workloads.arrays import ArrayModel
    from workloads.memory import array_estimate

    models = []
    for seed in range(3):
        torch.manual_seed(seed)
        models.append(build_model(preset("transformer", "0.5M"), vocab_size=81))
    tokens = torch.randint(0, 81, (2, 2 * SCAN_CHUNK))
    measured = saved_bytes(ArrayModel(models), tokens.repeat(3, 1))
    assert measured == pytest.approx(3 * saved_bytes(models[0], tokens), rel=0.02)
    trial = trial_config("transformer", "0.5M", IsTreeConfig(n=16, setup="retrieval"))
    one, three = trial_estimate(trial), array_estimate(trial, 3)
    assert (three.activations, three.logits) == (3 * one.activations, 3 * one.logits)
    assert three.optimizer == 3 * one.optimizer
    assert (three.overhead, three.validation) == (one.overhead, one.validation) and one.validation > 0


def test_the_largest_part_of_a_trial_that_cannot_fit_names_the_setting_that_lowers_it():
    """`train --val-samples 100000000000` trained on, building a validation set for
    minutes; the refusal named the batch size (issue 28, class 10)."""
    trial = trial_config("mamba", "tiny", IsTreeConfig(n=4, setup="cot"), val_samples=10**11)
    part, setting = estimate(trial, vocab_size=30, n_params=10_000).largest()
    assert part == "validation set" and "val_samples" in setting
    wide = trial_config("mamba", "tiny", IsTreeConfig(n=4, setup="cot"), batch_size=10**6)
    assert "batch_size" in estimate(wide, vocab_size=30, n_params=10_000).largest()[1]
