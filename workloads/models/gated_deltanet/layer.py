"""Gated DeltaNet layer (Yang, Kautz and Hatamizadeh, ICLR 2025): the delta rule
with a Mamba-2 style decay, laid out as flash-linear-attention's `GatedDeltaNet`.

Per head, with q and k L2-normalised (q then scaled by 1/sqrt(head_dim)), beta_t =
sigmoid(b_proj x_t) and the decay a_t = exp(g_t), g_t = -exp(A_log) softplus(a_proj
x_t + dt_bias), the state H (head_dim x value dim) follows

    u_t = beta_t (v_t - a_t H_{t-1}^T k_t)        (what k_t should read, corrected)
    H_t = a_t H_{t-1} + k_t u_t^T
    o_t = H_t^T q_t

q, k and v pass short causal convolutions with SiLU first; the output is
o_proj(RMSNorm(o) * silu(g_proj x)), the norm per head. Training runs the chunked
form of the recurrence (the WY/UT representation: within a chunk the u_t solve
one unit lower-triangular system); decoding runs the recurrence. On CUDA,
flash-linear-attention's kernel (package fla-core) replaces the chunked form where
it imports; it is imported lazily, as it needs triton.
"""

import functools
import math
import warnings
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from workloads.models.recurrent_parts import (delta_rule_forward, dt_bias_init, optional_kernel, residual_out_proj,
                                              short_conv_step)


def delta_recurrent(q, k, v, g, beta, state=None):
    """The recurrence, a token at a time: the reference. q and k (batch, length,
    heads, dk), normalised and scaled; v (batch, length, heads, dv); g and beta
    (batch, length, heads); state (batch, heads, dk, dv) or None for zeros.
    Returns o like v and the last state."""
    b, length, h, dk = k.shape
    if state is None:
        state = v.new_zeros(b, h, dk, v.shape[-1])
    outs = []
    for t in range(length):
        state = torch.exp(g[:, t])[..., None, None] * state
        u = beta[:, t, :, None] * (v[:, t] - torch.einsum("bhkv,bhk->bhv", state, k[:, t]))
        state = state + k[:, t, :, :, None] * u[:, :, None, :]
        outs.append(torch.einsum("bhkv,bhk->bhv", state, q[:, t]))
    return torch.stack(outs, dim=1), state


def delta_chunked(q, k, v, g, beta, chunk: int = 32, state=None):
    """The same recurrence in chunks (arguments as delta_recurrent).

    Inside a chunk entered with state S, let c_t be the running product of the
    decays and G_ts = c_t / c_s. Unrolling gives H_t = c_t S + sum_{s <= t} G_ts k_s u_s^T,
    so the u_t satisfy (I + L) U = diag(beta) (V - diag(c) K S), L_ts = beta_t G_ts
    (k_t . k_s) for s < t: one unit lower-triangular solve per chunk gives
    U = T V - (T diag(c) K) S with T = (I + L)^-1 diag(beta). Then
    O = diag(c) Q S + (Q K^T * G, s <= t) U and the state leaving the chunk is
    c_end S + (K * c_end / c)^T U. A length that is not a multiple of `chunk` is
    padded with g = 0 and beta = 0, which leave the state unchanged."""
    b, length, h, dk = k.shape
    dv = v.shape[-1]
    pad = -length % chunk
    if pad:
        q, k, v = (F.pad(x, (0, 0, 0, 0, 0, pad)) for x in (q, k, v))
        g, beta = (F.pad(x, (0, 0, 0, pad)) for x in (g, beta))
    n_chunks = k.shape[1] // chunk
    # (batch, heads, chunks, chunk, ...): one head's chunk is a small matrix problem
    q, k, v = (x.view(b, n_chunks, chunk, h, -1).permute(0, 3, 1, 2, 4) for x in (q, k, v))
    g, beta = (x.view(b, n_chunks, chunk, h).permute(0, 3, 1, 2) for x in (g, beta))
    log_c = torch.cumsum(g, dim=-1)  # (b, h, n, t), non-increasing in t
    gaps = log_c[..., :, None] - log_c[..., None, :]  # log G_ts; positive above the diagonal
    below = torch.ones(chunk, chunk, dtype=torch.bool, device=k.device).tril(-1)
    decay_strict = torch.exp(gaps.masked_fill(~below, -math.inf))  # masked before exp: no overflow
    eye = torch.eye(chunk, dtype=k.dtype, device=k.device)
    system = eye + beta[..., None] * decay_strict * (k @ k.transpose(-1, -2))
    # T V and T diag(c) K in one solve: their right-hand sides side by side
    rhs = beta[..., None] * torch.cat([v, torch.exp(log_c)[..., None] * k], dim=-1)
    T_v, T_k = torch.linalg.solve_triangular(system, rhs, upper=False, unitriangular=True).split([dv, dk], dim=-1)
    scores = (q @ k.transpose(-1, -2)) * (decay_strict + eye)  # (b, h, n, t, s), decays for s <= t
    to_end = torch.exp(log_c[..., -1:] - log_c)  # c_end / c_t
    if state is None:
        state = v.new_zeros(b, h, dk, dv)
    outs = []
    # The state passed from chunk to chunk. unbind, not indexing: the backward of
    # each index would fill a zero tensor of the full size.
    reads = torch.exp(log_c)[..., None] * q  # diag(c) Q
    writes = (k * to_end[..., None]).transpose(-1, -2)  # (K * c_end / c)^T
    for T_v_n, T_k_n, reads_n, scores_n, writes_n, decay_n in zip(
            *(x.unbind(2) for x in (T_v, T_k, reads, scores, writes, torch.exp(log_c[..., -1]))), strict=True):
        u = T_v_n - T_k_n @ state
        outs.append(reads_n @ state + scores_n @ u)
        state = decay_n[..., None, None] * state + writes_n @ u
    o = torch.stack(outs, dim=2)  # (b, h, n, t, dv)
    return o.permute(0, 2, 3, 1, 4).reshape(b, n_chunks * chunk, h, dv)[:, :length], state


def _import_kernel():
    return optional_kernel("fla.ops.gated_delta_rule", "chunk_gated_delta_rule")


def gated_deltanet_kernel():
    """flash-linear-attention's chunked kernel, or None where it does not import."""
    return _import_kernel()[0]


@functools.cache
def kernel_backward_refused() -> str:
    """Why fla's gated backward refuses to run on this GPU, or "" where it runs.

    fla raises in the backward on Hopper with Triton 3.4.0 up to 3.7.1, which
    miscompiles one of its kernels (fla issue #640; torch up to 2.12.0 pins such a
    Triton), unless tilelang is installed to replace that kernel. Its forward is
    unaffected."""
    import importlib.util

    try:
        from fla.utils import IS_NVIDIA_HOPPER, TRITON_ABOVE_3_4_0, TRITON_ABOVE_3_7_1
    except ImportError:
        return ""
    if IS_NVIDIA_HOPPER and TRITON_ABOVE_3_4_0 and not TRITON_ABOVE_3_7_1 and importlib.util.find_spec("tilelang") is None:
        import triton

        return (f"flash-linear-attention refuses the gated backward on Hopper with Triton {triton.__version__} "
                "(fla issue #640: Triton >= 3.7.1 or tilelang fixes it)")
    return ""


def pick_kernel(scan: str, on_cuda: bool, grad: bool):
    """fla's kernel where `scan` auto may use it: on CUDA, where it imports, and
    where a backward would follow, only if fla runs one here (else our chunked
    form trains, with a warning once)."""
    kernel = gated_deltanet_kernel() if scan == "auto" and on_cuda else None
    if kernel is not None and grad and kernel_backward_refused():
        _warn_once(f"{kernel_backward_refused()}: Gated DeltaNet trains on our chunked form here")
        return None
    return kernel


@functools.cache
def _warn_once(message: str) -> None:
    warnings.warn(message, stacklevel=3)


@dataclass
class GatedDeltaNetCache:
    conv: torch.Tensor  # (batch, 2 dk + dv, d_conv - 1): the convolutions' most recent inputs
    state: torch.Tensor  # (batch, heads, head_dim, value dim)
    filled: bool = False


class GatedDeltaNetMixer(nn.Module):
    """`scan`: auto (fla's kernel on CUDA where it imports and runs, see
    pick_kernel; the chunked form otherwise), chunked, or recurrent (the
    step-by-step reference)."""

    def __init__(self, d_model: int, heads: int = 2, head_dim: int = 32, expand_v: int = 2, d_conv: int = 4,
                 chunk: int = 16, n_layers: int = 1, norm_eps: float = 1e-5, scan: str = "auto"):
        super().__init__()
        self.n_heads, self.head_dim, self.dv = heads, head_dim, head_dim * expand_v
        self.d_conv, self.chunk, self.scan, self.norm_eps = d_conv, chunk, scan, norm_eps
        self.key_dim, self.value_dim = heads * head_dim, heads * self.dv
        self.conv_dim = 2 * self.key_dim + self.value_dim
        # fla's q, k, v, g (output gate), a (decay) and b (beta) projections as one
        # matmul: the same init (PyTorch's default depends on d_model only), fewer passes
        self.in_proj = nn.Linear(d_model, self.conv_dim + self.value_dim + 2 * heads, bias=False)
        # q, k and v convolve separately, as three depthwise convs (one weight here)
        self.conv1d = nn.Conv1d(self.conv_dim, self.conv_dim, d_conv, groups=self.conv_dim, bias=False)
        # fla's init: A uniform in [0, 16], dt as Mamba's (log-uniform in [1e-3, 1e-1], floor 1e-4)
        self.A_log = nn.Parameter(torch.log(torch.empty(heads).uniform_(0, 16)))
        self.dt_bias = nn.Parameter(dt_bias_init(heads))
        self.norm_weight = nn.Parameter(torch.ones(self.dv))
        self.o_proj = residual_out_proj(self.value_dim, d_model, n_layers)  # the other recurrent mixers' rule

    def new_cache(self, batch: int, like: torch.Tensor) -> GatedDeltaNetCache:
        acc = torch.promote_types(like.dtype, torch.float32)
        return GatedDeltaNetCache(conv=like.new_zeros(batch, self.conv_dim, self.d_conv - 1),
                                  state=like.new_zeros(batch, self.n_heads, self.head_dim, self.dv, dtype=acc))

    def _project(self, h: torch.Tensor):
        """in_proj's parts: the conv's input (q, k, v), the output gate, a and b."""
        return self.in_proj(h).split([self.conv_dim, self.value_dim, self.n_heads, self.n_heads], dim=-1)

    def _inputs(self, qkv: torch.Tensor, a: torch.Tensor, b: torch.Tensor):
        """q, k (normalised, q scaled), v, g and beta per head, in the scan's precision."""
        acc = torch.promote_types(qkv.dtype, torch.float32)
        qk, v = qkv.to(acc).split([2 * self.key_dim, self.value_dim], dim=-1)
        q, k = F.normalize(qk.unflatten(-1, (2 * self.n_heads, -1)), dim=-1).chunk(2, dim=-2)  # one pass for both
        q, v = q / math.sqrt(self.head_dim), v.unflatten(-1, (self.n_heads, -1))
        g = -torch.exp(self.A_log.to(acc)) * F.softplus(a.to(acc) + self.dt_bias)
        return q, k, v, g, torch.sigmoid(b.to(acc))

    def _norm_gate_out(self, o: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
        """fla's FusedRMSNormGated: each head's output normalised, then gated."""
        o = o * torch.rsqrt(o.pow(2).mean(-1, keepdim=True) + self.norm_eps) * self.norm_weight
        return self.o_proj((o.flatten(-2) * F.silu(gate)).to(gate.dtype))

    forward = delta_rule_forward  # projections, conv, inputs, scan, gated norm (recurrent_parts.py)

    def _kernel(self, on_cuda: bool):
        return pick_kernel(self.scan, on_cuda, torch.is_grad_enabled())

    def _scan(self, q, k, v, g, beta, kernel=None):
        """The recurrence over whole sequences, as `scan` and `kernel` say: o and the last state."""
        if kernel is not None:
            return kernel(q, k, v, g, beta, scale=1.0, output_final_state=True)
        if self.scan == "recurrent":
            return delta_recurrent(q, k, v, g, beta)
        return delta_chunked(q, k, v, g, beta, self.chunk)

    def step(self, h: torch.Tensor, cache: GatedDeltaNetCache) -> torch.Tensor:
        """One token, h of shape (batch, 1, d_model); advances the cache."""
        qkv, gate, a, b = self._project(h)
        q, k, v, g, beta = self._inputs(short_conv_step(qkv[:, 0], self.conv1d, cache)[:, None], a, b)
        o, cache.state = delta_recurrent(q, k, v, g, beta, cache.state)
        return self._norm_gate_out(o, gate)
