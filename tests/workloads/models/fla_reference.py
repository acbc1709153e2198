"""flash-linear-attention's pure-PyTorch references (fla/ops/<op>/naive.py in the
fla-core package, which the dev extra installs): each needs torch and einops alone,
but importing it through its package imports triton, which a CPU host lacks, so it
is loaded from its file. Our forms are compared with them on the same inputs."""

import importlib.util
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F


def fla_naive(op: str, name: str):
    """`name` from fla/ops/`op`/naive.py; the test skips where fla-core is not installed."""
    spec = importlib.util.find_spec("fla")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("needs fla-core (the dev extra) for flash-linear-attention's references")
    path = Path(next(iter(spec.submodule_search_locations))) / "ops" / op / "naive.py"
    module_spec = importlib.util.spec_from_file_location(f"fla_naive_{op}", path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return getattr(module, name)


def channel_delta_inputs(batch=2, length=37, heads=3, dk=8, dv=6, seed=0, dtype=torch.float32):
    """q and k L2-normalised (q scaled), v, a log-decay per key channel, a gate per
    head, per key channel and per value channel, and an entering state."""
    gen = torch.Generator().manual_seed(seed)

    def randn(*shape):
        return torch.randn(*shape, generator=gen, dtype=dtype)

    return dict(q=F.normalize(randn(batch, length, heads, dk), dim=-1) / dk**0.5,
                k=F.normalize(randn(batch, length, heads, dk), dim=-1), v=randn(batch, length, heads, dv),
                g=-F.softplus(randn(batch, length, heads, dk)), beta=torch.sigmoid(randn(batch, length, heads)),
                b=torch.sigmoid(randn(batch, length, heads, dk)), w=torch.sigmoid(randn(batch, length, heads, dv)),
                state=randn(batch, heads, dk, dv))


def equal_in_values_and_gradients(ours, theirs, inputs: dict, names: tuple, rtol=2e-5, atol=2e-5) -> None:
    """`ours()` and `theirs()` (each its outputs and last state, from the tensors of
    `inputs` named in `names`, which need gradients) agree in values and in the
    gradients of every input named."""
    leaves = {n: inputs[n].detach().clone().requires_grad_() for n in names}
    out, last = ours(**leaves)
    out_ref, last_ref = theirs(**leaves)
    torch.testing.assert_close(out, out_ref, rtol=rtol, atol=atol)
    torch.testing.assert_close(last, last_ref, rtol=rtol, atol=atol)
    weights = torch.randn_like(out), torch.randn_like(last)
    grads = torch.autograd.grad((out * weights[0]).sum() + (last * weights[1]).sum(), list(leaves.values()))
    grads_ref = torch.autograd.grad((out_ref * weights[0]).sum() + (last_ref * weights[1]).sum(), list(leaves.values()))
    for name, grad, grad_ref in zip(leaves, grads, grads_ref):
        torch.testing.assert_close(grad, grad_ref, rtol=10 * rtol, atol=10 * atol, msg=lambda m: f"{name}: {m}")
