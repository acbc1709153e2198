"""The delta-rule mixers (Gated DeltaNet, Gated DeltaProduct, Kimi Delta Attention,
Gated DeltaNet-2) for a trial array (workloads/arrays.py): K members' mixers as one
module, their rows folded into the batch (K*B rows, member-major), every parameter
stacked with a leading K dimension.

The projections are batched matmuls and the short convolution one grouped
convolution over the members' channels side by side. The per-head parameters (the
decay's A_log and dt_bias, the output norm's weight) act before and after the scan,
which has none of its own: it runs once for every member's rows, fla's kernel on
CUDA (it takes each row's gates) and our chunked form on CPU. The rest is the lone
mixer's own code (`_project`, `_inputs`, `_kernel`, `_scan`, `_norm_gate_out`), run
on a view of the array (`view_of`) whose per-head parameters are laid out per row.
"""

import torch
from torch import nn

from workloads.models.recurrent_parts import scan_form
from workloads.models.stacked import StackedLinear, StackedMixer, StackedShortConv, per_row, view_of

# A lone mixer's Linear layers and per-head parameters, where its class names none.
LINEARS = ("in_proj", "o_proj")
PER_HEAD = ("A_log", "dt_bias", "norm_weight")


class StackedDeltaRuleMixer(StackedMixer):
    """K delta-rule mixers of one config as one (their parameters stacked, names as
    a lone mixer's)."""

    def __init__(self, members: list[nn.Module]):
        lone = type(members[0])
        super().__init__(members, getattr(lone, "PER_HEAD", PER_HEAD))
        self.lone, self.linears = lone, getattr(lone, "LINEARS", LINEARS)
        for name in self.linears:
            setattr(self, name, StackedLinear([getattr(m, name) for m in members]))
        self.conv1d = StackedShortConv([m.conv1d for m in members])

    def forward(self, h: torch.Tensor, cache=None) -> torch.Tensor:
        rows = self.rows(h, cache)
        view = view_of(self.lone, **self.settings, **{name: getattr(self, name) for name in self.linears},
                       A_log=per_row(self.A_log, rows), dt_bias=per_row(self.dt_bias, rows),
                       norm_weight=per_row(self.norm_weight, rows)[:, :, None])  # per head: (rows, 1, 1, dv)
        qkv, gate, *gates = view._project(h)
        inputs = view._inputs(self.conv1d(qkv), *gates)
        kernel = view._kernel(h.is_cuda)
        if self.training:  # what trained
            self.scan_ran = scan_form(kernel, view.scan)
        o, _ = view._scan(*inputs, kernel=kernel)
        return view._norm_gate_out(o, gate)
