"""Mamba-2 and its hybrid: config, presets and learning rate (torch-free); the
layer, SSD with a scalar decay per head, is `layer.py`."""

from typing import ClassVar, Literal

from pydantic import Field, model_validator

from workloads.models.base import (INIT_HELP, MIMETIC_HELP, Init, MimeticParts, MixerConfigBase, Stack,
                                   parts_need_mimetic, register_mixer)


class Mamba2Config(MixerConfigBase):
    """Mamba-2 (layer.py): SSD with a scalar decay per head."""

    layer: ClassVar[str] = "workloads.models.mamba2.layer:Mamba2Mixer"
    cpu_cost: ClassVar[float] = 3.0  # bench/results/models_cpu_mixers.json: 0.37x the Transformer's speed
    options: ClassVar[tuple[str, ...]] = ("init", "mimetic")

    name: Literal["mamba2"] = "mamba2"
    d_state: int = Field(64, gt=0)
    d_conv: int = Field(4, gt=1)
    expand: int = Field(2, gt=0)
    headdim: int = Field(32, gt=0, description="channels per head; expand * d_model must be a multiple")
    chunk: int = Field(32, gt=0, description="tokens per chunk of our CPU form (results do not depend on it)")
    scan: Literal["auto", "chunked", "recurrent"] = "auto"
    init: Init = Field("default", description=INIT_HELP)
    mimetic: MimeticParts = Field("decay_bc_conv", description=MIMETIC_HELP)
    _mimetic_parts_need_it = model_validator(mode="after")(parts_need_mimetic)

    def _shapes(self, d_model: int):
        d_inner = self.expand * d_model
        if d_inner % self.headdim:
            raise ValueError(f"expand * d_model ({d_inner}) is not a multiple of headdim {self.headdim}")
        return d_inner, d_inner // self.headdim, d_inner + 2 * self.d_state

    def params(self, d_model: int) -> int:
        d_inner, heads, conv_dim = self._shapes(d_model)
        in_proj = d_model * (2 * d_inner + 2 * self.d_state + heads)
        return in_proj + conv_dim * (self.d_conv + 1) + 3 * heads + d_inner + d_inner * d_model

    def state_floats(self, d_model: int) -> int:
        """Every head's SSM state (d_inner x d_state in all) and the conv's last
        d_conv - 1 inputs of xBC."""
        d_inner, _, conv_dim = self._shapes(d_model)
        return d_inner * self.d_state + conv_dim * (self.d_conv - 1)

    def activation_floats(self, d_model: int) -> float:
        """For mamba-ssm's kernel: in_proj's output, the conv's output and silu's,
        the scan's x, dt, B, C and output, the gated norm's input, gate and output.
        On an H100 the whole trial's estimate was 1.17 to 1.19 times the peak
        reserved (bench/results/gpu_NVIDIA_H100_80GB_HBM3.json); our chunked form,
        which runs where mamba-ssm does not import, keeps about 1.7 times this."""
        d_inner, heads, conv_dim = self._shapes(d_model)
        return (2 * d_inner + conv_dim + heads) + 2 * conv_dim + (conv_dim + heads + d_inner) + 3 * d_inner + 1


# Mamba's widths (d_state 64), with as many layers as bring each within 5% of the
# nominal size; the hybrid is the paper's rule (one LLaMA layer on top). The RNNs' rate.
register_mixer(
    Mamba2Config, arch="mamba2", hybrid="mamba2_hybrid", lr=3e-4, order=1,
    presets={"tiny": Stack(32, 3), "0.5M": Stack(64, 15), "1M": Stack(96, 14), "2M": Stack(128, 17)},
    hybrid_presets={"tiny": Stack(32, 2, d_mlp=64, n_heads=2), "0.5M": Stack(64, 13), "1M": Stack(96, 13),
                    "2M": Stack(128, 16)},
)
