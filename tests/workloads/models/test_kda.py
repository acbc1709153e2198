"""Kimi Delta Attention's mixer: both our forms against flash-linear-attention's
references (fla/ops/kda/naive.py) in values and gradients, our chunked form against
our recurrence in float64, the parameter and state counts, fla's init, and fla's
kernel against ours on a GPU."""

import math

import pytest
import torch

from tests.workloads.models import mixer_checks
from tests.workloads.models.fla_reference import channel_delta_inputs, equal_in_values_and_gradients, fla_naive
from workloads.models.channel_delta_rule import channel_delta_chunked
from workloads.models.kda import KimiDeltaAttentionConfig
from workloads.models.kda.layer import KimiDeltaAttentionMixer
from workloads.models.recurrent_parts import optional_kernel

NAMES = ("q", "k", "v", "g", "beta", "state")


def _ours(form, chunk=8):
    """The layer's scan (its erase key and write value from beta, then `form`)."""
    mixer = KimiDeltaAttentionMixer(d_model=16, heads=1, head_dim=4, chunk=chunk, scan=form)
    return lambda q, k, v, g, beta, state: mixer._scan(q, k, v, g, beta, state=state)


@pytest.mark.parametrize("form", ["recurrent", "chunked"])
@pytest.mark.parametrize("reference", ["naive_recurrent_kda", "naive_chunk_kda"])
def test_our_forms_equal_flash_linear_attentions_references(form, reference):
    """fla's references compute in float32 (they cast their inputs); its chunked one
    takes whole chunks of 16 here (it pads nothing), ours chunks of 8 over 48 tokens."""
    theirs = fla_naive("kda", reference)
    extra = {"chunk_size": 16} if reference == "naive_chunk_kda" else {}
    inputs = channel_delta_inputs(length=48)
    equal_in_values_and_gradients(
        _ours(form), lambda q, k, v, g, beta, state: theirs(q, k, v, g, beta, scale=1.0, initial_state=state,
                                                           output_final_state=True, **extra),
        inputs, NAMES)


@pytest.mark.parametrize("length,chunk", [(37, 8), (32, 8), (5, 16), (64, 64), (1, 4)])
@pytest.mark.parametrize("from_state", [False, True])
def test_chunked_form_equals_the_recurrence_in_values_and_gradients(length, chunk, from_state):
    inputs = channel_delta_inputs(length=length, dtype=torch.float64)
    tensors = [inputs[n].requires_grad_() for n in NAMES]
    mixer_checks.chunked_equals_recurrent(lambda *a, chunk, state: _ours("chunked", chunk)(*a, state),
                                          lambda *a, state: _ours("recurrent")(*a, state),
                                          tensors, NAMES, chunk, from_state)


def test_a_channel_that_decays_fast_forgets_while_a_slow_one_keeps():
    """The point of a decay per channel: after 20 tokens of no input, a key channel
    with log-decay -3 per token has forgotten what it held, one with -0.001 keeps it."""
    inputs = channel_delta_inputs(batch=1, length=20, heads=1, dk=2, dv=3, dtype=torch.float64)
    g = torch.tensor([-3.0, -0.001], dtype=torch.float64).expand(1, 20, 1, 2)
    zero = torch.zeros_like(inputs["k"])
    _, last = channel_delta_chunked(zero, zero, torch.zeros_like(inputs["v"]), g, zero, chunk=8,
                                    state=inputs["state"])
    assert last[0, 0, 0].abs().max() < 1e-20
    torch.testing.assert_close(last[0, 0, 1], inputs["state"][0, 0, 1] * math.exp(-0.02))


@pytest.mark.parametrize("d_model,heads,head_dim,expand_v", [(16, 2, 4, 2), (64, 2, 32, 1), (128, 4, 20, 1)])
def test_parameter_and_state_counts_follow_the_shapes(d_model, heads, head_dim, expand_v):
    config = KimiDeltaAttentionConfig(heads=heads, head_dim=head_dim, expand_v=expand_v)
    mixer_checks.counts_follow_the_config(config, d_model)


def test_init_follows_flash_linear_attention():
    """A uniform in [1, 16] per head, dt log-uniform in [1e-3, 0.1] per key channel,
    the norm's weight one, the low-rank gate projections' shapes fla's."""
    torch.manual_seed(0)
    mixer = KimiDeltaAttentionMixer(d_model=64, heads=256, head_dim=4)
    A = torch.exp(mixer.A_log)
    dt = torch.nn.functional.softplus(mixer.dt_bias)
    assert 1 <= A.min() and A.max() <= 16 * 1.0001 and A.mean() > 7
    assert mixer.dt_bias.shape == (256 * 4,) and 1e-3 * 0.999 <= dt.min() and dt.max() <= 0.1 * 1.001
    assert (mixer.norm_weight == 1).all() and mixer.conv1d.bias is None
    assert mixer.f_up.weight.shape == (256 * 4, 4) and mixer.f_up.bias is None
    assert mixer.g_up.weight.shape == (256 * 4, 4) and mixer.g_up.bias is not None


def test_auto_takes_the_kernel_only_on_cuda(monkeypatch):
    from workloads.models.kda import layer

    monkeypatch.setattr(layer, "optional_kernel", lambda module, name: (f"{module}.{name}", ""))
    mixer = KimiDeltaAttentionMixer(d_model=16, heads=1, head_dim=4)
    assert mixer._kernel(on_cuda=True) == "fla.ops.kda.chunk_kda" and mixer._kernel(on_cuda=False) is None
    mixer.scan = "chunked"
    assert mixer._kernel(on_cuda=True) is None


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available() or optional_kernel(*KimiDeltaAttentionMixer.KERNEL)[0] is None,
                    reason="needs CUDA and flash-linear-attention")
def test_fla_kernel_equals_our_chunked_form():
    mixer = KimiDeltaAttentionMixer(d_model=64, heads=2, head_dim=32, chunk=16).cuda()
    mixer_checks.kernel_equals_chunked(mixer, 64)
