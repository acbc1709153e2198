"""Mamba (v1), the paper's RNN, and the paper's hybrid: its config, presets and
learning rate (torch-free); the layer is `layer.py`, mamba-ssm's `Mamba` parameter
for parameter, and its CPU scan `selective_scan.py`."""

from typing import ClassVar, Literal

from pydantic import Field, model_validator

from workloads.models.base import (INIT_HELP, MIMETIC_HELP, Init, MimeticParts, MixerConfigBase, Stack,
                                   parts_need_mimetic, register_mixer)

# mamba-ssm's selective scan keeps its (2 x d_state) running state once per
# chunk of this many tokens for the backward pass (selective_scan_fwd_kernel).
SCAN_CHUNK = 2048


class MambaConfig(MixerConfigBase):
    """Mamba (v1): mamba-ssm's `Mamba` (layer.py)."""

    layer: ClassVar[str] = "workloads.models.mamba.layer:MambaMixer"
    cpu_cost: ClassVar[float] = 3.0  # the compiled CPU scan's measured premium
    options: ClassVar[tuple[str, ...]] = ("init", "mimetic")

    name: Literal["mamba"] = "mamba"
    d_state: int = Field(16, gt=0)
    d_conv: int = Field(4, gt=1)
    expand: int = Field(2, gt=0)
    scan: Literal["auto", "cuda", "cpu", "reference"] = Field(
        "auto",
        description="the selective scan: auto = mamba-ssm's kernel on CUDA (required there), our compiled "
        "kernel on CPU; reference = the step-by-step scan, on any device (slow: tests and debugging)",
    )
    init: Init = Field("default", description=INIT_HELP)
    mimetic: MimeticParts = Field("decay_bc_conv", description=MIMETIC_HELP)
    _mimetic_parts_need_it = model_validator(mode="after")(parts_need_mimetic)

    def params(self, d_model: int) -> int:
        d, d_inner, n_state, dt_rank = d_model, self.expand * d_model, self.d_state, -(-d_model // 16)
        return (2 * d * d_inner + d_inner * (self.d_conv + 1) + d_inner * (dt_rank + 2 * n_state)
                + (dt_rank + 1) * d_inner + d_inner * n_state + d_inner + d_inner * d)

    def state_floats(self, d_model: int) -> int:
        """The SSM state (d_inner x d_state) and the conv's last d_conv - 1 inputs."""
        return self.expand * d_model * (self.d_state + self.d_conv - 1)

    def activation_floats(self, d_model: int) -> float:
        """The conv's left-padded input (x), its output and silu's; x_proj's output;
        the scan's contiguous u, delta, B, C and z, its output before and after the
        gate, and its state once per chunk of SCAN_CHUNK tokens (workloads/memory.py
        and its test, which checks this count against what autograd keeps)."""
        d_inner, n_state = self.expand * d_model, self.d_state
        projections = d_inner + (-(-d_model // 16) + 2 * n_state)
        return projections + 2 * d_inner + 5 * d_inner + 2 * n_state + 2 * n_state * d_inner / SCAN_CHUNK


# docs/experiment.md's table: Mamba's widths and layers, and the hybrid's (a Mamba stack, its
# norm, then ONE LLaMA decoder layer with PyTorch's init); Adam at 3e-4 for both.
register_mixer(
    MambaConfig, arch="mamba", hybrid="hybrid", lr=3e-4, order=0,
    presets={"tiny": Stack(32, 3), "0.5M": Stack(64, 16), "1M": Stack(128, 10), "2M": Stack(128, 18)},
    hybrid_presets={"tiny": Stack(32, 2, d_mlp=64, n_heads=2), "0.5M": Stack(64, 12), "1M": Stack(128, 7),
                    "2M": Stack(128, 14)},
)
