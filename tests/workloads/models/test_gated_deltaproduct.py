"""Gated DeltaProduct's mixer: its scan against a token-by-token yardstick written
from the paper's update (float64, values and gradients), one Householder step is
Gated DeltaNet, counts, and fla's kernel against ours on a GPU."""

import pytest
import torch
import torch.nn.functional as F

from tests.workloads.models import mixer_checks
from workloads.models.gated_deltanet.layer import delta_recurrent
from workloads.models.gated_deltaproduct import GatedDeltaProductConfig
from workloads.models.gated_deltaproduct.layer import GatedDeltaProductMixer, product_scan


def per_token(q, k, v, g, beta, state):
    """H <- exp(g_t) H, then for each of the token's steps j the delta rule
    H <- H + beta k (v - H^T k)^T, then o_t = H^T q_t: Siems et al.'s update."""
    outs = []
    for t in range(q.shape[1]):
        state = torch.exp(g[:, t])[..., None, None] * state
        for j in range(k.shape[2]):
            key, value, strength = k[:, t, j], v[:, t, j], beta[:, t, j]
            read = torch.einsum("bhkv,bhk->bhv", state, key)
            state = state + strength[..., None, None] * key[..., None] * (value - read)[:, :, None, :]
        outs.append(torch.einsum("bhkv,bhk->bhv", state, q[:, t]))
    return torch.stack(outs, 1), state


def _inputs(batch=2, length=13, steps=3, heads=2, dk=4, dv=6, seed=0):
    gen = torch.Generator().manual_seed(seed)

    def randn(*shape):
        return torch.randn(*shape, generator=gen, dtype=torch.float64)

    q = F.normalize(randn(batch, length, heads, dk), dim=-1) / dk**0.5
    k = F.normalize(randn(batch, length, steps, heads, dk), dim=-1)
    v, g = randn(batch, length, steps, heads, dv), -F.softplus(randn(batch, length, heads))
    beta = 2 * torch.sigmoid(randn(batch, length, steps, heads))  # negative eigenvalues allowed
    state = randn(batch, heads, dk, dv)
    return [t.requires_grad_() for t in (q, k, v, g, beta, state)]


@pytest.mark.parametrize("scan,chunk", [("chunked", 4), ("chunked", 9), ("chunked", 64), ("recurrent", 0)])
@pytest.mark.parametrize("steps", [1, 2, 3])
def test_the_product_scan_equals_the_per_token_update_in_values_and_gradients(scan, chunk, steps):
    inputs = _inputs(steps=steps)
    expected, expected_last = per_token(*inputs)
    out, last = product_scan(*inputs[:-1], state=inputs[-1], chunk=chunk, scan=scan)
    torch.testing.assert_close(out, expected, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(last, expected_last, rtol=1e-10, atol=1e-10)
    weights = torch.randn_like(out), torch.randn_like(last)
    grads = torch.autograd.grad((out * weights[0]).sum() + (last * weights[1]).sum(), inputs)
    grads_ref = torch.autograd.grad((expected * weights[0]).sum() + (expected_last * weights[1]).sum(), inputs)
    for name, grad, grad_ref in zip("q k v g beta state".split(), grads, grads_ref):
        torch.testing.assert_close(grad, grad_ref, rtol=1e-9, atol=1e-9, msg=name)


def test_one_householder_step_is_gated_deltanet():
    q, k, v, g, beta, state = (t.detach() for t in _inputs(steps=1))
    out, last = product_scan(q, k, v, g, beta / 2, state=state)
    ref, ref_last = delta_recurrent(q, k[:, :, 0], v[:, :, 0], g, beta[:, :, 0] / 2, state)
    torch.testing.assert_close(out, ref, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(last, ref_last, rtol=1e-10, atol=1e-10)


def test_beta_reaches_past_one_only_with_negative_eigenvalues():
    torch.manual_seed(0)
    h = torch.randn(2, 5, 16)
    for negative, top in ((True, 2.0), (False, 1.0)):
        mixer = GatedDeltaProductMixer(16, heads=2, head_dim=4, negative_eigenvalues=negative)
        with torch.no_grad():
            *_, b = mixer._project(h)
            b.fill_(30.0)  # sigmoid saturates
            beta = mixer._inputs(torch.zeros(2, 5, mixer.conv_dim), torch.zeros(2, 5, 2), b)[-1]
        torch.testing.assert_close(beta, torch.full_like(beta, top))


@pytest.mark.parametrize("d_model,heads,head_dim,expand_v,householder", [(16, 2, 4, 2, 2), (32, 1, 24, 1, 2),
                                                                          (64, 3, 32, 2, 3)])
def test_parameter_and_state_counts_follow_the_shapes(d_model, heads, head_dim, expand_v, householder):
    config = GatedDeltaProductConfig(heads=heads, head_dim=head_dim, expand_v=expand_v, householder=householder)
    mixer_checks.counts_follow_the_config(config, d_model)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_fla_gated_delta_product_kernel_equals_our_scan():
    """fla's own DeltaProduct kernel (bf16 only) on the same inputs as our chunked scan."""
    kernel = pytest.importorskip("fla.ops.gated_delta_product").chunk_gated_delta_product
    q, k, v, g, beta, _ = (t.detach().float().cuda() for t in _inputs(batch=2, length=128, steps=2, dk=32, dv=64))
    ours, _ = product_scan(q, k, v, g, beta, scan="chunked")
    bf = [x.bfloat16() for x in (q * 32**0.5, k.flatten(1, 2), v.flatten(1, 2), beta.flatten(1, 2))]
    theirs, _ = kernel(q=bf[0], k=bf[1], v=bf[2], g=g, beta=bf[3], num_householder=2, scale=32**-0.5,
                       use_qk_l2norm_in_kernel=False)
    torch.testing.assert_close(theirs.float(), ours, rtol=5e-2, atol=5e-2)
