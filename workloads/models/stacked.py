"""Layers of K models of one config as one, for trial arrays (workloads/arrays.py):
each parameter stacked with a leading K dimension, the members' rows folded into
the batch (K*B rows, member k's at k*B .. (k+1)*B - 1). Member k of a stacked part
is each parameter's slice k, under the lone layer's name."""

import torch
import torch.nn.functional as F
from torch import nn


def stack(tensors) -> nn.Parameter:
    return nn.Parameter(torch.stack([t.detach() for t in tensors]))


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
