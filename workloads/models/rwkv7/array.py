"""RWKV-7's time mixing for a trial array (workloads/arrays.py): K members' mixers as
one module, their rows folded into the batch (K*B rows, member-major), every
parameter stacked with a leading K dimension.

Its projections and LoRAs are batched matmuls and its per-head output norm one
group norm with each member's affine on its rows. Its other parameters (the token
shift's mixes, k_k, k_a, the bonus's r_k) act before and after the scan, which has
none of its own, so the scan runs once over every member's rows: fla's `chunk_rwkv7`
on CUDA (it takes each row's decay, keys and values), our chunked form on CPU. The
forward is the lone mixer's own, run on a view of the array whose parameters are
laid out per row.
"""

import functools
from types import SimpleNamespace

import torch
from torch import nn

from workloads.models.rwkv7.layer import RWKV7Mixer
from workloads.models.stacked import StackedGroupNorm, StackedLinear, StackedMixer, per_row

PROJECTIONS, LORAS = ("r_proj", "k_proj", "v_proj", "o_proj"), ("w_lora", "a_lora", "g_lora")
PER_ROW = ("mix", "k_k", "k_a", "r_k")  # parameters laid out per row in the view


class StackedRWKV7Mixer(StackedMixer):
    """K RWKV7Mixers of one config as one (their parameters stacked, names as a lone mixer's)."""

    def __init__(self, members: list[RWKV7Mixer]):
        super().__init__(members, PER_ROW)
        for name in PROJECTIONS:
            setattr(self, name, StackedLinear([getattr(m, name) for m in members]))
        for name in LORAS:  # down, up
            setattr(self, name, nn.ModuleList(StackedLinear([getattr(m, name)[i] for m in members]) for i in range(2)))
        self.g_norm = StackedGroupNorm([m.g_norm for m in members])

    def forward(self, h: torch.Tensor, cache=None) -> torch.Tensor:
        rows = self.rows(h, cache)
        view = SimpleNamespace(**self.settings, training=self.training, g_norm=self.g_norm,
                               **{name: getattr(self, name) for name in PROJECTIONS + LORAS},
                               **{name: per_row(getattr(self, name), rows) for name in PER_ROW})
        view._heads = functools.partial(RWKV7Mixer._heads, view)
        out = RWKV7Mixer.forward(view, h)
        if self.training:  # what trained
            self.scan_ran = view.scan_ran
        return out
