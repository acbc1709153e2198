"""RWKV-7's mixer: the chunked form of the generalised delta rule against its
recurrence (float64, values and gradients), what the rule does to a key, counts,
fla's init, and fla's kernel against ours on a GPU."""

import pytest
import torch
import torch.nn.functional as F

from tests.workloads.models import mixer_checks
from workloads.models import build_model, preset
from workloads.models.rwkv7 import RWKV7Config
from workloads.models.rwkv7.layer import DECAY_FLOOR, RWKV7Mixer, dplr_chunked, dplr_recurrent, rwkv7_kernel


def _dplr_inputs(batch=2, length=37, heads=3, dk=4, dv=5, seed=0, floor=DECAY_FLOOR):
    """The layer's ranges: w in (floor, 0), a = -kk and b = kk * rate with kk a unit
    vector and the rate in (0, 1)."""
    gen = torch.Generator().manual_seed(seed)

    def randn(*shape):
        return torch.randn(*shape, generator=gen, dtype=torch.float64)

    kk = F.normalize(randn(batch, length, heads, dk), dim=-1)
    rate = torch.sigmoid(randn(batch, length, heads, dk))
    w = floor * torch.rand(batch, length, heads, dk, generator=gen, dtype=torch.float64)
    r, k, v = randn(batch, length, heads, dk), randn(batch, length, heads, dk), randn(batch, length, heads, dv)
    state = randn(batch, heads, dk, dv)
    return [t.requires_grad_() for t in (r, w, k, v, -kk, kk * rate, state)]


@pytest.mark.parametrize("length,chunk", [(37, 8), (32, 8), (5, 16), (64, 16), (1, 4)])
@pytest.mark.parametrize("from_state", [False, True])
def test_chunked_generalised_delta_rule_equals_the_recurrence_in_values_and_gradients(length, chunk, from_state):
    names = ("r", "w", "k", "v", "a", "b", "state")
    mixer_checks.chunked_equals_recurrent(dplr_chunked, dplr_recurrent, _dplr_inputs(length=length), names, chunk,
                                          from_state)


def test_a_learning_rate_of_one_overwrites_what_a_key_reads():
    """No decay, rate 1 and the written key equal to the removal key: the state
    maps that key to exactly the written value, whatever it held (the delta rule)."""
    r, w, k, v, a, b, state = (t.detach() for t in _dplr_inputs(length=1))
    kk = -a
    _, last = dplr_recurrent(r, torch.zeros_like(w), kk, v, -kk, kk, state)
    torch.testing.assert_close(torch.einsum("bhkv,bhk->bhv", last, kk[:, 0]), v[:, 0])


def test_the_decay_floor_over_a_long_chunk_stays_finite_in_float32():
    inputs = [t.detach().float().requires_grad_() for t in _dplr_inputs(length=64, floor=DECAY_FLOOR)]
    with torch.no_grad():
        inputs[1].fill_(DECAY_FLOOR)  # the strongest decay the layer gives, at every step
    o, last = dplr_chunked(*inputs[:-1], chunk=64)
    (o.sum() + last.sum()).backward()
    assert all(torch.isfinite(t.grad).all() for t in inputs[:-1])
    torch.testing.assert_close(o, dplr_recurrent(*inputs[:-1])[0], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("d_model,head_dim,ranks", [(16, 8, (4, 4, 4)), (64, 32, (40, 40, 40)), (128, 32, (32, 16, 64))])
def test_parameter_and_state_counts_follow_the_shapes(d_model, head_dim, ranks):
    config = RWKV7Config(head_dim=head_dim, decay_rank=ranks[0], a_rank=ranks[1], gate_rank=ranks[2])
    mixer_checks.counts_follow_the_config(config, d_model)


def test_d_model_must_be_a_multiple_of_the_head_dim():
    with pytest.raises(ValueError, match="not a multiple of RWKV-7's head_dim 32"):
        preset("rwkv7", "tiny").with_fields(d_model=48)


def test_init_follows_flash_linear_attention_and_depends_on_depth():
    torch.manual_seed(0)
    model = build_model(preset("rwkv7", "0.5M"), vocab_size=20)
    first, last = model.layers[0].mixer, model.layers[-1].mixer
    for mixer in (first, last):
        assert (mixer.o_proj.weight == 0).all() and (mixer.k_a == 1.02).all() and (mixer.r_k == -0.04).all()
        assert (mixer.w_lora[0].weight == 0).all() and (mixer.a_lora[0].weight == 0).all()
        w = DECAY_FLOOR * torch.sigmoid(mixer.w_lora[1].bias)
        assert DECAY_FLOOR < w.min() and w.max() < 0
    # fla: the group norm's weight grows with depth, the token-shift mixes fade
    assert first.g_norm.weight[0].item() < last.g_norm.weight[0].item() == pytest.approx(1.0)
    assert first.mix.abs().mean() > last.mix.abs().mean()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available() or rwkv7_kernel() is None,
                    reason="needs CUDA and flash-linear-attention")
def test_fla_kernel_equals_our_chunked_form():
    torch.manual_seed(0)
    mixer = RWKV7Mixer(d_model=64, head_dim=32).cuda()
    with torch.no_grad():
        mixer.o_proj.weight.normal_(0, 0.1)
    mixer_checks.kernel_equals_chunked(mixer, 64)
