"""Gated DeltaProduct and its hybrid: config, presets and learning rate
(torch-free); the layer, several delta-rule steps per token, is `layer.py`."""

from typing import ClassVar, Literal

from pydantic import Field

from workloads.models.base import MixerConfigBase, Stack, register_mixer


class GatedDeltaProductConfig(MixerConfigBase):
    """Gated DeltaProduct (layer.py): `householder` delta-rule steps per token, one decay."""

    layer: ClassVar[str] = "workloads.models.gated_deltaproduct.layer:GatedDeltaProductMixer"
    cpu_cost: ClassVar[float] = 4.0  # Gated DeltaNet's 3, on a sequence `householder` times as long

    name: Literal["gated_deltaproduct"] = "gated_deltaproduct"
    heads: int = Field(2, gt=0, description="delta-rule heads (attention layers' are n_heads)")
    head_dim: int = Field(32, gt=0, description="key (and query) channels per head")
    expand_v: int = Field(2, gt=0, description="value channels per head = expand_v * head_dim")
    householder: int = Field(2, gt=0, description="delta-rule (Householder) steps per token; 1 is Gated DeltaNet")
    negative_eigenvalues: bool = Field(True, description="beta in (0, 2), as fla's allow_neg_eigval: each step's "
                                       "transition may reflect, not only shrink")
    d_conv: int = Field(4, gt=1)
    chunk: int = Field(32, gt=0, description="steps (tokens x householder) per chunk of our CPU form "
                       "(results do not depend on it)")
    scan: Literal["auto", "chunked", "recurrent"] = "auto"

    def _dims(self) -> tuple[int, int]:
        return self.heads * self.head_dim, self.heads * self.head_dim * self.expand_v

    def params(self, d_model: int) -> int:
        dk, dv = self._dims()
        n = self.householder
        conv_channels = dk + n * (dk + dv)
        projections = d_model * (conv_channels + dv + self.heads * (n + 1)) + dv * d_model  # q k v g a b, o
        return projections + conv_channels * self.d_conv + 2 * self.heads + self.head_dim * self.expand_v

    def state_floats(self, d_model: int) -> int:
        """Every head's H (head_dim x value dim) and the last d_conv - 1 inputs of
        the q, k and v convolutions (k and v `householder` times as wide)."""
        dk, dv = self._dims()
        return dk * self.head_dim * self.expand_v + (dk + self.householder * (dk + dv)) * (self.d_conv - 1)

    def activation_floats(self, d_model: int) -> float:
        """What our chunked form keeps per token (Gated DeltaNet's on a sequence
        `householder` steps long, plus the per-token projections, convs and gated
        norm), fitted to what autograd keeps across widths, heads, steps and chunks:
        never below it and at most a tenth above (tests/workloads/test_memory.py).
        Per step: 9 floats per key channel, 11 per value channel, 21 per head and 7
        chunk-wide rows per head, the state once per chunk; per token: 5 per key
        and 6 per value channel."""
        dk, dv = self._dims()
        n, head_dv = self.householder, self.head_dim * self.expand_v
        per_step = 9 * dk + 11 * dv + 21 * self.heads + 7 * self.heads * self.chunk + dk * head_dv / self.chunk
        return n * per_step + 5 * dk + 6 * dv


# Gated DeltaNet's shapes with fla's two Householder steps, heads and widths
# chosen, with as many layers, to bring each within 1% of the paper's Mamba (0.52M,
# 1.17M, 2.10M) and hybrid (0.46M, 0.98M, 1.80M), the tiny ones within 1% of the
# tiny Mamba's and hybrid's (29.9k, 30.2k).
_G = GatedDeltaProductConfig
register_mixer(
    GatedDeltaProductConfig, arch="gated_deltaproduct", hybrid="gated_deltaproduct_hybrid", lr=3e-4, order=4,
    presets={"tiny": Stack(32, 5, mixer=_G(heads=1, head_dim=24, expand_v=1)), "0.5M": Stack(64, 11),
             "1M": Stack(128, 20, mixer=_G(head_dim=20)), "2M": Stack(128, 15, mixer=_G(heads=3))},
    hybrid_presets={"tiny": Stack(32, 2, d_mlp=64, n_heads=2, mixer=_G(heads=1, head_dim=40, expand_v=1)),
                    "0.5M": Stack(64, 13, mixer=_G(expand_v=1)), "1M": Stack(128, 7, mixer=_G(heads=4, head_dim=20)),
                    "2M": Stack(128, 14, mixer=_G(heads=4, head_dim=20))},
)
