"""Mamba-3 and its hybrid: config, presets and learning rate (torch-free); the
layer, mamba-ssm's own Mamba-3 on CUDA, is `layer.py`. It runs only on CUDA."""

from typing import ClassVar, Literal

from pydantic import Field

from workloads.models.base import MixerConfigBase, Stack, register_mixer


class Mamba3Config(MixerConfigBase):
    """Mamba-3 (Lahoti et al., 2026; layer.py): Mamba-2's SSD with a trapezoidal
    discretisation, a data-dependent rotation of B and C (complex-valued states),
    B and C normalised with a bias per head, and no short convolution; SISO."""

    layer: ClassVar[str] = "workloads.models.mamba3.layer:Mamba3Mixer"
    cpu_cost: ClassVar[float] = 3.0  # never scheduled on a CPU (cpu_refusal)
    cpu_refusal: ClassVar[str] = (
        "its only implementation is mamba-ssm's Triton kernels (mamba_ssm.modules.mamba3, which "
        "flash-linear-attention's Mamba3 layer wraps too), with no PyTorch path to run on a CPU; on a CPU use "
        "mamba2 or log_linear_mamba2")

    name: Literal["mamba3"] = "mamba3"
    d_state: int = Field(64, gt=1)
    expand: int = Field(2, gt=0)
    headdim: int = Field(32, gt=0, description="channels per head; expand * d_model must be a multiple")
    rope_fraction: Literal[0.5, 1.0] = Field(0.5, description="the share of B's and C's channels the rotation turns")

    def _shapes(self, d_model: int) -> tuple[int, int, int]:
        """d_inner, heads and rotary angles, as mamba-ssm's Mamba3 computes them."""
        d_inner = self.expand * d_model
        if d_inner % self.headdim:
            raise ValueError(f"expand * d_model ({d_inner}) is not a multiple of headdim {self.headdim}")
        split = int(self.d_state * self.rope_fraction)
        return d_inner, d_inner // self.headdim, (split - split % 2) // 2

    def params(self, d_model: int) -> int:
        d_inner, heads, angles = self._shapes(d_model)
        in_proj = d_model * (2 * d_inner + 2 * self.d_state + 3 * heads + angles)  # z x B C dt A trap angles
        per_head = heads + 2 * heads * self.d_state + heads  # dt bias, B's and C's biases, D
        return in_proj + per_head + 2 * self.d_state + d_inner * d_model  # B's and C's norms, out_proj

    def state_floats(self, d_model: int) -> int:
        """What mamba-ssm's decoding carries (allocate_inference_cache): the rotary
        angles, the SSM state (d_inner x d_state), the last B and the last x."""
        d_inner, heads, angles = self._shapes(d_model)
        return heads * angles + d_inner * self.d_state + heads * self.d_state + d_inner

    def activation_floats(self, d_model: int) -> float:
        """Mamba-2's count for its kernel, without the conv, with the rotation's angles and trap."""
        d_inner, heads, angles = self._shapes(d_model)
        projected = 2 * d_inner + 2 * self.d_state + 3 * heads + angles
        return projected + 4 * self.d_state + 3 * d_inner + heads * angles + 1


# Mamba-2's widths and heads (expand 2, heads of 32 channels) with d_state 48 and as many
# layers as bring each within 1% of the paper's Mamba (0.52M, 1.17M, 2.10M) and hybrid
# (0.46M, 0.98M, 1.80M; d_state 64 at 1M); the tiny ones within 1% of the tiny Mamba's
# and hybrid's (29.9k, 30.2k) at expand 1.
_M = Mamba3Config
register_mixer(
    Mamba3Config, arch="mamba3", hybrid="mamba3_hybrid", lr=3e-4, order=8,
    presets={"tiny": Stack(32, 7, mixer=_M(d_state=12, headdim=16, expand=1)),
             "0.5M": Stack(64, 16, mixer=_M(d_state=48)), "1M": Stack(96, 17, mixer=_M(d_state=48)),
             "2M": Stack(128, 18, mixer=_M(d_state=48))},
    hybrid_presets={"tiny": Stack(32, 4, d_mlp=64, n_heads=2, mixer=_M(d_state=24, expand=1)),
                    "0.5M": Stack(64, 12, mixer=_M(d_state=48)), "1M": Stack(96, 12),
                    "2M": Stack(128, 14, mixer=_M(d_state=48))},
)
