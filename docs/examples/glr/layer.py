"""The gated linear recurrence's torch layer (its config: __init__.py beside it).

The contract with the model stack (workloads/models/lm.py):
- `__init__(d_model, n_layers, norm_eps, **fields)`: the config's fields other than
  `name` as keywords; `n_layers`, the model's recurrent layers, for an init that
  scales with depth; a layer whose init depends on its place declares `layer_idx`.
- `forward(x, cache=None)`: x of (batch, tokens, d_model) to the same shape,
  causal (an output never depends on a later input). With a cache, x is the
  next tokens of the sequences the cache holds (a prompt, then one token at a
  time): the layer starts from the cache's state and leaves its state after x
  there, so that decoding with a cache equals the full forward.
- `new_cache(batch, like)`: an empty state for `batch` sequences, on `like`'s
  device and dtype; its tensors hold the config's `state_floats` per sequence.
- optionally `check_device(config, device)`, raising where the layer cannot run
  well (Mamba on CUDA without its kernel).
"""

from dataclasses import dataclass

import torch
from torch import nn


@dataclass
class GLRCache:
    h: torch.Tensor  # (batch, width): the state after the tokens seen so far


class GLRMixer(nn.Module):
    def __init__(self, d_model: int, n_layers: int, norm_eps: float, width: int):
        super().__init__()
        self.inp, self.out = nn.Linear(d_model, width), nn.Linear(width, d_model)
        self.decay = nn.Parameter(torch.zeros(width))

    def new_cache(self, batch: int, like: torch.Tensor) -> GLRCache:
        return GLRCache(like.new_zeros(batch, self.decay.numel()))

    def forward(self, x: torch.Tensor, cache: GLRCache | None = None) -> torch.Tensor:
        u, a = self.inp(x), torch.sigmoid(self.decay)
        h = cache.h if cache is not None else u.new_zeros(u.shape[0], u.shape[-1])
        states = []
        for t in range(u.shape[1]):  # step by step: a real mixer scans in chunks or with a kernel
            h = a * h + u[:, t]
            states.append(h)
        if cache is not None:
            cache.h = h
        return self.out(torch.stack(states, 1))
