"""torch's AdamW for eager training, without torch.compile's guards.

`torch.optim.Optimizer` wraps its step, `zero_grad`, `add_param_group` and its state
dicts in guards that keep torch.compile out of them, and each guard imports
`torch._dynamo` on its first call: about 1.3 core-seconds at the start of every
trial's process, for a compiler a trial never runs (bench/results/adam_import_cpu.json).
`AdamW` is torch's class with those methods unwrapped: the same code, so the same
arithmetic (bit for bit, fused on CUDA too) and the same state dicts, which a
checkpoint of either class loads into the other (tests/workloads/test_adam.py).
"""

from __future__ import annotations

import inspect

import torch

_Optimizer = torch.optim.Optimizer


class AdamW(torch.optim.AdamW):
    """torch.optim.AdamW with its methods as they run in eager mode (see the module's note)."""

    add_param_group = inspect.unwrap(_Optimizer.add_param_group)
    zero_grad = inspect.unwrap(_Optimizer.zero_grad)
    state_dict = inspect.unwrap(_Optimizer.state_dict)
    load_state_dict = inspect.unwrap(_Optimizer.load_state_dict)
    _eager_step = inspect.unwrap(torch.optim.Adam.step)

    def step(self, closure=None):
        # torch's guard runs the step under grad mode `differentiable` (False unless asked).
        with torch.set_grad_enabled(self.defaults["differentiable"]):
            return self._eager_step(closure)
