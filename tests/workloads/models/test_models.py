"""Invariants of the model families: sizes, causality, cached decoding, scan kernels."""

import json

import pytest
import torch
from typer.testing import CliRunner

from orchestrator.cli import app
from workloads.models import PAPER_PARAMS, PRESETS, build_model, preset
from workloads.models.mamba import MambaMixer, mamba_ssm_scan
from workloads.models.selective_scan import scan_cpu, scan_reference

VOCAB = 27
ARCHS = list(PRESETS)


@pytest.mark.parametrize("arch,size", sorted(PAPER_PARAMS))
def test_presets_match_the_paper_parameter_counts(arch, size):
    params = build_model(preset(arch, size), VOCAB).num_params()
    assert abs(params / PAPER_PARAMS[arch, size] - 1) < 0.02


def test_parameter_count_does_not_depend_on_the_vocabulary():
    cfg = preset("hybrid", "tiny")
    assert build_model(cfg, 20).num_params() == build_model(cfg, 200).num_params()


def test_unknown_names_list_the_valid_ones():
    with pytest.raises(ValueError, match="transformer, mamba, hybrid"):
        preset("rwkv", "1M")
    with pytest.raises(ValueError, match="tiny, 0.5M, 1M, 2M"):
        preset("mamba", "3M")


def test_hybrid_layout_is_data():
    cfg = preset("hybrid", "0.5M")
    kinds = [type(layer).__name__ for layer in build_model(cfg, VOCAB).layers]
    assert kinds == ["MambaLayer"] * 12 + ["AttentionLayer"]
    other = cfg.model_copy(update={"attn_layer_idx": (0, 6)})
    kinds = [type(layer).__name__ for layer in build_model(other, VOCAB).layers]
    assert kinds.count("AttentionLayer") == 2 and kinds[0] == kinds[6] == "AttentionLayer"


def _model(arch, size="tiny", seed=0):
    torch.manual_seed(seed)
    model = build_model(preset(arch, size), VOCAB).eval()
    # Random (not initial) parameters, so that every path carries signal.
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    return model


@pytest.mark.parametrize("arch", ARCHS)
def test_changing_a_future_token_leaves_earlier_logits_unchanged(arch):
    model = _model(arch)
    tokens = torch.randint(0, VOCAB, (3, 40))
    changed = tokens.clone()
    changed[:, 25:] = torch.randint(0, VOCAB, (3, 15))
    with torch.no_grad():
        a, b = model(tokens), model(changed)
    torch.testing.assert_close(a[:, :25], b[:, :25], rtol=0, atol=1e-5)
    assert not torch.allclose(a[:, 25:], b[:, 25:])


@pytest.mark.parametrize("size", ["tiny", "0.5M"])
@pytest.mark.parametrize("arch", ARCHS)
def test_incremental_decoding_matches_the_full_forward(arch, size):
    model = _model(arch, size)
    tokens = torch.randint(0, VOCAB, (4, 48))
    prompt = 20
    with torch.no_grad():
        full = model(tokens)
        logits, state = model.prefill(tokens[:, :prompt], max_length=tokens.shape[1])
        steps = [logits]
        for t in range(prompt, tokens.shape[1] - 1):
            steps.append(model.step(tokens[:, t], state))
    torch.testing.assert_close(torch.stack(steps, 1), full[:, prompt - 1 : -1], rtol=1e-4, atol=1e-4)


def _scan_inputs(batch, length, d_inner, n_state, dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    u = torch.randn(batch, length, d_inner, generator=g, dtype=dtype)
    dt = torch.rand(batch, length, d_inner, generator=g, dtype=dtype) * 0.3 + 1e-3
    A = -torch.rand(d_inner, n_state, generator=g, dtype=dtype) * 8 - 0.1
    Bm = torch.randn(batch, length, n_state, generator=g, dtype=dtype)
    C = torch.randn(batch, length, n_state, generator=g, dtype=dtype)
    return [t.requires_grad_() for t in (u, dt, A, Bm, C)]


@pytest.mark.parametrize("shape", [(2, 1, 3, 16), (3, 37, 8, 16), (5, 130, 4, 4)])
def test_compiled_scan_equals_the_reference_in_values_and_gradients(shape):
    ref_in = _scan_inputs(*shape)
    y_ref, last_ref = scan_reference(*ref_in)
    dy = torch.randn_like(y_ref)
    grads_ref = torch.autograd.grad(y_ref, ref_in, dy)
    cpu_in = [t.detach().float().requires_grad_() for t in ref_in]
    y, last = scan_cpu(*cpu_in)
    grads = torch.autograd.grad(y, cpu_in, dy.float())
    torch.testing.assert_close(y.double(), y_ref, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(last.double(), last_ref, rtol=1e-4, atol=1e-4)
    for name, g, g_ref in zip(("u", "dt", "A", "B", "C"), grads, grads_ref):
        scale = g_ref.abs().max()
        assert (g.double() - g_ref).abs().max() <= 1e-4 * scale + 1e-6, name


@pytest.mark.parametrize("arch", ["mamba", "hybrid"])
def test_compiled_and_reference_paths_train_the_same_model(arch):
    torch.manual_seed(0)
    tokens = torch.randint(0, VOCAB, (2, 30))
    grads = {}
    for impl in ("cpu", "reference"):
        model = _model(arch)
        for m in model.modules():
            if isinstance(m, MambaMixer):
                m.scan_impl = impl
        model(tokens).logsumexp(-1).mean().backward()
        grads[impl] = {n: p.grad for n, p in model.named_parameters()}
    for name, g in grads["cpu"].items():
        torch.testing.assert_close(g, grads["reference"][name], rtol=1e-3, atol=1e-5, msg=name)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available() or mamba_ssm_scan() is None, reason="needs CUDA and mamba-ssm")
@pytest.mark.parametrize("arch", ["mamba", "hybrid"])
def test_mamba_ssm_kernel_path_equals_our_path(arch):
    model = _model(arch, "0.5M").cuda()
    tokens = torch.randint(0, VOCAB, (4, 200), device="cuda")
    outputs = {}
    for impl in ("cuda", "reference"):
        for m in model.modules():
            if isinstance(m, MambaMixer):
                m.scan_impl = impl
        model.zero_grad()
        logits = model(tokens)
        logits.logsumexp(-1).mean().backward()
        outputs[impl] = (logits.detach(), [p.grad.clone() for p in model.parameters()])
    torch.testing.assert_close(outputs["cuda"][0], outputs["reference"][0], rtol=1e-3, atol=1e-3)
    for g, g_ref in zip(outputs["cuda"][1], outputs["reference"][1]):
        torch.testing.assert_close(g, g_ref, rtol=1e-2, atol=1e-4)


def test_models_command_lists_every_preset_as_json():
    result = CliRunner().invoke(app, ["models", "--format", "json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)
    assert {(r["arch"], r["size"]) for r in rows} == {(a, s) for a in PRESETS for s in PRESETS[a]}
    for r in rows:
        assert r["params"] == build_model(preset(r["arch"], r["size"]), VOCAB).num_params()
