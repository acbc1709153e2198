"""Mamba-3 layer (Lahoti, Li, Chen, Wang, Bick, Kolter, Dao and Gu, "Mamba-3:
Improved Sequence Modeling using State Space Principles", 2026): mamba-ssm's own
`Mamba3` module, SISO, as the mixer of a pre-norm residual layer.

mamba-ssm implements it only as Triton (and CuTe) kernels, imported at its module's
import, and flash-linear-attention's `Mamba3` layer wraps the same kernels: there is
no PyTorch path, so the mixer runs only on CUDA (`check_device` refuses any other
device, naming what to use there). Cached decoding runs mamba-ssm's own step where
its step kernel imports, else the whole prefix again at every token.
"""

import math
from dataclasses import dataclass
from typing import Any, Optional

import torch
from torch import nn

from workloads.models.recurrent_parts import optional_kernel


def _mamba3():
    return optional_kernel("mamba_ssm.modules.mamba3", "Mamba3")


def mamba3_refusal(config, device) -> Optional[str]:
    """Why a Mamba-3 layer cannot run on `device`, or None where it can."""
    if torch.device(device).type != "cuda":
        return f"{config.name} runs only on CUDA: {config.cpu_refusal}"
    module, error = _mamba3()
    if module is None:
        return (f"{config.name} needs mamba-ssm's Mamba-3 kernels (mamba-ssm 2.3.2 or later), which do not import "
                f"here ({error}); install them on this host with `ICR_EXTRAS=dev,cuda scripts/setup-env`")
    return None


@dataclass
class Mamba3Cache:
    params: Any = None  # mamba-ssm's InferenceParams, holding this layer's states; None: no step kernel here
    seen: Optional[torch.Tensor] = None  # without a step kernel: the inputs so far
    filled: bool = False


class Mamba3Mixer(nn.Module):
    """Arguments as Mamba3Config's fields; n_layers, the model's recurrent layers,
    scales out_proj at init (the other mixers' rule); norm_eps is taken like every
    mixer's (mamba-ssm's B and C norms keep their own)."""

    @staticmethod
    def check_device(config, device) -> None:
        """What Mamba3Config.check_device asks before a trial runs."""
        refusal = mamba3_refusal(config, device)
        if refusal:
            raise RuntimeError(refusal)

    def __init__(self, d_model: int, d_state: int = 64, expand: int = 2, headdim: int = 32,
                 rope_fraction: float = 0.5, n_layers: int = 1, norm_eps: float = 1e-5, layer_idx: int = 0):
        super().__init__()
        Mamba3, error = _mamba3()
        if Mamba3 is None:
            raise RuntimeError(f"mamba3 needs mamba-ssm's Mamba-3 kernels, which do not import here ({error})")
        self.layer_idx = layer_idx
        self.inner = Mamba3(d_model, d_state=d_state, expand=expand, headdim=headdim, rope_fraction=rope_fraction,
                            layer_idx=layer_idx)
        with torch.no_grad():
            self.inner.out_proj.weight /= math.sqrt(n_layers)

    def new_cache(self, batch: int, like: torch.Tensor) -> Mamba3Cache:
        module = __import__("mamba_ssm.modules.mamba3", fromlist=["mamba3_step_fn"])
        if getattr(module, "mamba3_step_fn", None) is None:
            return Mamba3Cache()
        from mamba_ssm.utils.generation import InferenceParams

        params = InferenceParams(max_seqlen=1 << 20, max_batch_size=batch)
        params.key_value_memory_dict[self.layer_idx] = self.inner.allocate_inference_cache(batch, 0, device=like.device)
        return Mamba3Cache(params=params)

    def forward(self, h: torch.Tensor, cache: Mamba3Cache | None = None) -> torch.Tensor:
        if cache is None:
            return self.inner(h)
        cache.filled = True
        if cache.params is None:  # no step kernel: the prefix again
            cache.seen = h if cache.seen is None else torch.cat([cache.seen, h], dim=1)
            return self.inner(cache.seen)[:, -h.shape[1]:]
        out = self.inner(h, inference_params=cache.params)
        cache.params.seqlen_offset += h.shape[1]
        return out
