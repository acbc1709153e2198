"""The delta rule with a decay per key channel, as Kimi Delta Attention (kda/) and
Gated DeltaNet-2 (gated_deltanet2/) run it: one recurrence, two forms.

Per head, with the state H (key channels x value channels), a log-decay g_t per
key channel, a write key k_t, an erase key r_t and a write value v_t:

    D_t = diag(exp(g_t))
    u_t = v_t - r_t^T D_t H_{t-1}        (what is written, less what r_t erases)
    H_t = D_t H_{t-1} + k_t u_t^T
    o_t = H_t^T q_t

Kimi Delta Attention is r = beta k and v = beta v (beta a scalar per head and
token: the gated delta rule with a decay per channel); Gated DeltaNet-2 is r = b * k
and v = w * v (an erase gate per key channel, a write gate per value channel).
flash-linear-attention's references (fla/ops/kda/naive.py, fla/ops/gdn2/naive.py)
write each that way; the tests compare both forms here with them.
"""

import math

import torch
import torch.nn.functional as F


def channel_delta_recurrent(q, k, v, g, r, state=None):
    """The recurrence, a token at a time: the reference. q, k, g and r (batch,
    length, heads, dk), q and k normalised, q scaled; v (batch, length, heads, dv);
    state (batch, heads, dk, dv) or None for zeros. Returns o like v and the last state."""
    b, length, h, dk = k.shape
    if state is None:
        state = v.new_zeros(b, h, dk, v.shape[-1])
    outs = []
    for t in range(length):
        state = torch.exp(g[:, t])[..., None] * state
        u = v[:, t] - torch.einsum("bhkv,bhk->bhv", state, r[:, t])
        state = state + k[:, t, :, :, None] * u[:, :, None, :]
        outs.append(torch.einsum("bhkv,bhk->bhv", state, q[:, t]))
    return torch.stack(outs, dim=1), state


def channel_delta_chunked(q, k, v, g, r, chunk: int = 16, state=None):
    """The same recurrence in chunks (arguments as channel_delta_recurrent).

    Inside a chunk entered with state S, let l_t be the running sum of g (per
    channel) and G_ts = exp(l_t - l_s). Unrolling, the state before token t writes
    is diag(exp(l_t)) S + sum_{s < t} diag(G_ts) k_s u_s^T, so the u_t satisfy
    (I + L) U = V - (R * exp(l)) S with L_ts = sum_d r_td k_sd G_tsd for s < t: one
    unit lower-triangular solve per chunk gives U = T V - T (R * exp(l)) S. Then
    o_t = (q_t * exp(l_t))^T S + sum_{s <= t} (sum_d q_td k_sd G_tsd) u_s, and the
    state leaving the chunk is diag(exp(l_end)) S + sum_s diag(exp(l_end - l_s)) k_s u_s^T.
    G is kept per channel (chunk x chunk x dk per head): a decay may differ by
    channel, so no single factor leaves the chunk's products. A length that is not a
    multiple of `chunk` is padded with g = 0 and k = r = v = 0, which leave the
    state unchanged."""
    b, length, h, dk = k.shape
    dv = v.shape[-1]
    pad = -length % chunk
    if pad:
        q, k, v, g, r = (F.pad(x, (0, 0, 0, 0, 0, pad)) for x in (q, k, v, g, r))
    n_chunks = k.shape[1] // chunk
    # (batch, heads, chunks, chunk, channels): one head's chunk is a small matrix problem
    q, k, v, g, r = (x.view(b, n_chunks, chunk, h, -1).permute(0, 3, 1, 2, 4) for x in (q, k, v, g, r))
    log_c = torch.cumsum(g, dim=-2)  # (b, h, n, t, dk), non-increasing in t
    gaps = log_c[..., :, None, :] - log_c[..., None, :, :]  # (b, h, n, t, s, dk): log G_ts; positive for s > t
    upto = torch.ones(chunk, chunk, dtype=torch.bool, device=k.device).tril()
    decay = torch.exp(gaps.masked_fill(~upto[..., None], -math.inf))  # masked before exp: no overflow
    strict = torch.einsum("...td,...sd,...tsd->...ts", r, k, decay).tril(-1)
    system = torch.eye(chunk, dtype=k.dtype, device=k.device) + strict
    rhs = torch.cat([v, torch.exp(log_c) * r], dim=-1)  # T V and T (R * exp(l)) in one solve
    T_v, T_r = torch.linalg.solve_triangular(system, rhs, upper=False, unitriangular=True).split([dv, dk], dim=-1)
    scores = torch.einsum("...td,...sd,...tsd->...ts", q, k, decay)  # zero above the diagonal (decay is)
    reads = torch.exp(log_c) * q
    writes = (k * torch.exp(log_c[..., -1:, :] - log_c)).transpose(-1, -2)  # (dk, t) per chunk
    if state is None:
        state = v.new_zeros(b, h, dk, dv)
    outs = []
    for T_v_n, T_r_n, reads_n, scores_n, writes_n, end_n in zip(
            *(x.unbind(2) for x in (T_v, T_r, reads, scores, writes, torch.exp(log_c[..., -1, :]))), strict=True):
        u = T_v_n - T_r_n @ state
        outs.append(reads_n @ state + scores_n @ u)
        state = end_n[..., None] * state + writes_n @ u
    o = torch.stack(outs, dim=2)  # (b, h, n, t, dv)
    return o.permute(0, 2, 3, 1, 4).reshape(b, n_chunks * chunk, h, dv)[:, :length], state
