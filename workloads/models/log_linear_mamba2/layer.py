"""Log-linear Mamba-2 layer (Guo, Yang, Goel, Xing, Dao and Kim, "Log-Linear
Attention", 2025), laid out as flash-linear-attention's `LogLinearMamba2`: Mamba-2's
layer (mamba2/layer.py) whose one state per head becomes a Fenwick tree of states,
one per level, so the state grows with the log of the length.

Token t reads the tokens before it in buckets: itself (level 0), then for each set
bit l - 1 of t the 2^(l-1) tokens just below t's bits above it (level l): s is in t's
level bit_length(t XOR s). Each level has its own weight, lambda_t^l =
softplus(L_hl * dl_t^l), dl a projection of the token (fla's in_proj gains
heads x levels outputs) and L a parameter (ones at init):

    y_t = sum_{s <= t} lambda_t^{level(t, s)} exp(sum_{u=s+1..t} dt_u A) (C_t . B_s) dt_s x_s + D x_t

Training runs this as one masked product over the sequence (the quadratic form);
decoding runs the recurrence: a state per level, decayed every token, level 0
holding the newest token, and levels 0..m merged into level m + 1 when a token
whose position has m trailing zero bits arrives. On CUDA, flash-linear-attention's
`chunk_log_linear_attn` (package fla-core) replaces the quadratic form where it
imports; it is imported lazily, as it needs triton.
"""

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from workloads.models.mamba2.layer import Mamba2Mixer
from workloads.models.recurrent_parts import optional_kernel, scan_form, short_conv, short_conv_step


def levels_between(length: int, device=None) -> torch.Tensor:
    """(length, length): the level of key s in query t's tree, bit_length(t XOR s)
    (0 on the diagonal; above it, where s > t, a value never read)."""
    pos = torch.arange(length, device=device)
    xor = pos[:, None] ^ pos[None, :]
    bits = torch.arange(max(1, length.bit_length()), device=device)
    return (xor[..., None] >= (1 << bits)).sum(-1)


def log_linear_quadratic(x, dt, A, B, C, lam):
    """The layer's scan over whole sequences, as one masked product. x (batch,
    length, heads, headdim), dt (batch, length, heads) after softplus, A (heads,)
    negative, B and C (batch, length, d_state), lam (batch, length, heads, levels).
    Returns y like x (without the D skip)."""
    b, length, h, p = x.shape
    if length > 1 << (lam.shape[-1] - 1):
        raise ValueError(f"{length} tokens need {length.bit_length() + 1} levels; the layer has {lam.shape[-1]}")
    cum = torch.cumsum(dt * A, dim=1).transpose(1, 2)  # (b, h, t)
    causal = torch.ones(length, length, dtype=torch.bool, device=x.device).tril()
    decay = torch.exp((cum[..., :, None] - cum[..., None, :]).masked_fill(~causal, -torch.inf))  # (b, h, t, s)
    level = levels_between(length, x.device).expand(b, h, length, length)
    weight = lam.transpose(1, 2).gather(-1, level)  # (b, h, t, s): lambda_t at level(t, s)
    scores = (C @ B.transpose(1, 2))[:, None] * decay * weight
    return torch.einsum("bhts,bshp->bthp", scores, x * dt[..., None])


def log_linear_recurrent(x, dt, A, B, C, lam, state=None, start: int = 0):
    """The same, a token at a time from position `start` (arguments as
    log_linear_quadratic): state (batch, levels, heads, headdim, d_state), one
    state per level, or None for zeros. Returns y and the last state."""
    b, length, h, p = x.shape
    levels = lam.shape[-1]
    if state is None:
        state = x.new_zeros(b, levels, h, p, B.shape[-1])
    decay = torch.exp(dt * A)  # (batch, length, heads): A may be laid out per row (an array's)
    ys = []
    for i in range(length):
        t = start + i
        state = state * decay[:, i, None, :, None, None]
        if t > 0:  # levels 0..m hold the 2^m tokens below t: one bucket of level m + 1 from now on
            m = (t & -t).bit_length() - 1
            if m + 1 >= levels:
                raise ValueError(f"position {t} needs {m + 2} levels; the layer has {levels}")
            merged = state[:, : m + 1].sum(1, keepdim=True)
            state = torch.cat([torch.zeros_like(state[:, : m + 1]), merged, state[:, m + 2:]], dim=1)
        write = (dt[:, i, :, None] * x[:, i])[..., None] * B[:, i, None, None, :]  # (b, h, p, n)
        state = torch.cat([write[:, None], state[:, 1:]], dim=1)
        ys.append(torch.einsum("blhpn,bn,bhl->bhp", state, C[:, i], lam[:, i]))
    return torch.stack(ys, dim=1), state


def _import_kernel():
    return optional_kernel("fla.ops.log_linear_attn", "chunk_log_linear_attn")


@dataclass
class LogLinearMamba2Cache:
    conv: torch.Tensor  # (batch, conv_dim, d_conv - 1): the conv's most recent inputs
    ssm: torch.Tensor  # (batch, levels, heads, headdim, d_state): a state per level
    tokens: int = 0  # the position of the next token (the tree's shape depends on it)
    filled: bool = False


class LogLinearMamba2Mixer(Mamba2Mixer):
    """`scan`: auto (fla's kernel on CUDA where it imports, the quadratic form
    otherwise), quadratic, or recurrent (the step-by-step reference)."""

    def __init__(self, d_model: int, d_state: int = 64, d_conv: int = 4, expand: int = 2, headdim: int = 32,
                 levels: int = 15, n_layers: int = 1, norm_eps: float = 1e-5, scan: str = "auto"):
        super().__init__(d_model, d_state=d_state, d_conv=d_conv, expand=expand, headdim=headdim,
                         n_layers=n_layers, norm_eps=norm_eps, scan=scan)
        self.levels = levels
        # fla's in_proj: z, xBC, dt, then dl (heads x levels); its A is 1..heads, its L ones
        self.in_proj = nn.Linear(d_model, 2 * self.d_inner + 2 * d_state + self.heads * (1 + levels), bias=False)
        with torch.no_grad():
            self.A_log.copy_(torch.log(torch.arange(1, self.heads + 1, dtype=self.A_log.dtype)))
        self.L = nn.Parameter(torch.ones(self.heads, levels))

    def new_cache(self, batch: int, like: torch.Tensor) -> LogLinearMamba2Cache:
        acc = torch.promote_types(like.dtype, torch.float32)
        return LogLinearMamba2Cache(conv=like.new_zeros(batch, self.conv_dim, self.d_conv - 1),
                                    ssm=like.new_zeros(batch, self.levels, self.heads, self.headdim, self.d_state,
                                                       dtype=acc))

    def _project(self, h: torch.Tensor):
        """in_proj's parts: the gate z, the conv's input xBC, dt and the levels' dl."""
        return self.in_proj(h).split([self.d_inner, self.conv_dim, self.heads, self.heads * self.levels], dim=-1)

    def _scan_inputs(self, xBC: torch.Tensor, dt: torch.Tensor, dl: torch.Tensor):
        """x, then dt, A, B, C and lambda in the scan's precision, from the conv's output."""
        x, B, C = self._split(xBC)
        acc = torch.promote_types(x.dtype, torch.float32)  # fp32, or fp64 in tests
        lam = F.softplus(self.L.to(acc) * dl.to(acc).unflatten(-1, (-1, self.levels)))
        return x, F.softplus(dt.to(acc) + self.dt_bias), -torch.exp(self.A_log.to(acc)), B.to(acc), C.to(acc), lam

    def _scan(self, x, dt, A, B, C, lam, kernel=None):
        """Whole sequences, as `scan` and `kernel` say: y (with the D skip)."""
        xs = x.to(A.dtype)
        if kernel is not None:
            y, _ = kernel(C[:, :, None], B[:, :, None], xs * dt[..., None], dt * A, lam, scale=1.0)
        elif self.scan == "recurrent":
            y, _ = log_linear_recurrent(xs, dt, A, B, C, lam)
        else:
            y = log_linear_quadratic(xs, dt, A, B, C, lam)
        return y.to(x.dtype) + x * self.D[..., None]

    def _kernel(self, on_cuda: bool):
        return _import_kernel()[0] if self.scan == "auto" and on_cuda else None

    def forward(self, h: torch.Tensor, cache: LogLinearMamba2Cache | None = None) -> torch.Tensor:
        z, xBC, dt, dl = self._project(h)
        decoding = cache is not None and cache.filled  # one token at a time
        if decoding:
            conv = short_conv_step(xBC[:, 0], self.conv1d, cache)[:, None]
        else:
            conv = short_conv(xBC, self.conv1d, cache)
        x, dt, A, B, C, lam = self._scan_inputs(conv, dt, dl)
        if cache is None:
            kernel = self._kernel(h.is_cuda)
            if self.training:  # what trained (evaluation may run another form)
                self.scan_ran = scan_form(kernel, self.scan, trains="quadratic")
            return self._gate_norm_out(self._scan(x, dt, A, B, C, lam, kernel), z)
        # prefill and decoding: the recurrence, from the cache's state and position
        y, cache.ssm = log_linear_recurrent(x.to(A.dtype), dt, A, B, C, lam, cache.ssm if decoding else None,
                                            start=cache.tokens)
        cache.tokens, cache.filled = cache.tokens + h.shape[1], True
        return self._gate_norm_out(y.to(x.dtype) + x * self.D[..., None], z)
