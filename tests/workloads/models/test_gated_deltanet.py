"""Gated DeltaNet's mixer: the chunked (WY/UT) form against the recurrence
(float64, values and gradients), cached decoding against the full forward,
causality, parameter and state counts, and fla's kernel against ours on a GPU."""

import warnings

import pytest
import torch
import torch.nn.functional as F

from tests.workloads.models import mixer_checks
from workloads.models.gated_deltanet import GatedDeltaNetConfig
from workloads.models.gated_deltanet.layer import (
    GatedDeltaNetMixer,
    delta_chunked,
    delta_recurrent,
    gated_deltanet_kernel,
    kernel_backward_refused,
    pick_kernel,
)


def _delta_inputs(batch=2, length=37, heads=3, dk=4, dv=6, seed=0):
    gen = torch.Generator().manual_seed(seed)

    def randn(*shape):
        return torch.randn(*shape, generator=gen, dtype=torch.float64)

    q = F.normalize(randn(batch, length, heads, dk), dim=-1) / dk**0.5
    k = F.normalize(randn(batch, length, heads, dk), dim=-1)
    v = randn(batch, length, heads, dv)
    g = -F.softplus(randn(batch, length, heads))
    beta = torch.sigmoid(randn(batch, length, heads))
    state = randn(batch, heads, dk, dv)
    return [t.requires_grad_() for t in (q, k, v, g, beta, state)]


@pytest.mark.parametrize("length,chunk", [(37, 8), (32, 8), (5, 16), (64, 64), (1, 4)])
@pytest.mark.parametrize("from_state", [False, True])
def test_chunked_delta_rule_equals_the_recurrence_in_values_and_gradients(length, chunk, from_state):
    names = ("q", "k", "v", "g", "beta", "state")
    mixer_checks.chunked_equals_recurrent(delta_chunked, delta_recurrent, _delta_inputs(length=length), names, chunk,
                                          from_state)


def test_the_delta_rule_overwrites_what_a_key_reads():
    """With beta = 1 and no decay, writing (k, v) makes k read exactly v, whatever
    the state held: the rule's point, and what plain linear attention lacks."""
    q, k, v, g, beta, state = (t.detach() for t in _delta_inputs(length=1))
    o, last = delta_recurrent(k * 1.0, k, v, torch.zeros_like(g), torch.ones_like(beta), state)
    torch.testing.assert_close(torch.einsum("bhkv,bhk->bhv", last, k[:, 0]), v[:, 0])


def test_strong_decay_over_a_long_chunk_stays_finite():
    q, k, v, g, beta, _ = _delta_inputs(length=64)
    with torch.no_grad():
        g.mul_(60)
    o, _ = delta_chunked(q, k, v, g, beta, chunk=64)
    o.sum().backward()
    assert torch.isfinite(o).all() and torch.isfinite(g.grad).all() and torch.isfinite(k.grad).all()
    torch.testing.assert_close(o, delta_recurrent(q, k, v, g, beta)[0])


@pytest.mark.parametrize("d_model,heads,head_dim,expand_v", [(16, 2, 4, 2), (64, 2, 32, 2), (128, 4, 32, 1)])
def test_parameter_and_state_counts_follow_the_shapes(d_model, heads, head_dim, expand_v):
    config = GatedDeltaNetConfig(heads=heads, head_dim=head_dim, expand_v=expand_v)
    mixer_checks.counts_follow_the_config(config, d_model)


def test_init_follows_flash_linear_attention():
    torch.manual_seed(0)
    mixer = GatedDeltaNetMixer(d_model=64, heads=256, head_dim=4)
    A = torch.exp(mixer.A_log)
    dt = F.softplus(mixer.dt_bias)
    assert 0 < A.min() and A.max() <= 16 and A.mean() > 6  # uniform on [0, 16]
    assert 1e-3 * 0.999 <= dt.min() and dt.max() <= 0.1 * 1.001
    assert (mixer.norm_weight == 1).all() and mixer.conv1d.bias is None


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available() or gated_deltanet_kernel() is None,
                    reason="needs CUDA and flash-linear-attention")
def test_fla_kernel_equals_our_chunked_form():
    """Values and gradients; where fla refuses its backward on this GPU (see
    kernel_backward_refused), values, and training falls back to ours."""
    mixer = GatedDeltaNetMixer(d_model=64, heads=2, head_dim=32, chunk=64).cuda()
    mixer_checks.kernel_equals_chunked(mixer, 64, gradients=not kernel_backward_refused())
    if kernel_backward_refused():
        h = torch.randn(2, 50, 64, device="cuda")
        mixer.scan = "auto"
        out = mixer(h)
        out.sum().backward()
        mixer.scan = "chunked"
        torch.testing.assert_close(out, mixer(h), rtol=0, atol=0)


def test_auto_takes_the_kernel_only_where_it_runs(monkeypatch):
    from workloads.models.gated_deltanet import layer as gated_deltanet

    def fake_kernel(*args, **kwargs):
        raise AssertionError("not called here")

    monkeypatch.setattr(gated_deltanet, "_import_kernel", lambda: (fake_kernel, ""))
    monkeypatch.setattr(gated_deltanet, "kernel_backward_refused", lambda: "")
    assert pick_kernel("auto", on_cuda=True, grad=True) is fake_kernel
    assert pick_kernel("auto", on_cuda=False, grad=False) is None
    assert pick_kernel("chunked", on_cuda=True, grad=False) is None
    refusal = "fla refuses the gated backward on Hopper with Triton 3.6.0"
    monkeypatch.setattr(gated_deltanet, "kernel_backward_refused", lambda: refusal)
    assert pick_kernel("auto", on_cuda=True, grad=False) is fake_kernel  # the forward is unaffected
    with pytest.warns(UserWarning, match="trains on our chunked form"):
        assert pick_kernel("auto", on_cuda=True, grad=True) is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once
        assert pick_kernel("auto", on_cuda=True, grad=True) is None
