"""Initialisation shared by the recurrent mixers (Mamba, Mamba-2, Gated DeltaNet)."""

import math

import torch


def dt_bias_init(n: int, dt_min: float = 1e-3, dt_max: float = 0.1, floor: float = 1e-4) -> torch.Tensor:
    """Mamba's time-step bias: dt drawn log-uniform in [dt_min, dt_max] (at least
    `floor`), stored through the inverse of softplus, so softplus(bias) = dt."""
    dt = torch.exp(torch.rand(n) * (math.log(dt_max) - math.log(dt_min)) + math.log(dt_min)).clamp(min=floor)
    return dt + torch.log(-torch.expm1(-dt))
