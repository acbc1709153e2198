"""Parts shared by the recurrent mixers (Mamba, Mamba-2, Gated DeltaNet): the
time-step initialisation, the output projection's init, and the short causal
depthwise convolution with SiLU that each runs before its scan, over a full
sequence and one token at a time."""

import functools
import importlib
import math

import torch
import torch.nn.functional as F
from torch import nn


def dt_bias_init(n: int, dt_min: float = 1e-3, dt_max: float = 0.1, floor: float = 1e-4) -> torch.Tensor:
    """Mamba's time-step bias: dt drawn log-uniform in [dt_min, dt_max] (at least
    `floor`), stored through the inverse of softplus, so softplus(bias) = dt."""
    dt = torch.exp(torch.rand(n) * (math.log(dt_max) - math.log(dt_min)) + math.log(dt_min)).clamp(min=floor)
    return dt + torch.log(-torch.expm1(-dt))


# Mimetic initialisation (Trockman, Harutyunyan, Kolter, Kumar and Bhojanapalli 2024, "Mimetic
# initialization helps state space models learn to recall", arXiv 2410.11135): a selective
# SSM started as causal linear attention, whose "attention" y_t = sum_s C_t.B_s dt_s x_s reaches
# the whole context and matches a token's query to its own key. Three parts, each one a layer
# may take (docs/rnns.md says where each is read from and what is ours):
# - decay: the state barely decays, exp(dt * A) near 1 (A near 0, dt near 1). A = -exp(-8) =
#   -3.4e-4: a decay of at least 0.99 per token for dt up to 30;
# - bc: C's projection starts as B's plus independent noise of MIMETIC_BC_NOISE times the
#   spread of B's rows, so C_t.B_s is near a Gram matrix (q near k, W_C W_B^T near a multiple
#   of the identity) without the two being equal, as its reviews quote the paper;
# - conv: the short convolution the identity (its last tap 1, the others and its bias 0), so
#   the scan reads the token itself ("removing" the convolution), through its SiLU.
MIMETIC_A_LOG = -8.0
MIMETIC_DT = 1.0
MIMETIC_BC_NOISE = 0.1  # ours: the paper's scale could not be read here


def mimetic_(parts: str, A_log: torch.Tensor, dt_bias: torch.Tensor, ties: list[tuple[torch.Tensor, slice, slice]],
             convs: list[nn.Conv1d]) -> None:
    """Sets a layer's parameters to the mimetic initialisation's `parts` in place
    (decay, bc, conv, joined by _): decay, every A to -exp(MIMETIC_A_LOG) and the time
    step's bias so that softplus(bias) = MIMETIC_DT; bc, for each (weight, B's rows,
    C's rows) of `ties`, C's rows to B's plus noise (`bc_noise`); conv, each of
    `convs` the identity. It draws nothing from torch's generator: the other
    parameters, and the layers built after it, are the default init's, draw for draw."""
    chosen = set(parts.split("_"))
    with torch.no_grad():
        if "decay" in chosen:
            A_log.fill_(MIMETIC_A_LOG)
            dt_bias.fill_(math.log(math.expm1(MIMETIC_DT)))
        if "bc" in chosen:
            for weight, b_rows, c_rows in ties:
                weight[c_rows] = weight[b_rows] + bc_noise(weight[b_rows])
        if "conv" in chosen:
            for conv in convs:
                conv.weight.zero_()
                conv.weight[..., -1] = 1.0
                if conv.bias is not None:
                    conv.bias.zero_()


def bc_noise(b: torch.Tensor) -> torch.Tensor:
    """Noise for C's rows beside B's `b`: independent normal draws of MIMETIC_BC_NOISE
    times b's standard deviation, from a generator of their own seeded by b's values
    (a layer's B differs from the next's: so does its noise; torch's own stream is left
    as it was)."""
    import hashlib

    seed = int.from_bytes(hashlib.sha256(b.detach().double().cpu().numpy().tobytes()).digest()[:8], "little")
    draws = torch.randn(b.shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    return (draws * MIMETIC_BC_NOISE * b.double().std()).to(b)


def residual_out_proj(d_in: int, d_model: int, n_layers: int) -> nn.Linear:
    """The mixer's output projection back to the residual stream: PyTorch's default
    init scaled by 1/sqrt(n_layers), the model's recurrent layers (GPT-2's rule, as
    mamba-ssm's MixerModel applies it)."""
    proj = nn.Linear(d_in, d_model, bias=False)
    with torch.no_grad():
        proj.weight /= math.sqrt(n_layers)
    return proj


def short_conv(x: torch.Tensor, conv: nn.Conv1d, cache=None) -> torch.Tensor:
    """silu(causal depthwise conv(x)) for x (batch, length, channels), and, with a
    cache, its last d_conv - 1 inputs kept in `cache.conv` (batch, channels, d_conv - 1)
    for `short_conv_step`. The input is padded on the left only, so the conv's
    output has exactly `length` positions, and it is laid out (batch, length,
    channels) before the SiLU: on CPU, SiLU's backward on a strided tensor
    measured about twice as slow as on a contiguous one."""
    width = conv.kernel_size[0] - 1
    padded = F.pad(x.transpose(1, 2), (width, 0))
    if cache is not None:
        cache.conv = padded[..., -width:].contiguous()
    return F.silu(F.conv1d(padded, conv.weight, conv.bias, groups=conv.groups).transpose(1, 2).contiguous())


def short_conv_step(x: torch.Tensor, conv: nn.Conv1d, cache) -> torch.Tensor:
    """One token of `short_conv`, x (batch, channels); advances `cache.conv`."""
    window = torch.cat([cache.conv, x[:, :, None]], dim=-1)  # (batch, channels, d_conv)
    cache.conv = window[:, :, 1:]
    out = (window * conv.weight[:, 0, :]).sum(-1)
    return F.silu(out if conv.bias is None else out + conv.bias)


@functools.cache
def optional_kernel(module: str, name: str):
    """(`name` from `module`, "") for a CUDA kernel of mamba-ssm or
    flash-linear-attention, imported on first use; (None, why) where it does not
    import here: not installed, or its compiled extension or Triton failing to
    load (`import mamba_ssm` fails outright without its CUDA build)."""
    try:
        return getattr(importlib.import_module(module), name), ""
    except Exception as e:  # ImportError, or the extension failing to load in many ways
        return None, f"{type(e).__name__}: {e}"


def scan_form(kernel, scan: str, library: str = "fla", trains: str = "chunked") -> str:
    """The form a layer's scan ran as (a trial's `scan_used`): its CUDA kernel's
    library where `kernel` ran, else recurrent or its form over whole sequences
    (`trains`: chunked, or log-linear Mamba-2's quadratic) as its config's `scan` says."""
    return library if kernel is not None else "recurrent" if scan == "recurrent" else trains


def delta_rule_forward(mixer, h: torch.Tensor, cache=None) -> torch.Tensor:
    """The forward of a delta-rule mixer (Gated DeltaNet's, Gated DeltaProduct's,
    Kimi Delta Attention's, Gated DeltaNet-2's) over whole sequences, or a token of
    cached decoding (`step`): its projections (the conv's input, the output gate,
    then its gates), the short conv, its inputs, its scan by `_kernel` or its own
    forms, its gated norm and output projection."""
    if cache is not None and cache.filled:
        return mixer.step(h, cache)
    qkv, gate, *gates = mixer._project(h)
    inputs = mixer._inputs(short_conv(qkv, mixer.conv1d, cache), *gates)
    kernel = mixer._kernel(h.is_cuda)
    if mixer.training:  # what trained (evaluation may run another form)
        mixer.scan_ran = scan_form(kernel, mixer.scan)
    o, last = mixer._scan(*inputs, kernel=kernel)
    if cache is not None:
        cache.state, cache.filled = last, True
    return mixer._norm_gate_out(o, gate)
