"""Mamba's selective scan: h_t = exp(dt_t A) h_{t-1} + dt_t B_t u_t,  y_t = C_t . h_t.

Three implementations with one signature (batch-first: u, dt (B, L, D); A (D, N);
Bm, C (B, L, N); returns y (B, L, D) and the last state (B, D, N)):

- `scan_reference`: the recurrence step by step in torch, under autograd. The
  yardstick for the others, and the fallback on devices without mamba-ssm.
- `scan_cpu`: a compiled CPU kernel with its own reverse-time backward. Pure-PyTorch
  scans build (B, L, D, N) tensors and a per-step autograd graph and train 30-80x
  slower than a Transformer of the same size; this one keeps the state of one
  channel in registers, recomputes it in the backward pass, and needs only
  O(threads * L * N) scratch memory.
- mamba-ssm's CUDA kernel, wrapped in `workloads.models.mamba.layer`.
"""

import numba
import numpy as np
import torch
from numba import njit, prange


def scan_reference(u, dt, A, Bm, C, h0=None):
    batch, length, d_inner = u.shape
    h = u.new_zeros(batch, d_inner, A.shape[1]) if h0 is None else h0
    ys = []
    for t in range(length):
        decay = torch.exp(dt[:, t, :, None] * A)
        h = decay * h + (dt[:, t] * u[:, t])[:, :, None] * Bm[:, t, None, :]
        ys.append((h * C[:, t, None, :]).sum(-1))
    return torch.stack(ys, dim=1), h


@njit(fastmath=True, cache=True, inline="always")
def _exp(x):
    """exp(x) for float32 x <= 0, in a form LLVM vectorises: to 2.5e-7 relative error
    on [-1, 0], growing with |x| (x log2 e is rounded to float32) to 4e-6 near -87,
    below which it stays at exp(-87).

    libm's exp is called one element at a time and was 75% of the scan's time.
    Here exp(x) = 2^k 2^f with k = round(x log2 e), |f| <= 1/2, 2^f by its Taylor
    series to degree 6 and 2^k written straight into the exponent bits. k stays a
    float32 until those bits: `math.floor` gives a 64-bit integer, whose conversions
    AVX2 has no vector instruction for, and the loops around it ran one element at a
    time (np.floor: the scan's forward 2.4x, its backward 1.5x faster,
    bench/bench_scan.py)."""
    t = max(x, np.float32(-87.0)) * np.float32(1.4426950408889634)
    k = np.floor(t + np.float32(0.5))
    f = t - k
    p = np.float32(0.00015403530393381606)
    p = p * f + np.float32(0.0013333558146428441)
    p = p * f + np.float32(0.009618129107628477)
    p = p * f + np.float32(0.055504108664821576)
    p = p * f + np.float32(0.2402265069591007)
    p = p * f + np.float32(0.6931471805599453)
    p = p * f + np.float32(1.0)
    bits = (np.int32(k) + np.int32(127)) << np.int32(23)
    return p * np.int32(bits).view(np.float32)


@njit(parallel=True, fastmath=True, cache=True)
def _forward(u, dt, A, Bm, C, y, last):
    batch, length, d_inner = u.shape
    n_state = A.shape[1]
    for b in prange(batch):
        h = np.empty(n_state, np.float32)
        for d in range(d_inner):
            h[:] = 0.0
            for t in range(length):
                dtv = dt[b, t, d]
                x = dtv * u[b, t, d]
                acc = np.float32(0.0)
                for n in range(n_state):
                    h[n] = _exp(dtv * A[d, n]) * h[n] + x * Bm[b, t, n]
                    acc += C[b, t, n] * h[n]
                y[b, t, d] = acc
            last[b, d, :] = h


@njit(parallel=True, fastmath=True, cache=True)
def _backward(u, dt, A, Bm, C, dy, du, ddt, dA_part, dB, dC):
    """Gradients of sum(dy * y). Each batch row is one thread's: dB, dC and the
    per-row dA_part are written without races, and dA is summed afterwards."""
    batch, length, d_inner = u.shape
    n_state = A.shape[1]
    for b in prange(batch):
        hs = np.empty((length + 1, n_state), np.float32)  # hs[t + 1] = h_t, hs[0] = 0
        decay = np.empty((length, n_state), np.float32)
        g = np.empty(n_state, np.float32)
        for d in range(d_inner):
            hs[0, :] = 0.0
            for t in range(length):
                dtv = dt[b, t, d]
                x = dtv * u[b, t, d]
                for n in range(n_state):
                    a = _exp(dtv * A[d, n])
                    decay[t, n] = a
                    hs[t + 1, n] = a * hs[t, n] + x * Bm[b, t, n]
            g[:] = 0.0
            for t in range(length - 1, -1, -1):
                dtv = dt[b, t, d]
                uv = u[b, t, d]
                dyv = dy[b, t, d]
                g_dt = np.float32(0.0)
                g_u = np.float32(0.0)
                for n in range(n_state):
                    gn = g[n] + C[b, t, n] * dyv  # dLoss/dh_t
                    dC[b, t, n] += dyv * hs[t + 1, n]
                    through_decay = gn * decay[t, n] * hs[t, n]
                    g_dt += through_decay * A[d, n] + gn * Bm[b, t, n] * uv
                    dA_part[b, d, n] += through_decay * dtv
                    dB[b, t, n] += gn * dtv * uv
                    g_u += gn * Bm[b, t, n]
                    g[n] = gn * decay[t, n]
                ddt[b, t, d] = g_dt
                du[b, t, d] = g_u * dtv


def _threads() -> int:
    # Follow torch's thread count, which a Ray trial sets from its CPU allocation.
    return max(1, min(torch.get_num_threads(), numba.config.NUMBA_NUM_THREADS))


def _np(t: torch.Tensor) -> np.ndarray:
    return t.detach().to(torch.float32).contiguous().numpy()


class _ScanCPU(torch.autograd.Function):
    @staticmethod
    def forward(ctx, u, dt, A, Bm, C):
        arrays = [_np(t) for t in (u, dt, A, Bm, C)]
        batch, length, d_inner = u.shape
        y = np.empty((batch, length, d_inner), np.float32)
        last = np.empty((batch, d_inner, A.shape[1]), np.float32)
        numba.set_num_threads(_threads())
        _forward(*arrays, y, last)
        ctx.save_for_backward(u, dt, A, Bm, C)
        last = torch.from_numpy(last)
        ctx.mark_non_differentiable(last)
        return torch.from_numpy(y).to(u.dtype), last

    @staticmethod
    def backward(ctx, dy, _dlast):
        u, dt, A, Bm, C = ctx.saved_tensors
        arrays = [_np(t) for t in (u, dt, A, Bm, C)]
        du = np.empty(arrays[0].shape, np.float32)
        ddt = np.empty_like(du)
        dA_part = np.zeros((u.shape[0],) + tuple(A.shape), np.float32)
        dB = np.zeros(arrays[3].shape, np.float32)
        dC = np.zeros(arrays[4].shape, np.float32)
        numba.set_num_threads(_threads())
        _backward(*arrays, _np(dy), du, ddt, dA_part, dB, dC)
        grads = (du, ddt, dA_part.sum(0), dB, dC)
        return tuple(torch.from_numpy(g).to(t.dtype) for g, t in zip(grads, (u, dt, A, Bm, C)))


def scan_cpu(u, dt, A, Bm, C):
    """The compiled CPU scan; differentiable in u, dt, A, Bm and C (not the state)."""
    return _ScanCPU.apply(u, dt, A, Bm, C)
