"""Mamba's mixer for a trial array (workloads/arrays.py): K members' MambaMixers as
one module, their rows folded into the batch (K*B rows, member-major), every
parameter stacked with a leading K dimension.

The projections are batched matmuls and the depthwise convolution one grouped
convolution over the members' channels side by side (K*d_inner groups). The scan:
- CUDA: one call of mamba-ssm's selective_scan_fn for all members. The kernel runs
  one block per (sequence, channel) (selective_scan_fwd_kernel.cuh), so the members'
  channels sit side by side, u, delta and z as (B, K*d_inner, L), A (K*d_inner, N),
  D and the delta bias (K*d_inner); B and C go per member through the kernel's group
  dimension, (B, K, N, L): channel c reads group c // d_inner, its member's.
- CPU: our compiled scan, once per member (its A differs; the scan takes one A for
  every row).
"""

import torch
import torch.nn.functional as F

from workloads.models.mamba.layer import MambaMixer, mamba_ssm_scan
from workloads.models.mamba.selective_scan import scan_cpu, scan_reference
from workloads.models.stacked import StackedLinear, StackedMixer, StackedShortConv, per_row


class StackedMambaMixer(StackedMixer):
    """K MambaMixers of one config as one (their parameters stacked, names as a lone mixer's)."""

    def __init__(self, members: list[MambaMixer]):
        super().__init__(members, ("A_log", "D"))  # (K, d_inner, N), (K, d_inner)
        first = members[0]
        self.d_inner, self.d_state, self.dt_rank, self.scan_impl = first.d_inner, first.d_state, first.dt_rank, first.scan_impl
        for name in ("in_proj", "x_proj", "dt_proj", "out_proj"):
            setattr(self, name, StackedLinear([getattr(m, name) for m in members]))
        self.conv1d = StackedShortConv([m.conv1d for m in members])

    _impl = MambaMixer._impl

    def forward(self, h: torch.Tensor, cache=None) -> torch.Tensor:
        k, rows = self.k, self.rows(h, cache)
        x, z = self.in_proj(h).chunk(2, dim=-1)
        x = self.conv1d(x)
        dt, Bm, C = self.x_proj(x).split([self.dt_rank, self.d_state, self.d_state], dim=-1)
        A = -torch.exp(self.A_log.float())
        impl = self._impl(x)
        if self.training:
            self.scan_ran = {"cuda": "mamba-ssm"}.get(impl, impl)
        if impl == "cuda":
            return self.out_proj(self._scan_cuda(x, dt, A, Bm, C, z))
        dt = F.softplus(self.dt_proj(dt))
        scan = scan_cpu if impl == "cpu" else scan_reference
        y = torch.cat([scan(*(t.float() for t in parts[:2]), A[i], *(t.float() for t in parts[2:]))[0]
                       for i, parts in enumerate(zip(x.chunk(k), dt.chunk(k), Bm.chunk(k), C.chunk(k)))])
        D = per_row(self.D, rows)  # each row its member's
        return self.out_proj((y.to(x.dtype) + x * D) * F.silu(z))

    def _scan_cuda(self, x, dt, A, Bm, C, z):
        """One selective-scan call for every member: channels side by side, B and C by group."""
        k, length = self.A_log.shape[0], x.shape[1]
        rows = x.shape[0] // k

        def channels(t):  # (K*B, L, c) -> (B, K*c, L)
            return t.reshape(k, rows, length, -1).permute(1, 0, 3, 2).reshape(rows, -1, length).contiguous()

        def groups(t):  # (K*B, L, N) -> (B, K, N, L)
            return t.reshape(k, rows, length, -1).permute(1, 0, 3, 2).contiguous()

        dt = self.dt_proj(dt, with_bias=False)  # the bias is applied in the kernel
        y, _ = mamba_ssm_scan()(
            channels(x), channels(dt), A.reshape(-1, self.d_state), groups(Bm), groups(C),
            D=self.D.reshape(-1).float(), z=channels(z), delta_bias=self.dt_proj.bias.reshape(-1).float(),
            delta_softplus=True, return_last_state=True,
        )
        return y.reshape(rows, k, self.d_inner, length).permute(1, 0, 3, 2).reshape(k * rows, length, self.d_inner)
