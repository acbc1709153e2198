"""Kimi Delta Attention layer (Kimi Team, "Kimi Linear", arXiv 2510.26692), laid
out as flash-linear-attention's `KimiDeltaAttention`: Gated DeltaNet's delta rule
with a decay per key channel, not per head.

Per head, with q and k L2-normalised (q then scaled by 1/sqrt(head_dim)), beta_t =
sigmoid(b_proj x_t) and the log-decay per key channel g_t = -exp(A_log)
softplus(f_proj x_t + dt_bias), f_proj a low-rank projection (d_model -> value
width -> key width), the state follows the channel-wise delta rule
(workloads/models/channel_delta_rule.py) with erase key beta_t k_t and write value
beta_t v_t. q, k and v pass short causal convolutions with SiLU first; the output is
o_proj(RMSNorm(o) * sigmoid(g_proj x)), the norm per head and g_proj low-rank with
a bias. Training runs the chunked form; decoding runs the recurrence. On CUDA,
flash-linear-attention's kernel (package fla-core) replaces the chunked form where
it imports; it is imported lazily, as it needs triton.

Gated DeltaNet-2 (gated_deltanet2/) is this layer with other gates: it overrides
`gate_widths`, `_gated` and `_delta`.
"""

import math

import torch
import torch.nn.functional as F
from torch import nn

from workloads.models.channel_delta_rule import channel_delta_chunked, channel_delta_recurrent
from workloads.models.gated_deltanet.layer import GatedDeltaNetCache  # the same conv and state
from workloads.models.recurrent_parts import (delta_rule_forward, dt_bias_init, optional_kernel, residual_out_proj,
                                              short_conv_step)


class KimiDeltaAttentionMixer(nn.Module):
    """`scan`: auto (fla's kernel on CUDA where it imports; the chunked form
    otherwise), chunked, or recurrent (the step-by-step reference)."""

    KERNEL = ("fla.ops.kda", "chunk_kda")
    # Linear layers and per-head parameters, named for the fused form of an array
    # (workloads/models/gated_deltanet/array.py).
    LINEARS = ("in_proj", "f_up", "g_up", "o_proj")
    PER_HEAD = ("A_log", "dt_bias", "norm_weight")

    def __init__(self, d_model: int, heads: int = 2, head_dim: int = 32, expand_v: int = 1, d_conv: int = 4,
                 chunk: int = 4, n_layers: int = 1, norm_eps: float = 1e-5, scan: str = "auto"):
        super().__init__()
        self.n_heads, self.head_dim, self.dv = heads, head_dim, head_dim * expand_v
        self.d_conv, self.chunk, self.scan, self.norm_eps = d_conv, chunk, scan, norm_eps
        self.key_dim, self.value_dim = heads * head_dim, heads * self.dv
        self.conv_dim = 2 * self.key_dim + self.value_dim
        # fla's q, k and v projections, the first halves of its low-rank f (decay) and
        # g (output gate) projections and its gates' projections, as one matmul: the
        # same init (PyTorch's default depends on d_model only), fewer passes
        self.splits = [self.conv_dim, self.dv, self.dv, *self.gate_widths()]
        self.in_proj = nn.Linear(d_model, sum(self.splits), bias=False)
        self.conv1d = nn.Conv1d(self.conv_dim, self.conv_dim, d_conv, groups=self.conv_dim, bias=False)
        self.f_up = nn.Linear(self.dv, self.key_dim, bias=False)
        self.g_up = nn.Linear(self.dv, self.value_dim, bias=True)
        # fla's init: A uniform in [1, 16] per head, dt as Mamba's per key channel
        self.A_log = nn.Parameter(torch.log(torch.empty(heads).uniform_(1, 16)))
        self.dt_bias = nn.Parameter(dt_bias_init(self.key_dim))
        self.norm_weight = nn.Parameter(torch.ones(self.dv))
        self.o_proj = residual_out_proj(self.value_dim, d_model, n_layers)  # the other recurrent mixers' rule

    def gate_widths(self) -> list[int]:
        """The widths of the gates' projections: beta, one per head."""
        return [self.n_heads]

    def new_cache(self, batch: int, like: torch.Tensor) -> GatedDeltaNetCache:
        acc = torch.promote_types(like.dtype, torch.float32)
        return GatedDeltaNetCache(conv=like.new_zeros(batch, self.conv_dim, self.d_conv - 1),
                                 state=like.new_zeros(batch, self.n_heads, self.head_dim, self.dv, dtype=acc))

    def _project(self, h: torch.Tensor):
        """The conv's input (q, k, v), the output gate, the decay's projection and the gates'."""
        qkv, f, gate, *gates = self.in_proj(h).split(self.splits, dim=-1)
        return qkv, self.g_up(gate), self.f_up(f), *gates

    def _inputs(self, qkv: torch.Tensor, f: torch.Tensor, *gates: torch.Tensor):
        """q, k (normalised, q scaled), v, g (per key channel) and the gates, per head,
        in the scan's precision."""
        acc = torch.promote_types(qkv.dtype, torch.float32)
        qk, v = qkv.to(acc).split([2 * self.key_dim, self.value_dim], dim=-1)
        q, k = F.normalize(qk.unflatten(-1, (2 * self.n_heads, -1)), dim=-1).chunk(2, dim=-2)  # one pass for both
        q, v = q / math.sqrt(self.head_dim), v.unflatten(-1, (self.n_heads, -1))
        decay = F.softplus(f.to(acc) + self.dt_bias).unflatten(-1, (self.n_heads, -1))
        g = -torch.exp(self.A_log.to(acc))[..., None] * decay
        return q, k, v, g, *self._gated(*(x.to(acc) for x in gates))

    def _gated(self, b: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return (torch.sigmoid(b),)  # beta, per head

    def _delta(self, k, v, beta):
        """The channel-wise delta rule's erase key and write value (channel_delta_rule.py)."""
        return beta[..., None] * k, beta[..., None] * v

    def _scan(self, q, k, v, g, *gates, kernel=None, state=None):
        """The recurrence over whole sequences (from `state`, else zeros), as `scan`
        and `kernel` say: o and the last state."""
        if kernel is not None:
            return kernel(q, k, v, g, *gates, scale=1.0, initial_state=state, output_final_state=True)
        r, written = self._delta(k, v, *gates)
        if self.scan == "recurrent":
            return channel_delta_recurrent(q, k, written, g, r, state)
        return channel_delta_chunked(q, k, written, g, r, self.chunk, state)

    def _norm_gate_out(self, o: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
        """fla's FusedRMSNormGated with a sigmoid: each head's output normalised, then gated."""
        o = o * torch.rsqrt(o.pow(2).mean(-1, keepdim=True) + self.norm_eps) * self.norm_weight
        return self.o_proj((o.flatten(-2) * torch.sigmoid(gate)).to(gate.dtype))

    def _kernel(self, on_cuda: bool):
        return optional_kernel(*self.KERNEL)[0] if self.scan == "auto" and on_cuda else None

    forward = delta_rule_forward  # projections, conv, inputs, scan, gated norm (recurrent_parts.py)

    def step(self, h: torch.Tensor, cache: GatedDeltaNetCache) -> torch.Tensor:
        """One token, h of shape (batch, 1, d_model); advances the cache."""
        qkv, gate, f, *gates = self._project(h)
        q, k, v, g, *gated = self._inputs(short_conv_step(qkv[:, 0], self.conv1d, cache)[:, None], f, *gates)
        r, written = self._delta(k, v, *gated)
        o, cache.state = channel_delta_recurrent(q, k, written, g, r, cache.state)
        return self._norm_gate_out(o, gate)
