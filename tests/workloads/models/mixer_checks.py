"""Checks every recurrent mixer must pass, on a float64 mixer: cached decoding
(prefill of any length, then a token at a time) equals the full forward; the
step-by-step scan runs the same mixer as the chunked one; changing a future
input leaves earlier outputs unchanged."""

import torch


def cached_decoding_equals_the_full_forward(mixer, d_model: int, prompt: int, length: int = 26,
                                            dtype=torch.float64, tol: float = 1e-10) -> None:
    h = torch.randn(3, length, d_model, dtype=dtype)
    full = mixer(h)
    cache = mixer.new_cache(3, h)
    outs = [mixer(h[:, :prompt], cache)]
    outs += [mixer(h[:, t : t + 1], cache) for t in range(prompt, length)]
    torch.testing.assert_close(torch.cat(outs, dim=1), full, rtol=tol, atol=tol)


def recurrent_scan_equals_the_chunked_one(mixer, d_model: int) -> None:
    h = torch.randn(2, 21, d_model, dtype=torch.float64)
    chunked = mixer(h)
    mixer.scan = "recurrent"
    torch.testing.assert_close(mixer(h), chunked, rtol=1e-10, atol=1e-10)


def future_inputs_leave_earlier_outputs_unchanged(mixer, d_model: int, cut: int = 17, length: int = 30,
                                                  dtype=torch.float64) -> None:
    h = torch.randn(2, length, d_model, dtype=dtype)
    changed = h.clone()
    changed[:, cut:] = torch.randn(2, length - cut, d_model, dtype=dtype)
    a, b = mixer(h), mixer(changed)
    torch.testing.assert_close(a[:, :cut], b[:, :cut], rtol=0, atol=0)
    assert not torch.allclose(a[:, cut:], b[:, cut:])


def chunked_equals_recurrent(chunked, recurrent, inputs: list, names: tuple, chunk: int, from_state: bool) -> None:
    """A scan's chunked form against its recurrence, float64, in values and in the
    gradients of every input (the last of `inputs` is the entering state, used when
    `from_state`): each returns (outputs, last state)."""
    state = inputs[-1] if from_state else None
    out_ref, last_ref = recurrent(*inputs[:-1], state=state)
    out, last = chunked(*inputs[:-1], chunk=chunk, state=state)
    torch.testing.assert_close(out, out_ref, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(last, last_ref, rtol=1e-10, atol=1e-10)
    weights = [torch.randn_like(out), torch.randn_like(last)]
    grads_ref = torch.autograd.grad((out_ref * weights[0]).sum() + (last_ref * weights[1]).sum(), inputs, allow_unused=True)
    grads = torch.autograd.grad((out * weights[0]).sum() + (last * weights[1]).sum(), inputs, allow_unused=True)
    for name, grad, grad_ref in zip(names, grads, grads_ref):
        if grad_ref is None:  # the state, when not given
            assert grad is None, name
            continue
        torch.testing.assert_close(grad, grad_ref, rtol=1e-9, atol=1e-9, msg=name)


def counts_follow_the_config(config, d_model: int) -> None:
    """The config's parameter and state counts (what `icr-sweep models` reports,
    computed without torch) against the mixer it builds and the cache it decodes with."""
    mixer = config.build(d_model, n_layers=1, norm_eps=1e-5)
    assert sum(p.numel() for p in mixer.parameters()) == config.params(d_model)
    cache = mixer.new_cache(1, torch.zeros(1))
    carried = sum(v.numel() for v in vars(cache).values() if isinstance(v, torch.Tensor))
    assert carried == config.state_floats(d_model)


def kernel_equals_chunked(mixer, d_model: int, gradients: bool = True) -> None:
    """On CUDA: the mixer with its kernel (scan auto) against our chunked form, in
    outputs (no grad: the forward alone) and, with `gradients`, in outputs and
    parameter gradients; fp32, at 200 tokens."""
    h = torch.randn(4, 200, d_model, device="cuda")
    outputs = {}
    for scan in ("auto", "chunked"):
        mixer.scan = scan
        with torch.no_grad():
            outputs[scan, "forward"] = mixer(h)
        if gradients:
            mixer.zero_grad()
            out = mixer(h)
            out.square().mean().backward()
            outputs[scan] = (out.detach(), [p.grad.clone() for p in mixer.parameters()])
    torch.testing.assert_close(outputs["auto", "forward"], outputs["chunked", "forward"], rtol=1e-3, atol=1e-3)
    if gradients:
        torch.testing.assert_close(outputs["auto"][0], outputs["chunked"][0], rtol=1e-3, atol=1e-3)
        for grad, grad_ref in zip(outputs["auto"][1], outputs["chunked"][1]):
            torch.testing.assert_close(grad, grad_ref, rtol=1e-2, atol=1e-4)
