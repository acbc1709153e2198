"""Log-linear Mamba-2's mixer: its quadratic form and its recurrence against
flash-linear-attention's reference (fla/ops/log_linear_attn/naive.py) in values and
gradients, the tree's levels against fla's, a recurrence resumed at any position,
the state that grows with the log of the length, the counts, fla's init, and fla's
kernel against ours on a GPU."""

import pytest
import torch
import torch.nn.functional as F

from tests.workloads.models import mixer_checks
from tests.workloads.models.fla_reference import fla_naive
from workloads.models.log_linear_mamba2 import LogLinearMamba2Config
from workloads.models.log_linear_mamba2.layer import (LogLinearMamba2Mixer, _import_kernel, levels_between,
                                                      log_linear_quadratic, log_linear_recurrent)

NAMES = ("x", "dt", "A", "B", "C", "lam")


def _inputs(batch=2, length=37, heads=3, headdim=4, d_state=5, levels=8, seed=0):
    gen = torch.Generator().manual_seed(seed)

    def randn(*shape):
        return torch.randn(*shape, generator=gen, dtype=torch.float64)

    return dict(x=randn(batch, length, heads, headdim), dt=F.softplus(randn(batch, length, heads)),
                A=-torch.rand(heads, generator=gen, dtype=torch.float64) - 0.1, B=randn(batch, length, d_state),
                C=randn(batch, length, d_state), lam=F.softplus(randn(batch, length, heads, levels)))


def _fla(x, dt, A, B, C, lam):
    """fla's reference on Mamba-2's inputs, as its LogLinearMamba2 layer calls its kernel."""
    return fla_naive("log_linear_attn", "naive_log_linear_attn")(C[:, :, None], B[:, :, None], x * dt[..., None],
                                                                 dt * A, lam, scale=1.0)


@pytest.mark.parametrize("form", ["quadratic", "recurrent"])
@pytest.mark.parametrize("length", [1, 2, 37, 64])
def test_our_forms_equal_flash_linear_attentions_reference(form, length):
    """Float64 (fla's reference keeps its inputs' precision), values and the
    gradients of every input."""
    inputs = {k: v.requires_grad_() for k, v in _inputs(length=length).items()}
    ours = log_linear_quadratic(**inputs) if form == "quadratic" else log_linear_recurrent(**inputs)[0]
    theirs = _fla(**inputs)
    torch.testing.assert_close(ours, theirs, rtol=1e-10, atol=1e-10)
    weights = torch.randn_like(ours)
    grads = torch.autograd.grad((ours * weights).sum(), list(inputs.values()))
    grads_ref = torch.autograd.grad((theirs * weights).sum(), list(inputs.values()))
    for name, grad, grad_ref in zip(NAMES, grads, grads_ref):
        torch.testing.assert_close(grad, grad_ref, rtol=1e-9, atol=1e-9, msg=lambda m: f"{name}: {m}")


def test_the_trees_levels_are_flash_linear_attentions():
    """Key s sits at level bit_length(t XOR s) of query t's tree, as fla's mask has it."""
    construct_level_mask = fla_naive("log_linear_attn", "construct_level_mask")
    length, levels = 37, 7
    ones = torch.ones(1, levels, length)
    ours = levels_between(length)
    causal = torch.ones(length, length, dtype=torch.bool).tril()
    for level in range(levels):
        theirs = construct_level_mask(level, ones)[0].bool()
        assert torch.equal(theirs, (ours == level) & causal), level


@pytest.mark.parametrize("cut", [1, 4, 13, 32])
def test_a_recurrence_resumed_at_any_position_continues_the_tree(cut):
    """The tree's shape depends on the position: a recurrence resumed from a state
    at position `cut` (as cached decoding does) equals one run straight through."""
    inputs = _inputs(length=40)
    straight, _ = log_linear_recurrent(**inputs)
    head = {k: v[:, :cut] if v.dim() > 1 else v for k, v in inputs.items()}
    tail = {k: v[:, cut:] if v.dim() > 1 else v for k, v in inputs.items()}
    first, state = log_linear_recurrent(**head)
    second, _ = log_linear_recurrent(**tail, state=state, start=cut)
    torch.testing.assert_close(torch.cat([first, second], dim=1), straight, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("length", [1, 2, 3, 5, 8, 33, 100])
def test_the_state_at_a_length_is_the_most_levels_the_tree_holds_at_once(length):
    """state_floats_at counts bit_length(length) levels: what the recurrence holds
    non-zero at its fullest before that length (1 + popcount(t) levels at t)."""
    inputs = _inputs(batch=1, length=length, heads=1, headdim=1, d_state=1)
    fullest, state = 0, None
    for t in range(length):
        one = {k: v[:, t:t + 1] if v.dim() > 1 else v for k, v in inputs.items()}
        _, state = log_linear_recurrent(**one, state=state, start=t)
        fullest = max(fullest, int((state.abs().flatten(2).sum(-1) > 0).sum()))
    config = LogLinearMamba2Config(d_state=1, headdim=1, expand=1, d_conv=2)
    assert config.state_floats_at(1, length) - config.state_floats_at(1, 0) + 1 == fullest  # d_inner x d_state = 1
    assert config.state_floats_at(64, length) <= config.state_floats(64)


def test_a_sequence_longer_than_the_tree_is_refused_naming_its_levels():
    inputs = _inputs(length=9, levels=4)  # 4 levels hold 8 tokens
    with pytest.raises(ValueError, match="9 tokens need 5 levels; the layer has 4"):
        log_linear_quadratic(**inputs)
    with pytest.raises(ValueError, match="position 8 needs 5 levels; the layer has 4"):
        log_linear_recurrent(**inputs)


@pytest.mark.parametrize("d_model,d_state,headdim,levels", [(16, 4, 8, 5), (64, 64, 32, 15), (96, 16, 32, 15)])
def test_parameter_and_state_counts_follow_the_shapes(d_model, d_state, headdim, levels):
    config = LogLinearMamba2Config(d_state=d_state, headdim=headdim, levels=levels)
    mixer_checks.counts_follow_the_config(config, d_model)


def test_init_follows_flash_linear_attention():
    """A = 1, 2, ..., heads; L ones; the levels' projection heads x levels wide."""
    mixer = LogLinearMamba2Mixer(d_model=64, headdim=16, levels=15)
    assert torch.allclose(torch.exp(mixer.A_log), torch.arange(1.0, 9.0))
    assert (mixer.L == 1).all() and mixer.L.shape == (8, 15)
    assert mixer.in_proj.weight.shape[0] == 2 * 128 + 2 * 64 + 8 * 16


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available() or _import_kernel()[0] is None,
                    reason="needs CUDA and flash-linear-attention")
def test_fla_kernel_equals_our_quadratic_form():
    mixer = LogLinearMamba2Mixer(d_model=64, d_state=32, headdim=32).cuda()
    mixer_checks.kernel_equals_chunked(mixer, 64)
