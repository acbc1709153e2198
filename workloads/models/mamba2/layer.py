"""Mamba-2 layer (Dao and Gu 2024, "Transformers are SSMs"): the mixer of
mamba-ssm 2.x's `Mamba2`, with one group of B and C and no MLP.

in_proj gives z (the gate), xBC and dt per head; a causal depthwise conv and SiLU
run over xBC; then the SSD recurrence, per head h with a scalar decay:

    S_t = exp(dt_t A_h) S_{t-1} + dt_t x_t B_t^T        (S_t: headdim x d_state)
    y_t = S_t C_t + D_h x_t

and out_proj(RMSNorm(y * silu(z))). Training runs the chunked (SSD) form of the
recurrence: within a chunk a masked, decayed C B^T product, across chunks the
state. Cached decoding runs the recurrence a token at a time. On CUDA, mamba-ssm's
fused Triton kernel (`mamba_chunk_scan_combined`) replaces the chunked form when it
imports; it is imported lazily, as `import mamba_ssm` needs its CUDA build.
"""

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from workloads.models.recurrent_parts import (dt_bias_init, mimetic_, optional_kernel, residual_out_proj, scan_form,
                                              short_conv, short_conv_step)


def ssd_recurrent(x, dt, A, B, C, state=None):
    """The recurrence, a token at a time: the reference.

    x (batch, length, heads, headdim), dt (batch, length, heads) after softplus,
    A (heads,) negative, B and C (batch, length, d_state), state (batch, heads,
    headdim, d_state) or None for zeros. Returns y like x (without the D skip) and
    the last state."""
    b, length, h, p = x.shape
    if state is None:
        state = x.new_zeros(b, h, p, B.shape[-1])
    ys = []
    for t in range(length):
        decay = torch.exp(dt[:, t] * A)[..., None, None]
        state = decay * state + (dt[:, t, :, None] * x[:, t])[..., None] * B[:, t, None, None, :]
        ys.append((state * C[:, t, None, None, :]).sum(-1))
    return torch.stack(ys, dim=1), state


def ssd_chunked(x, dt, A, B, C, chunk: int = 32, state=None):
    """The same recurrence in chunks of `chunk` tokens (arguments as ssd_recurrent).

    With a_t = dt_t A and s_t its running sum inside a chunk, a token t of the chunk
    receives sum_{u <= t} exp(s_t - s_u) (C_t . B_u) dt_u x_u from the chunk and
    exp(s_t) S_in C_t from the state entering it; the state leaving the chunk is
    exp(s_end) S_in + sum_u exp(s_end - s_u) dt_u x_u B_u^T. A length that is not a
    multiple of `chunk` is padded with dt = 0, which leaves the state unchanged."""
    b, length, h, p = x.shape
    pad = -length % chunk
    if pad:
        x, B, C = (F.pad(v, (0, 0) * (v.dim() - 2) + (0, pad)) for v in (x, B, C))
        dt = F.pad(dt, (0, 0, 0, pad))
    n_chunks = x.shape[1] // chunk
    # B and C are shared by the heads: products with them run over (heads x headdim)
    # columns at once rather than broadcast per head (whose backward fills and sums
    # a per-head copy of B and C).
    xc = (x * dt[..., None]).view(b, n_chunks, chunk, h, p)  # (b, c, t, h, p)
    Bc, Cc = B.view(b, n_chunks, chunk, -1), C.view(b, n_chunks, chunk, -1)  # (b, c, t, n)
    s = torch.cumsum((dt * A).view(b, n_chunks, chunk, h), dim=2).transpose(2, 3)  # (b, c, h, t), non-increasing
    causal = torch.ones(chunk, chunk, dtype=torch.bool, device=x.device).tril()
    # exp(s_t - s_u) for u <= t, 0 above the diagonal (masked before exp: s_t - s_u > 0 there)
    decay = torch.exp((s[..., :, None] - s[..., None, :]).masked_fill(~causal, -math.inf))  # (b, c, h, t, u)
    y = ((Cc @ Bc.transpose(-1, -2))[:, :, None] * decay) @ xc.transpose(2, 3)  # (b, c, h, t, p)
    to_end = torch.exp(s[..., -1:] - s).transpose(2, 3)  # (b, c, t, h): decay from each token to the chunk's end
    added = ((xc * to_end[..., None]).flatten(3).transpose(-1, -2) @ Bc).view(b, n_chunks, h, p, -1)
    if state is None:
        state = x.new_zeros(b, h, p, B.shape[-1])
    inflow = []
    # The state passed from chunk to chunk: n_chunks small steps. unbind, not
    # indexing: the backward of each index would fill a zero tensor of the full size.
    for chunk_decay, chunk_added in zip(torch.exp(s[..., -1]).unbind(1), added.unbind(1)):
        inflow.append(state)
        state = chunk_decay[..., None, None] * state + chunk_added
    inflow = torch.stack(inflow, dim=1).flatten(2, 3)  # (b, c, h p, n): the state entering each chunk
    y = y.transpose(2, 3) + torch.exp(s).transpose(2, 3)[..., None] * (Cc @ inflow.transpose(-1, -2)).view(xc.shape)
    return y.reshape(b, n_chunks * chunk, h, p)[:, :length], state


# mamba-ssm's Mamba2 default chunk for its kernel; `chunk` of the mixer sets our CPU
# form's, where 32 measured faster than 64 at 200 tokens (bench/bench_models.py).
KERNEL_CHUNK = 256


def _import_kernel():
    return optional_kernel("mamba_ssm.ops.triton.ssd_combined", "mamba_chunk_scan_combined")


def mamba2_kernel():
    """mamba-ssm's fused SSD kernel, or None where it does not import."""
    return _import_kernel()[0]


@dataclass
class Mamba2Cache:
    conv: torch.Tensor  # (batch, conv_dim, d_conv - 1): the conv's most recent inputs
    ssm: torch.Tensor  # (batch, heads, headdim, d_state)
    filled: bool = False


class Mamba2Mixer(nn.Module):
    """`scan`: auto (mamba-ssm's kernel on CUDA where it imports, the chunked form
    otherwise), chunked, or recurrent (the step-by-step reference)."""

    def __init__(self, d_model: int, d_state: int = 64, d_conv: int = 4, expand: int = 2, headdim: int = 32,
                 chunk: int = 32, n_layers: int = 1, norm_eps: float = 1e-5, scan: str = "auto", init: str = "default",
                 mimetic: str = "decay_bc_conv"):
        super().__init__()
        d_inner = expand * d_model
        if d_inner % headdim:
            raise ValueError(f"expand * d_model ({d_inner}) is not divisible by headdim {headdim}")
        self.d_inner, self.d_state, self.d_conv, self.headdim = d_inner, d_state, d_conv, headdim
        self.heads, self.chunk, self.scan, self.norm_eps = d_inner // headdim, chunk, scan, norm_eps
        self.conv_dim = d_inner + 2 * d_state
        self.in_proj = nn.Linear(d_model, 2 * d_inner + 2 * d_state + self.heads, bias=False)
        self.conv1d = nn.Conv1d(self.conv_dim, self.conv_dim, d_conv, groups=self.conv_dim)  # weights only: short_conv pads
        # mamba-ssm's init: dt log-uniform in [1e-3, 1e-1] (floor 1e-4) stored through an
        # inverse softplus, A uniform in [1, 16], D ones, the norm's weight ones.
        self.dt_bias = nn.Parameter(dt_bias_init(self.heads))
        self.A_log = nn.Parameter(torch.log(torch.empty(self.heads).uniform_(1, 16)))
        self.D = nn.Parameter(torch.ones(self.heads))
        self.norm_weight = nn.Parameter(torch.ones(d_inner))
        self.out_proj = residual_out_proj(d_inner, d_model, n_layers)
        if init == "mimetic":  # xBC is x, B, C: in in_proj's rows after z's, and the conv's channels
            b, c = slice(d_inner, d_inner + d_state), slice(d_inner + d_state, self.conv_dim)
            in_b, in_c = slice(d_inner + b.start, d_inner + b.stop), slice(d_inner + c.start, d_inner + c.stop)
            # The conv's B and C channels are tied too, where the conv is not made the identity.
            ties = [(self.in_proj.weight, in_b, in_c)] + ([(self.conv1d.weight, b, c), (self.conv1d.bias, b, c)]
                                                          if "conv" not in mimetic.split("_") else [])
            mimetic_(mimetic, self.A_log, self.dt_bias, ties, [self.conv1d])

    def new_cache(self, batch: int, like: torch.Tensor) -> Mamba2Cache:
        acc = torch.promote_types(like.dtype, torch.float32)
        return Mamba2Cache(conv=like.new_zeros(batch, self.conv_dim, self.d_conv - 1),
                           ssm=like.new_zeros(batch, self.heads, self.headdim, self.d_state, dtype=acc))

    def _split(self, xBC: torch.Tensor):
        x, B, C = xBC.split([self.d_inner, self.d_state, self.d_state], dim=-1)
        return x.unflatten(-1, (self.heads, self.headdim)), B, C

    def _gate_norm_out(self, y: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        """mamba-ssm's RMSNormGated with norm_before_gate=False: the gate, then the norm."""
        y = y.flatten(-2) * F.silu(z)
        y = y * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + self.norm_eps) * self.norm_weight
        return self.out_proj(y)

    def forward(self, h: torch.Tensor, cache: Mamba2Cache | None = None) -> torch.Tensor:
        if cache is not None and cache.filled:
            return self.step(h, cache)
        z, xBC, dt = self.in_proj(h).split([self.d_inner, self.conv_dim, self.heads], dim=-1)
        x, B, C = self._split(short_conv(xBC, self.conv1d, cache))
        acc = torch.promote_types(x.dtype, torch.float32)  # the scan's precision: fp32, or fp64 in tests
        A = -torch.exp(self.A_log.to(acc))
        kernel = mamba2_kernel() if self.scan == "auto" and h.is_cuda else None
        if self.training:  # what trained (evaluation may run another form)
            self.scan_ran = scan_form(kernel, self.scan, library="mamba-ssm")
        if kernel is not None:
            y, last = kernel(x, dt, A, B[:, :, None], C[:, :, None], KERNEL_CHUNK, D=self.D, dt_bias=self.dt_bias,
                             dt_softplus=True, return_final_states=True)
        else:
            dt = F.softplus(dt + self.dt_bias).to(acc)
            if self.scan == "recurrent":
                y, last = ssd_recurrent(x.to(acc), dt, A, B.to(acc), C.to(acc))
            else:
                y, last = ssd_chunked(x.to(acc), dt, A, B.to(acc), C.to(acc), self.chunk)
            y = y.to(x.dtype) + x * self.D[:, None]
        if cache is not None:
            cache.ssm, cache.filled = last.to(acc), True
        return self._gate_norm_out(y, z)

    def step(self, h: torch.Tensor, cache: Mamba2Cache) -> torch.Tensor:
        """One token, h of shape (batch, 1, d_model); advances the cache."""
        z, xBC, dt = self.in_proj(h[:, 0]).split([self.d_inner, self.conv_dim, self.heads], dim=-1)
        x, B, C = self._split(short_conv_step(xBC, self.conv1d, cache))
        acc = cache.ssm.dtype
        dt = F.softplus(dt + self.dt_bias).to(acc)
        A = -torch.exp(self.A_log.to(acc))
        y, cache.ssm = ssd_recurrent(x[:, None].to(acc), dt[:, None], A, B[:, None].to(acc), C[:, None].to(acc),
                                     cache.ssm)
        y = y[:, 0].to(x.dtype) + x * self.D[:, None]
        return self._gate_norm_out(y, z)[:, None]
