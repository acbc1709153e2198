"""Layers of K models of one config as one, for trial arrays (workloads/arrays.py):
each parameter stacked with a leading K dimension, the members' rows folded into
the batch (K*B rows, member k's at k*B .. (k+1)*B - 1). Member k of a stacked part
is each parameter's slice k, under the lone layer's name."""

import torch
import torch.nn.functional as F
from torch import nn


def stack(tensors) -> nn.Parameter:
    return nn.Parameter(torch.stack([t.detach() for t in tensors]))


def settings_of(module: nn.Module) -> dict:
    """A lone module's settings (widths, heads, chunk, scan): its plain attributes,
    for a view on which its own methods run over an array's rows."""
    return {k: v for k, v in vars(module).items() if not k.startswith("_") and k not in ("training", "scan_ran")}


def view_of(lone: type, **attrs):
    """An object of the lone mixer's class `lone` holding `attrs` (its settings, the
    array's stacked parts in its parameters' and layers' places) and nothing else:
    the lone mixer's methods run on it over an array's rows. Never a module: nn.Module's
    set-up is skipped, so it holds no parameters of its own and is never trained."""
    view = object.__new__(lone)
    view.__dict__.update(attrs)
    return view


def per_row(p: torch.Tensor, rows: int) -> torch.Tensor:
    """A stacked parameter (K, *shape) as (K*rows, 1, *shape): each of the array's
    rows its member's, broadcast over the tokens (where a lone mixer's parameter
    broadcasts over batch and tokens)."""
    return p.repeat_interleave(rows, dim=0)[:, None]


class StackedLinear(nn.Module):
    """K Linear layers as one batched matmul: weight (K, out, in), bias (K, out)."""

    def __init__(self, members: list[nn.Linear]):
        super().__init__()
        self.weight = stack(m.weight for m in members)
        self.bias = None if members[0].bias is None else stack(m.bias for m in members)

    def forward(self, x: torch.Tensor, with_bias: bool = True) -> torch.Tensor:
        members, out, width = self.weight.shape
        y = torch.bmm(x.reshape(members, -1, width), self.weight.transpose(1, 2))
        if with_bias and self.bias is not None:
            y = y + self.bias[:, None, :]
        return y.reshape(*x.shape[:-1], out)


class StackedRMSNorm(nn.Module):
    """K RMSNorms: one normalisation, then each member's weight on its rows."""

    def __init__(self, members: list[nn.RMSNorm]):
        super().__init__()
        self.shape, self.eps = members[0].normalized_shape, members[0].eps
        self.weight = stack(m.weight for m in members)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        normed = F.rms_norm(x, self.shape, None, self.eps).reshape(self.weight.shape[0], -1, *self.shape)
        return (normed * self.weight[:, None]).reshape(x.shape)


class StackedShortConv(nn.Module):
    """silu(causal depthwise conv) of K members (workloads.models.recurrent_parts.short_conv),
    as one grouped convolution over their channels side by side."""

    def __init__(self, members: list[nn.Conv1d]):
        super().__init__()
        self.weight = stack(m.weight for m in members)  # (K, C, 1, width)
        self.bias = None if members[0].bias is None else stack(m.bias for m in members)  # (K, C)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        k, channels, _, width = self.weight.shape
        rows, length = x.shape[0] // k, x.shape[1]
        side_by_side = x.reshape(k, rows, length, channels).permute(1, 0, 3, 2).reshape(rows, k * channels, length)
        padded = F.pad(side_by_side, (width - 1, 0))
        bias = None if self.bias is None else self.bias.reshape(-1)
        out = F.conv1d(padded, self.weight.reshape(k * channels, 1, width), bias, groups=k * channels)
        out = out.reshape(rows, k, channels, length).permute(1, 0, 3, 2).reshape(k * rows, length, channels)
        return F.silu(out.contiguous())


class StackedGroupNorm(nn.Module):
    """K GroupNorms of rows (N, C): one normalisation, then each member's affine on its rows."""

    def __init__(self, members: list[nn.GroupNorm]):
        super().__init__()
        self.groups, self.eps = members[0].num_groups, members[0].eps
        self.weight = stack(m.weight for m in members)
        self.bias = stack(m.bias for m in members)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        normed = F.group_norm(x, self.groups, None, None, self.eps).reshape(self.weight.shape[0], -1, x.shape[-1])
        return (normed * self.weight[:, None] + self.bias[:, None]).reshape(x.shape)


class StackedMixer(nn.Module):
    """The fused form of K recurrent mixers of one config: `settings`, the lone
    mixer's (for a view on which its own methods run), and the parameters named in
    `per_member` stacked under the lone mixer's names; its subclass stacks the rest.
    Training only: an array's members decode as lone models (TrialArray.member_model)."""

    def __init__(self, members: list[nn.Module], per_member: tuple[str, ...]):
        super().__init__()
        self.k, self.settings = len(members), settings_of(members[0])
        for name in per_member:
            setattr(self, name, stack(getattr(m, name) for m in members))

    def rows(self, h: torch.Tensor, cache=None) -> int:
        """Each member's rows in `h` (K*rows, length, d_model)."""
        if cache is not None:
            raise ValueError("an array trains; its members decode as lone models (TrialArray.member_model)")
        return h.shape[0] // self.k
