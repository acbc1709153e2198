"""The delta-rule mixers (Gated DeltaNet, Gated DeltaProduct) for a trial array
(workloads/arrays.py): K members' mixers as one module, their rows folded into the
batch (K*B rows, member-major), every parameter stacked with a leading K dimension.

The projections are batched matmuls and the short convolution one grouped
convolution over the members' channels side by side. The per-head parameters (the
decay's A_log and dt_bias, the output norm's weight) act before and after the scan,
which has none of its own: it runs once for every member's rows, fla's kernel on
CUDA (it takes each row's gates) and our chunked form on CPU. The rest is the lone
mixer's own code (`_project`, `_inputs`, `_scan`, `_norm_gate_out`), run on a view
of the array whose per-head parameters are laid out per row.
"""

from types import SimpleNamespace

import torch
from torch import nn

from workloads.models.gated_deltanet.layer import pick_kernel
from workloads.models.recurrent_parts import scan_form
from workloads.models.stacked import StackedLinear, StackedMixer, StackedShortConv, per_row

PER_HEAD = ("A_log", "dt_bias", "norm_weight")


class StackedDeltaRuleMixer(StackedMixer):
    """K GatedDeltaNetMixers, or K GatedDeltaProductMixers, of one config as one
    (their parameters stacked, names as a lone mixer's)."""

    def __init__(self, members: list[nn.Module]):
        super().__init__(members, PER_HEAD)
        self.lone = type(members[0])
        self.in_proj = StackedLinear([m.in_proj for m in members])
        self.conv1d = StackedShortConv([m.conv1d for m in members])
        self.o_proj = StackedLinear([m.o_proj for m in members])

    def forward(self, h: torch.Tensor, cache=None) -> torch.Tensor:
        rows = self.rows(h, cache)
        view = SimpleNamespace(**self.settings, in_proj=self.in_proj, o_proj=self.o_proj,
                               A_log=per_row(self.A_log, rows), dt_bias=per_row(self.dt_bias, rows),
                               norm_weight=per_row(self.norm_weight, rows)[:, :, None])  # per head: (rows, 1, 1, dv)
        qkv, gate, a, b = self.lone._project(view, h)
        inputs = self.lone._inputs(view, self.conv1d(qkv), a, b)
        kernel = pick_kernel(view.scan, h.is_cuda, torch.is_grad_enabled())
        if self.training:  # what trained
            self.scan_ran = scan_form(kernel, view.scan)
        o, _ = self.lone._scan(view, *inputs, kernel=kernel)
        return self.lone._norm_gate_out(view, o, gate)
