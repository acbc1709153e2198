"""RWKV-7 "Goose" time mixing (Peng et al., 2025), laid out as
flash-linear-attention's `RWKV7Attention`.

Per head, the state S (head_dim keys x head_dim values) follows the generalised
delta rule with a per-channel decay w_t (log, in (-e^-1/2, 0)) and an in-context
learning rate a_t (in (0, 1) per channel):

    S_t = (diag(exp w_t) - kk_t (a_t * kk_t)^T) S_{t-1} + k_t v_t^T
    o_t = S_t^T r_t

kk_t the normalised "removal" key, k_t the written key scaled by a_t (fla's
k_a), r_t the receptance (the query). In the scan's terms: a diagonal plus low
rank transition, S_t = (D_t + b_t a_t^T) S_{t-1} + k_t v_t^T with a = -kk and
b = kk * a (fla's names, `dplr_recurrent`). Around it, RWKV's token shift (each
projection reads a learnt mix of this token and the previous one), low-rank
projections for the decay, the learning rate and the output gate, a group norm
per head, and the "bonus" (r . k * r_k) v of the current token.

Training runs the chunked form (`dplr_chunked`); decoding runs the recurrence.
On CUDA, flash-linear-attention's `chunk_rwkv7`, imported lazily, replaces the
chunked form where it imports. Two parts of fla's RWKV-7 block are not here, as
no recurrent layer of this project has them: the channel-mixing MLP (our
recurrent layers are mixer-only, mamba-ssm's MixerModel rule) and the value
residual (v lerped towards the first layer's v), which would need a value passed
from layer to layer (docs/fidelity.md).
"""

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from workloads.models.recurrent_parts import optional_kernel, scan_form

DECAY_FLOOR = -math.exp(-0.5)  # fla's and RWKV-7's lower bound of the log decay per token


def dplr_recurrent(r, w, k, v, a, b, state=None):
    """The recurrence, a token at a time: the reference. r, w, k, a, b (batch,
    length, heads, dk); v (batch, length, heads, dv); state (batch, heads, dk, dv)
    or None for zeros. S_t = (diag(exp w_t) + b_t a_t^T) S_{t-1} + k_t v_t^T,
    o_t = S_t^T r_t. Returns o like v and the last state."""
    batch, length, heads, dk = k.shape
    if state is None:
        state = v.new_zeros(batch, heads, dk, v.shape[-1])
    outs = []
    for t in range(length):
        removed = torch.einsum("bhk,bhkv->bhv", a[:, t], state)  # a_t^T S
        state = (torch.exp(w[:, t])[..., None] * state + b[:, t, :, :, None] * removed[:, :, None, :]
                 + k[:, t, :, :, None] * v[:, t, :, None, :])
        outs.append(torch.einsum("bhkv,bhk->bhv", state, r[:, t]))
    return torch.stack(outs, dim=1), state


def dplr_chunked(r, w, k, v, a, b, chunk: int = 16, state=None):
    """The same recurrence in chunks (arguments as dplr_recurrent).

    Inside a chunk entered with state S0, let c_t be the running product of the
    decays (per channel) and u_t = S_{t-1}^T a_t what step t removes. Unrolling,
    S_t = C_t S0 + sum_{s <= t} (C_t / C_s) (b_s u_s^T + k_s v_s^T), so the u_t solve
    one unit lower-triangular system (I - L_ab) U = (A * c_prev) S0 + L_ak V, with
    L_xy[t, s] = sum_j x_tj (c_{t-1,j} / c_sj) y_sj for s < t; then
    O = (R * c) S0 + M_rb U + M_rk V (the same sums with c_t, s <= t) and
    S_end = c_end S0 + (B * c_end / c)^T U + (K * c_end / c)^T V. The ratios
    c_t / c_s are taken as products of a factor read at t (at most 1) and one
    written at s (at most exp(chunk |w|)): with the layer's decay floor (-e^-1/2),
    e^10 at chunks of 16 and e^39 at 64, within float32's range, and each sum's
    terms keep their relative precision. Both factors count from the chunk's
    start, so an output never depends on a later token, not even in rounding. A length that is not a multiple of `chunk` is padded with
    w = a = b = k = v = 0, which leave the state unchanged."""
    batch, length, heads, dk = k.shape
    dv = v.shape[-1]
    pad = -length % chunk
    if pad:
        r, w, k, v, a, b = (F.pad(x, (0, 0, 0, 0, 0, pad)) for x in (r, w, k, v, a, b))
    n_chunks = k.shape[1] // chunk
    # (batch, heads, chunks, chunk, channels): one head's chunk is a small matrix problem
    r, w, k, v, a, b = (x.view(batch, n_chunks, chunk, heads, -1).permute(0, 3, 1, 2, 4) for x in (r, w, k, v, a, b))
    log_c = torch.cumsum(w, dim=-2)  # through step t
    log_prev = log_c - w  # through step t - 1
    a_in, r_in = a * torch.exp(log_prev), r * torch.exp(log_c)  # read at t: at most 1
    b_out, k_out = b * torch.exp(-log_c), k * torch.exp(-log_c)  # written at s: up to exp(chunk |w|)
    eye = torch.eye(chunk, dtype=k.dtype, device=k.device)
    strict = torch.ones(chunk, chunk, dtype=torch.bool, device=k.device).tril(-1)
    L_ab = (a_in @ b_out.transpose(-1, -2)).masked_fill(~strict, 0)
    L_ak = (a_in @ k_out.transpose(-1, -2)).masked_fill(~strict, 0)
    keep = strict | eye.bool()
    M_rb = (r_in @ b_out.transpose(-1, -2)).masked_fill(~keep, 0)
    M_rk = (r_in @ k_out.transpose(-1, -2)).masked_fill(~keep, 0)
    # U = T_v + T_a S0: both right-hand sides in one solve
    rhs = torch.cat([L_ak @ v, a * torch.exp(log_prev)], dim=-1)
    T_v, T_a = torch.linalg.solve_triangular(eye - L_ab, rhs, upper=False, unitriangular=True).split([dv, dk], -1)
    direct = M_rk @ v  # what each chunk's own keys give its outputs
    reads = r * torch.exp(log_c)  # R * c
    to_end = torch.exp(log_c[..., -1:, :] - log_c)  # c_end / c_s
    b_end, k_end = (b * to_end).transpose(-1, -2), (k * to_end).transpose(-1, -2)
    written = k_end @ v  # (K * c_end / c)^T V
    if state is None:
        state = v.new_zeros(batch, heads, dk, dv)
    outs = []
    # unbind, not indexing: the backward of each index would fill a zero tensor of the full size
    per_chunk = (T_v, T_a, reads, M_rb, direct, b_end, written, torch.exp(log_c[..., -1, :]))
    for T_v_n, T_a_n, reads_n, M_rb_n, direct_n, b_end_n, written_n, decay_n in zip(
            *(x.unbind(2) for x in per_chunk), strict=True):
        u = T_v_n + T_a_n @ state
        outs.append(reads_n @ state + M_rb_n @ u + direct_n)
        state = decay_n[..., None] * state + b_end_n @ u + written_n
    o = torch.stack(outs, dim=2)  # (batch, heads, chunks, chunk, dv)
    return o.permute(0, 2, 3, 1, 4).reshape(batch, n_chunks * chunk, heads, dv)[:, :length], state


def _import_kernel():
    return optional_kernel("fla.ops.rwkv7", "chunk_rwkv7")


def rwkv7_kernel():
    """flash-linear-attention's chunked RWKV-7 kernel, or None where it does not import."""
    return _import_kernel()[0]


def _lora(d_model: int, rank: int, bias: bool) -> nn.Sequential:
    """fla's LoRA: down (zeros at init), an activation the caller applies, up
    (orthogonal, gain 0.1)."""
    down, up = nn.Linear(d_model, rank, bias=False), nn.Linear(rank, d_model, bias=bias)
    with torch.no_grad():
        nn.init.zeros_(down.weight)
        nn.init.orthogonal_(up.weight, gain=0.1 * (math.sqrt(rank / d_model) if rank > d_model else 1.0))
        if bias:
            up.bias.zero_()
    return nn.ModuleList([down, up])


@dataclass
class RWKV7Cache:
    shift: torch.Tensor  # (batch, d_model): the previous token's input
    state: torch.Tensor  # (batch, heads, head_dim, head_dim)
    filled: bool = False


class RWKV7Mixer(nn.Module):
    """`scan`: auto (fla's kernel on CUDA where it imports; the chunked form
    otherwise), chunked, or recurrent (the step-by-step reference). Its init is
    fla's, which depends on the layer's depth (`layer_idx` of `n_layers`)."""

    def __init__(self, d_model: int, head_dim: int = 32, decay_rank: int = 32, a_rank: int = 32, gate_rank: int = 32,
                 chunk: int = 16, n_layers: int = 1, norm_eps: float = 1e-5, scan: str = "auto", layer_idx: int = 0):
        super().__init__()
        self.d_model, self.head_dim, self.n_heads = d_model, head_dim, d_model // head_dim
        self.chunk, self.scan = chunk, scan
        self.mix = nn.Parameter(torch.zeros(6, d_model))  # token shift of r, w, k, v, a, g (fla's x_r ... x_g)
        self.k_k, self.k_a = nn.Parameter(torch.zeros(d_model)), nn.Parameter(torch.zeros(d_model))
        self.r_k = nn.Parameter(torch.zeros(self.n_heads, head_dim))
        self.r_proj, self.k_proj, self.v_proj, self.o_proj = (nn.Linear(d_model, d_model, bias=False) for _ in range(4))
        self.w_lora, self.a_lora = _lora(d_model, decay_rank, bias=True), _lora(d_model, a_rank, bias=True)
        self.g_lora = _lora(d_model, gate_rank, bias=False)
        self.g_norm = nn.GroupNorm(self.n_heads, d_model, eps=head_dim * norm_eps)
        self._init_by_depth(layer_idx, n_layers)

    @torch.no_grad()
    def _init_by_depth(self, layer_idx: int, n_layers: int) -> None:
        """fla's RWKV7Attention init: token-shift mixes, decay and learning-rate
        biases that vary across channels and layers, orthogonal r, k, v, a zero o."""
        d, hd = self.d_model, self.head_dim
        first_to_last = layer_idx / max(n_layers - 1, 1)  # 0 to 1
        fading = 1.0 - layer_idx / n_layers  # 1 to almost 0
        n = torch.arange(d, dtype=torch.float64)
        ddd, linear = n / d, n / (d - 1) - 0.5
        zigzag = ((n % hd) - (hd - 1) / 2) / ((hd - 1) / 2)
        zigzag = zigzag * zigzag.abs()
        www = -6 + 6 * (n / (d - 1)) ** (1 + first_to_last**0.3)
        self.mix.copy_(torch.stack([1 - ddd ** (p * fading) for p in (0.2, 0.9, 0.7, 0.7, 0.9, 0.2)]))
        self.k_a.fill_(1.02)
        self.r_k.fill_(-0.04)
        self.k_k.copy_(0.71 - linear * 0.1)
        self.w_lora[1].bias.copy_(www + 0.5 + zigzag * 2.5)
        self.a_lora[1].bias.copy_(-0.19 + zigzag * 0.3 + linear * 0.4)
        self.g_norm.weight.fill_(((layer_idx + 1) / n_layers) ** 0.7)
        for proj, gain in ((self.r_proj, 1.0), (self.k_proj, 0.1), (self.v_proj, 1.0)):
            nn.init.orthogonal_(proj.weight, gain=gain)
        self.o_proj.weight.zero_()

    def new_cache(self, batch: int, like: torch.Tensor) -> RWKV7Cache:
        acc = torch.promote_types(like.dtype, torch.float32)
        return RWKV7Cache(shift=like.new_zeros(batch, self.d_model),
                          state=like.new_zeros(batch, self.n_heads, self.head_dim, self.head_dim, dtype=acc))

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        return x.unflatten(-1, (self.n_heads, self.head_dim))

    def forward(self, h: torch.Tensor, cache: RWKV7Cache | None = None) -> torch.Tensor:
        decoding = cache is not None and cache.filled
        previous = cache.shift[:, None] if decoding else h.new_zeros(h.shape[0], 1, h.shape[-1])
        delta = torch.cat([previous, h[:, :-1]], dim=1) - h  # the token shift
        xr, xw, xk, xv, xa, xg = (h[..., None, :] + delta[..., None, :] * self.mix).unbind(-2)
        r, k, v = self.r_proj(xr), self.k_proj(xk), self.v_proj(xv)
        w = DECAY_FLOOR * torch.sigmoid(self.w_lora[1](torch.tanh(self.w_lora[0](xw))))
        a = torch.sigmoid(self.a_lora[1](self.a_lora[0](xa)))
        g = self.g_lora[1](torch.sigmoid(self.g_lora[0](xg)))
        kk = F.normalize(self._heads(k * self.k_k), dim=-1)
        k = k * (1 + (a - 1) * self.k_a)
        acc = torch.promote_types(h.dtype, torch.float32)
        r, w, k, a = (self._heads(x).to(acc) for x in (r, w, k, a))
        v, kk = self._heads(v).to(acc), kk.to(acc)
        state = cache.state if decoding else None
        kernel = rwkv7_kernel() if self.scan == "auto" and h.is_cuda and not decoding else None
        if self.training and not decoding:  # what trained (evaluation may run another form)
            self.scan_ran = scan_form(kernel, self.scan)
        if kernel is not None:
            o, last = kernel(r=r, w=w, k=k, v=v, a=-kk, b=kk * a, scale=1.0, initial_state=state,
                             output_final_state=True, safe_gate=True, lower_bound=DECAY_FLOOR, chunk_size=64)
        elif decoding or self.scan == "recurrent":
            o, last = dplr_recurrent(r, w, k, v, -kk, kk * a, state)
        else:
            o, last = dplr_chunked(r, w, k, v, -kk, kk * a, self.chunk, state)
        if cache is not None:
            cache.shift, cache.state, cache.filled = h[:, -1], last, True
        o = self.g_norm(o.flatten(-2).flatten(0, 1)).view_as(h).to(acc)
        bonus = ((r * k * self.r_k).sum(-1, keepdim=True) * v).flatten(-2)  # the current token's own value
        return self.o_proj(((o + bonus) * g).to(h.dtype))
