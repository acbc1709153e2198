"""Mamba-2's mixer: the chunked SSD form against the recurrence (float64, values
and gradients), cached decoding against the full forward, causality, parameter
and state counts, and mamba-ssm's kernel against ours on a GPU."""

import pytest
import torch

from tests.workloads.models import mixer_checks
from workloads.models.mamba2 import Mamba2Config
from workloads.models.mamba2.layer import (
    Mamba2Mixer,
    mamba2_kernel,
    ssd_chunked,
    ssd_recurrent,
)


def _ssd_inputs(batch=2, length=37, heads=3, headdim=4, d_state=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, length, heads, headdim, generator=g, dtype=torch.float64)
    dt = torch.nn.functional.softplus(torch.randn(batch, length, heads, generator=g, dtype=torch.float64))
    A = -torch.rand(heads, generator=g, dtype=torch.float64) * 4 - 0.1
    B = torch.randn(batch, length, d_state, generator=g, dtype=torch.float64)
    C = torch.randn(batch, length, d_state, generator=g, dtype=torch.float64)
    state = torch.randn(batch, heads, headdim, d_state, generator=g, dtype=torch.float64)
    return [t.requires_grad_() for t in (x, dt, A, B, C, state)]


@pytest.mark.parametrize("length,chunk", [(37, 8), (32, 8), (5, 16), (64, 64), (1, 4)])
@pytest.mark.parametrize("from_state", [False, True])
def test_chunked_ssd_equals_the_recurrence_in_values_and_gradients(length, chunk, from_state):
    names = ("x", "dt", "A", "B", "C", "state")
    mixer_checks.chunked_equals_recurrent(ssd_chunked, ssd_recurrent, _ssd_inputs(length=length), names, chunk,
                                          from_state)


def test_strong_decay_over_a_long_chunk_stays_finite():
    """exp(s_t - s_u) is masked before it is taken: above the diagonal s_t - s_u is
    large and positive, and an unmasked exp would overflow into inf * 0 = nan."""
    x, dt, A, B, C, _ = _ssd_inputs(length=64)
    with torch.no_grad():
        dt.mul_(50)
    y, last = ssd_chunked(x, dt, A, B, C, chunk=64)
    y.sum().backward()
    assert torch.isfinite(y).all() and torch.isfinite(x.grad).all() and torch.isfinite(dt.grad).all()
    torch.testing.assert_close(y, ssd_recurrent(x, dt, A, B, C)[0])


@pytest.mark.parametrize("d_model,d_state,expand,headdim", [(16, 8, 2, 8), (64, 16, 2, 32), (128, 64, 2, 64), (48, 4, 1, 16)])
def test_parameter_and_state_counts_follow_the_shapes(d_model, d_state, expand, headdim):
    mixer_checks.counts_follow_the_config(Mamba2Config(d_state=d_state, expand=expand, headdim=headdim), d_model)


def test_init_follows_mamba_ssm():
    torch.manual_seed(0)
    mixer = Mamba2Mixer(d_model=256, d_state=16, expand=2, headdim=8, n_layers=4)  # 64 heads
    A = torch.exp(mixer.A_log)
    dt = torch.nn.functional.softplus(mixer.dt_bias)
    assert 1 <= A.min() and A.max() <= 16
    assert 1e-3 * 0.999 <= dt.min() and dt.max() <= 0.1 * 1.001
    assert (mixer.D == 1).all() and (mixer.norm_weight == 1).all()
    bound = 1 / 512**0.5 / 4**0.5  # PyTorch's default bound, over sqrt(n_layers)
    assert mixer.out_proj.weight.abs().max() <= bound and mixer.out_proj.weight.abs().max() > 0.9 * bound


def test_a_width_the_heads_do_not_divide_is_refused():
    with pytest.raises(ValueError, match="expand \\* d_model \\(96\\) is not divisible by headdim 64"):
        Mamba2Mixer(d_model=48, headdim=64)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available() or mamba2_kernel() is None, reason="needs CUDA and mamba-ssm")
def test_mamba_ssm_kernel_equals_our_chunked_form():
    mixer_checks.kernel_equals_chunked(Mamba2Mixer(d_model=64, d_state=16, headdim=32, chunk=64).cuda(), 64)
