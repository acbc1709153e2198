"""Mamba-2's mixer for a trial array (workloads/arrays.py): K members' mixers as one
module, their rows folded into the batch (K*B rows, member-major), every parameter
stacked with a leading K dimension.

The projections are batched matmuls and the short convolution one grouped
convolution over the members' channels side by side (as Mamba's). The scan:
- CUDA: one call of mamba-ssm's `mamba_chunk_scan_combined` for all members, their
  heads side by side: x (B, L, K*heads, headdim), dt (B, L, K*heads), A, D and the
  dt bias (K*heads); B and C per member through the kernel's groups, (B, L, K, N):
  head j reads group j // heads, its member's.
- CPU: our chunked (or recurrent) form once over every member's rows, A, D and the
  dt bias laid out per row.
The gate and norm are the lone mixer's own code, run on a view of the array whose
norm weight is laid out per row.
"""

from types import SimpleNamespace

import torch
import torch.nn.functional as F

from workloads.models.mamba2.layer import KERNEL_CHUNK, Mamba2Mixer, mamba2_kernel, ssd_chunked, ssd_recurrent
from workloads.models.recurrent_parts import scan_form
from workloads.models.stacked import StackedLinear, StackedMixer, StackedShortConv, per_row


class StackedMamba2Mixer(StackedMixer):
    """K Mamba2Mixers of one config as one (their parameters stacked, names as a lone mixer's)."""

    def __init__(self, members: list[Mamba2Mixer]):
        super().__init__(members, ("dt_bias", "A_log", "D", "norm_weight"))
        self.in_proj = StackedLinear([m.in_proj for m in members])
        self.conv1d = StackedShortConv([m.conv1d for m in members])
        self.out_proj = StackedLinear([m.out_proj for m in members])

    def forward(self, h: torch.Tensor, cache=None) -> torch.Tensor:
        rows = self.rows(h, cache)
        view = SimpleNamespace(**self.settings, out_proj=self.out_proj, norm_weight=per_row(self.norm_weight, rows))
        d_inner, conv_dim, heads, scan = view.d_inner, view.conv_dim, view.heads, view.scan
        z, xBC, dt = self.in_proj(h).split([d_inner, conv_dim, heads], dim=-1)
        x, B, C = Mamba2Mixer._split(view, self.conv1d(xBC))
        kernel = mamba2_kernel() if scan == "auto" and h.is_cuda else None
        if self.training:  # what trained
            self.scan_ran = scan_form(kernel, scan, library="mamba-ssm")
        if kernel is not None:
            y = self._scan_cuda(kernel, x, dt, B, C)
        else:
            acc = torch.promote_types(x.dtype, torch.float32)
            A = -torch.exp(self.A_log.to(acc)).repeat_interleave(rows, dim=0)  # (K*rows, heads)
            dt = F.softplus(dt + per_row(self.dt_bias, rows)).to(acc)
            if scan == "recurrent":
                y, _ = ssd_recurrent(x.to(acc), dt, A, B.to(acc), C.to(acc))
            else:
                y, _ = ssd_chunked(x.to(acc), dt, A[:, None], B.to(acc), C.to(acc), view.chunk)
            y = y.to(x.dtype) + x * per_row(self.D, rows)[..., None]
        return Mamba2Mixer._gate_norm_out(view, y, z)

    def _scan_cuda(self, kernel, x, dt, B, C):
        """One kernel call for every member: heads side by side, B and C by group."""
        k, rows = self.k, x.shape[0] // self.k

        def members_side_by_side(t):  # (K*rows, L, ...) -> (rows, L, K, ...)
            return t.unflatten(0, (k, rows)).movedim(0, 2)

        y, _ = kernel(members_side_by_side(x).flatten(2, 3), members_side_by_side(dt).flatten(2, 3),
                      -torch.exp(self.A_log.float()).reshape(-1), members_side_by_side(B), members_side_by_side(C),
                      KERNEL_CHUNK, D=self.D.reshape(-1), dt_bias=self.dt_bias.reshape(-1), dt_softplus=True,
                      return_final_states=True)
        return y.unflatten(2, (k, -1)).movedim(2, 0).flatten(0, 1)  # (K*rows, L, heads, headdim)
