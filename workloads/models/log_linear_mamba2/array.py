"""Log-linear Mamba-2's mixer for a trial array (workloads/arrays.py): K members'
mixers as one module, their rows folded into the batch (K*B rows, member-major),
every parameter stacked with a leading K dimension.

The projections are batched matmuls and the short convolution one grouped
convolution over the members' channels side by side. A, the dt bias, D, the
levels' L and the norm's weight act per head before and after the scan, which has
no parameter of its own: it runs once for every member's rows, fla's kernel on CUDA
and our quadratic (or recurrent) form on CPU. The rest is the lone mixer's own code,
run on a view of the array (`view_of`) whose per-head parameters are laid out per row.
"""

import torch
from torch import nn

from workloads.models.log_linear_mamba2.layer import LogLinearMamba2Mixer
from workloads.models.recurrent_parts import scan_form
from workloads.models.stacked import StackedLinear, StackedMixer, StackedShortConv, per_row, view_of

PER_HEAD = ("dt_bias", "A_log", "D", "L", "norm_weight")


class StackedLogLinearMamba2Mixer(StackedMixer):
    """K LogLinearMamba2Mixers of one config as one (their parameters stacked, names as a lone mixer's)."""

    def __init__(self, members: list[nn.Module]):
        super().__init__(members, PER_HEAD)
        self.in_proj = StackedLinear([m.in_proj for m in members])
        self.conv1d = StackedShortConv([m.conv1d for m in members])
        self.out_proj = StackedLinear([m.out_proj for m in members])

    def forward(self, h: torch.Tensor, cache=None) -> torch.Tensor:
        rows = self.rows(h, cache)
        view = view_of(LogLinearMamba2Mixer, **self.settings, in_proj=self.in_proj, out_proj=self.out_proj,
                       **{name: per_row(getattr(self, name), rows) for name in PER_HEAD})
        z, xBC, dt, dl = view._project(h)
        inputs = view._scan_inputs(self.conv1d(xBC), dt, dl)
        kernel = view._kernel(h.is_cuda)
        if self.training:  # what trained
            self.scan_ran = scan_form(kernel, view.scan, trains="quadratic")
        return view._gate_norm_out(view._scan(*inputs, kernel=kernel), z)
