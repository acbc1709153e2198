"""Gated DeltaProduct layer (Siems et al., 2025): Gated DeltaNet's delta rule taken
`householder` times per token, laid out as flash-linear-attention's
`GatedDeltaProduct`.

Each token t brings n = `householder` keys k_t1..k_tn, values v_t1..v_tn and
strengths beta_t1..beta_tn (q and the keys L2-normalised, q scaled by
1/sqrt(head_dim)), one decay a_t = exp(g_t) and one query q_t. Per head:

    H <- a_t H                                    (once per token)
    H <- H + k_tj beta_tj (v_tj - H^T k_tj)^T     (j = 1..n: n delta-rule steps)
    o_t = H^T q_t

so a token's transition is a product of n generalised Householder matrices
(I - beta k k^T) instead of Gated DeltaNet's one. With beta in (0, 2)
(`negative_eigenvalues`, fla's default) a step may reflect.

That is the gated delta rule on a sequence n times as long, the decay on each
token's first step, the query on its last (fla's own recurrent path runs it so):
our chunked form and our recurrence are Gated DeltaNet's (`delta_chunked`,
`delta_recurrent`) on that sequence, and on CUDA fla's gated delta rule kernel,
imported lazily, runs it where it imports (Gated DeltaNet's `pick_kernel`).
"""

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from workloads.models.gated_deltanet.layer import GatedDeltaNetMixer, delta_chunked, delta_recurrent
from workloads.models.recurrent_parts import delta_rule_forward, dt_bias_init, residual_out_proj, short_conv_step


def interleave(q, k, v, g, beta, n: int):
    """A token's n steps as n positions of one sequence: q (batch, length, heads,
    dk) at each token's last step, g (batch, length, heads) at its first, zeros
    elsewhere; k (batch, length, n, heads, dk), v and beta likewise, flattened."""
    b, length, h, dk = q.shape
    steps = length * n
    q_steps = torch.cat([q.new_zeros(b, length, n - 1, h, dk), q[:, :, None]], dim=2).reshape(b, steps, h, dk)
    g_steps = torch.cat([g[:, :, None], g.new_zeros(b, length, n - 1, h)], dim=2).reshape(b, steps, h)
    return q_steps, k.flatten(1, 2), v.flatten(1, 2), g_steps, beta.flatten(1, 2)


def product_scan(q, k, v, g, beta, state=None, chunk: int = 32, scan: str = "chunked", kernel=None):
    """The gated delta product over whole tokens: q (batch, length, heads, dk); k
    (batch, length, n, heads, dk), v (..., n, heads, dv), beta (batch, length, n,
    heads); g (batch, length, heads). Returns o (batch, length, heads, dv) and the
    last state."""
    n = k.shape[2]
    steps = interleave(q, k, v, g, beta, n)
    if kernel is not None:
        o, last = kernel(*steps, scale=1.0, initial_state=state, output_final_state=True)
    elif scan == "recurrent":
        o, last = delta_recurrent(*steps, state=state)
    else:
        o, last = delta_chunked(*steps, chunk=chunk, state=state)
    return o.unflatten(1, (q.shape[1], n))[:, :, -1], last


@dataclass
class GatedDeltaProductCache:
    conv: torch.Tensor  # (batch, conv channels, d_conv - 1): the convolutions' most recent inputs
    state: torch.Tensor  # (batch, heads, head_dim, value dim)
    filled: bool = False


class GatedDeltaProductMixer(nn.Module):
    """`scan`: auto (fla's gated delta rule kernel on CUDA where it imports and
    runs; the chunked form otherwise), chunked, or recurrent (step by step)."""

    def __init__(self, d_model: int, heads: int = 2, head_dim: int = 32, expand_v: int = 2, householder: int = 2,
                 negative_eigenvalues: bool = True, d_conv: int = 4, chunk: int = 32, n_layers: int = 1,
                 norm_eps: float = 1e-5, scan: str = "auto"):
        super().__init__()
        self.n_heads, self.head_dim, self.dv, self.n = heads, head_dim, head_dim * expand_v, householder
        self.max_beta = 2.0 if negative_eigenvalues else 1.0
        self.d_conv, self.chunk, self.scan, self.norm_eps = d_conv, chunk, scan, norm_eps
        self.key_dim, self.value_dim = heads * head_dim, heads * self.dv
        self.conv_dim = self.key_dim + householder * (self.key_dim + self.value_dim)  # q, n keys, n values
        # fla's q, k, v, g (output gate), a (decay) and b (beta) projections as one matmul
        self.in_proj = nn.Linear(d_model, self.conv_dim + self.value_dim + heads * (1 + householder), bias=False)
        self.conv1d = nn.Conv1d(self.conv_dim, self.conv_dim, d_conv, groups=self.conv_dim, bias=False)
        # fla's init: A uniform in [0, 16], dt as Mamba's
        self.A_log = nn.Parameter(torch.log(torch.empty(heads).uniform_(0, 16)))
        self.dt_bias = nn.Parameter(dt_bias_init(heads))
        self.norm_weight = nn.Parameter(torch.ones(self.dv))
        self.o_proj = residual_out_proj(self.value_dim, d_model, n_layers)  # the other recurrent mixers' rule

    def new_cache(self, batch: int, like: torch.Tensor) -> GatedDeltaProductCache:
        acc = torch.promote_types(like.dtype, torch.float32)
        return GatedDeltaProductCache(conv=like.new_zeros(batch, self.conv_dim, self.d_conv - 1),
                                      state=like.new_zeros(batch, self.n_heads, self.head_dim, self.dv, dtype=acc))

    def _project(self, h: torch.Tensor):
        """in_proj's parts: the conv's input (q, keys, values), the output gate, a and b."""
        return self.in_proj(h).split([self.conv_dim, self.value_dim, self.n_heads, self.n_heads * self.n], dim=-1)

    def _inputs(self, qkv: torch.Tensor, a: torch.Tensor, b: torch.Tensor):
        """q (normalised, scaled), the n keys (normalised), values, g and beta per
        head, in the scan's precision; the keys' channels are laid out (step, head,
        dim), fla's."""
        acc = torch.promote_types(qkv.dtype, torch.float32)
        q, k, v = qkv.to(acc).split([self.key_dim, self.n * self.key_dim, self.n * self.value_dim], dim=-1)
        q = F.normalize(q.unflatten(-1, (self.n_heads, -1)), dim=-1) / self.head_dim**0.5
        k = F.normalize(k.unflatten(-1, (self.n, self.n_heads, -1)), dim=-1)
        v = v.unflatten(-1, (self.n, self.n_heads, -1))
        g = -torch.exp(self.A_log.to(acc)) * F.softplus(a.to(acc) + self.dt_bias)
        beta = self.max_beta * torch.sigmoid(b.to(acc)).unflatten(-1, (self.n, self.n_heads))
        return q, k, v, g, beta

    _norm_gate_out = GatedDeltaNetMixer._norm_gate_out  # fla's FusedRMSNormGated, as Gated DeltaNet's

    forward = delta_rule_forward  # projections, conv, inputs, scan, gated norm (recurrent_parts.py)

    _kernel = GatedDeltaNetMixer._kernel  # fla's gated delta rule, where it runs (pick_kernel)

    def _scan(self, q, k, v, g, beta, kernel=None):
        """The product over whole sequences, as `scan` and `kernel` say: o and the last state."""
        return product_scan(q, k, v, g, beta, chunk=self.chunk, scan=self.scan, kernel=kernel)

    def step(self, h: torch.Tensor, cache: GatedDeltaProductCache) -> torch.Tensor:
        """One token, h of shape (batch, 1, d_model); advances the cache."""
        qkv, gate, a, b = self._project(h)
        inputs = self._inputs(short_conv_step(qkv[:, 0], self.conv1d, cache)[:, None], a, b)
        o, cache.state = product_scan(*inputs, state=cache.state, scan="recurrent")
        return self._norm_gate_out(o, gate)
