"""Gated DeltaNet-2's mixer: both our forms against flash-linear-attention's
references (fla/ops/gdn2/naive.py) in values and gradients, Kimi Delta Attention as
its case b = w = beta, the parameter and state counts, fla's init, and fla's kernel
against ours on a GPU."""

import pytest
import torch

from tests.workloads.models import mixer_checks
from tests.workloads.models.fla_reference import channel_delta_inputs, equal_in_values_and_gradients, fla_naive
from workloads.models.channel_delta_rule import channel_delta_chunked
from workloads.models.gated_deltanet2 import GatedDeltaNet2Config
from workloads.models.gated_deltanet2.layer import GatedDeltaNet2Mixer
from workloads.models.recurrent_parts import optional_kernel

NAMES = ("q", "k", "v", "g", "b", "w", "state")


def _ours(form, chunk=8):
    """The layer's scan (its erase key and write value from b and w, then `form`)."""
    mixer = GatedDeltaNet2Mixer(d_model=16, heads=1, head_dim=4, chunk=chunk, scan=form)
    return lambda q, k, v, g, b, w, state: mixer._scan(q, k, v, g, b, w, state=state)


@pytest.mark.parametrize("form", ["recurrent", "chunked"])
@pytest.mark.parametrize("reference", ["naive_recurrent_gdn2", "naive_chunk_gdn2"])
def test_our_forms_equal_flash_linear_attentions_references(form, reference):
    """fla's references compute in float32 (they cast their inputs); 45 tokens, a
    length its chunked one pads to whole chunks of 16, ours to chunks of 8."""
    theirs = fla_naive("gdn2", reference)
    extra = {"chunk_size": 16} if reference == "naive_chunk_gdn2" else {}
    equal_in_values_and_gradients(
        _ours(form), lambda q, k, v, g, b, w, state: theirs(q, k, v, g, b, w, scale=1.0, initial_state=state,
                                                            output_final_state=True, **extra),
        channel_delta_inputs(length=45), NAMES)


def test_with_both_gates_beta_it_is_kimi_delta_attention():
    """fla's own statement of the family: b = w = beta recovers KDA (its reference),
    and our scan of GDN-2's gates set to beta is our KDA's."""
    inputs = channel_delta_inputs(length=20)
    beta = inputs["beta"]
    kda = fla_naive("kda", "naive_recurrent_kda")(inputs["q"], inputs["k"], inputs["v"], inputs["g"], beta, scale=1.0,
                                                  initial_state=inputs["state"], output_final_state=True)
    ours = channel_delta_chunked(inputs["q"], inputs["k"], beta[..., None] * inputs["v"], inputs["g"],
                                 beta[..., None] * inputs["k"], chunk=8, state=inputs["state"])
    gdn2 = _ours("chunked")(inputs["q"], inputs["k"], inputs["v"], inputs["g"], beta[..., None].expand_as(inputs["k"]),
                            beta[..., None].expand_as(inputs["v"]), inputs["state"])
    for a, b, c in zip(ours, kda, gdn2):
        torch.testing.assert_close(a, b, rtol=2e-5, atol=2e-5)
        torch.testing.assert_close(c, a, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("d_model,heads,head_dim,expand_v", [(16, 2, 4, 2), (64, 2, 32, 1), (128, 4, 20, 1)])
def test_parameter_and_state_counts_follow_the_shapes(d_model, heads, head_dim, expand_v):
    config = GatedDeltaNet2Config(heads=heads, head_dim=head_dim, expand_v=expand_v)
    mixer_checks.counts_follow_the_config(config, d_model)


def test_init_follows_flash_linear_attention():
    """KDA's init (A uniform in [1, 16] per head, dt per key channel), the erase gate
    one per key channel and the write gate one per value channel."""
    torch.manual_seed(0)
    mixer = GatedDeltaNet2Mixer(d_model=64, heads=256, head_dim=4, expand_v=2)
    A = torch.exp(mixer.A_log)
    assert 1 <= A.min() and A.max() <= 16 * 1.0001 and mixer.dt_bias.shape == (256 * 4,)
    assert mixer.splits[-2:] == [256 * 4, 256 * 8]  # b per key channel, w per value channel
    h = torch.randn(2, 5, 64)
    _, _, _, b, w = mixer._project(h)
    assert b.shape == (2, 5, 1024) and w.shape == (2, 5, 2048)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available() or optional_kernel(*GatedDeltaNet2Mixer.KERNEL)[0] is None,
                    reason="needs CUDA and flash-linear-attention")
def test_fla_kernel_equals_our_chunked_form():
    mixer = GatedDeltaNet2Mixer(d_model=64, heads=2, head_dim=32, chunk=16).cuda()
    mixer_checks.kernel_equals_chunked(mixer, 64)
