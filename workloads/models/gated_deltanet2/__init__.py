"""Gated DeltaNet-2 and its hybrid: config, presets and learning rate (torch-free);
the layer, Kimi Delta Attention's with an erase gate and a write gate, is `layer.py`."""

from typing import ClassVar, Literal

from workloads.models.base import Stack, register_mixer
from workloads.models.kda import KimiDeltaAttentionConfig


class GatedDeltaNet2Config(KimiDeltaAttentionConfig):
    """Gated DeltaNet-2 (layer.py): Kimi Delta Attention's shapes, its beta per head
    split into an erase gate per key channel and a write gate per value channel."""

    layer: ClassVar[str] = "workloads.models.gated_deltanet2.layer:GatedDeltaNet2Mixer"
    cpu_cost: ClassVar[float] = 4.0  # bench/results/models_cpu_mixers.json: 0.25x the Transformer's speed

    name: Literal["gated_deltanet2"] = "gated_deltanet2"

    def gate_width(self) -> int:
        """The gates' projections: one per key channel (erase), one per value channel (write)."""
        dk, dv, _ = self._dims()
        return dk + dv

    def activation_floats(self, d_model: int) -> float:
        """Kimi Delta Attention's, and the two gates' (2 floats per key and per value
        channel: tests/workloads/test_memory.py)."""
        dk, dv, _ = self._dims()
        return super().activation_floats(d_model) + 2 * dk + 2 * dv


# Heads of 32 key channels where they fit, widths and layers chosen to bring each
# within 1% of the paper's Mamba (0.52M, 1.17M, 2.10M) and hybrid (0.46M, 0.98M,
# 1.80M), the tiny ones within 1% of the tiny Mamba's and hybrid's (29.9k, 30.2k).
_G = GatedDeltaNet2Config
register_mixer(
    GatedDeltaNet2Config, arch="gated_deltanet2", hybrid="gated_deltanet2_hybrid", lr=3e-4, order=6,
    presets={"tiny": Stack(32, 4, mixer=_G(heads=2, head_dim=14)), "0.5M": Stack(64, 12, mixer=_G(head_dim=40)),
             "1M": Stack(128, 13, mixer=_G(heads=3)), "2M": Stack(128, 18, mixer=_G(heads=4))},
    hybrid_presets={"tiny": Stack(32, 2, d_mlp=64, n_heads=2, mixer=_G(heads=1, head_dim=30)),
                    "0.5M": Stack(64, 16, mixer=_G(head_dim=24)), "1M": Stack(128, 13),
                    "2M": Stack(128, 14, mixer=_G(heads=4))},
)
