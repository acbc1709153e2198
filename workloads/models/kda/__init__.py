"""Kimi Delta Attention and its hybrid: config, presets and learning rate
(torch-free); the layer, the delta rule with a decay per key channel, is `layer.py`."""

from typing import ClassVar, Literal

from pydantic import Field

from workloads.models.base import MixerConfigBase, Stack, register_mixer


class KimiDeltaAttentionConfig(MixerConfigBase):
    """Kimi Delta Attention (layer.py): the delta rule with a decay per key channel."""

    layer: ClassVar[str] = "workloads.models.kda.layer:KimiDeltaAttentionMixer"
    cpu_cost: ClassVar[float] = 5.5  # bench/results/models_cpu_mixers.json: 0.17x the Transformer's speed

    name: Literal["kda"] = "kda"
    heads: int = Field(2, gt=0, description="delta-rule heads (attention layers' are n_heads)")
    head_dim: int = Field(32, gt=0, description="key (and query) channels per head")
    expand_v: int = Field(1, gt=0, description="value channels per head = expand_v * head_dim")
    d_conv: int = Field(4, gt=1)
    chunk: int = Field(4, gt=0, description="tokens per chunk of our CPU form (results do not depend on it; 4 "
                       "measured fastest of 2 to 32 at 200 tokens: bench/results/kda_chunk_cpu.json)")
    scan: Literal["auto", "chunked", "recurrent"] = "auto"

    def _dims(self) -> tuple[int, int, int]:
        """Key width, value width, and one head's value width."""
        head_dv = self.head_dim * self.expand_v
        return self.heads * self.head_dim, self.heads * head_dv, head_dv

    def gate_width(self) -> int:
        """The gates' projection: beta, one per head."""
        return self.heads

    def params(self, d_model: int) -> int:
        dk, dv, head_dv = self._dims()
        conv = 2 * dk + dv
        projections = d_model * (conv + 2 * head_dv + self.gate_width()) + dv * d_model  # q k v f g gates, o
        low_rank = head_dv * dk + head_dv * dv + dv  # f's and g's second halves (g's with a bias)
        return projections + low_rank + conv * self.d_conv + self.heads + dk + head_dv  # A_log, dt_bias, norm

    def state_floats(self, d_model: int) -> int:
        """Every head's H (head_dim x value dim) and the last d_conv - 1 inputs of
        the q, k and v convolutions."""
        dk, dv, head_dv = self._dims()
        return dk * head_dv + (2 * dk + dv) * (self.d_conv - 1)

    def activation_floats(self, d_model: int) -> float:
        """What our chunked form keeps per token (it trains wherever fla is not
        installed), fitted to what autograd keeps across widths, heads and chunks
        (tests/workloads/test_memory.py): 21 floats per key channel and 11 per value
        channel (projections, convs, normalised q and k, the solve's right-hand sides
        and results, the gated norm), 3 chunk-wide rows per key channel (the decays
        between every two tokens of a chunk, kept per channel), 2 per head, 2 per
        channel of the low-rank projections' inner width, the state once a chunk."""
        dk, dv, head_dv = self._dims()
        return (21 * dk + 11 * dv + 3 * dk * self.chunk + 2 * self.heads * self.chunk + 2 * head_dv
                + dk * head_dv / self.chunk)


# Heads of 32 key channels where they fit, widths and layers chosen to bring each
# within 1% of the paper's Mamba (0.52M, 1.17M, 2.10M) and hybrid (0.46M, 0.98M,
# 1.80M), the tiny ones within 1% of the tiny Mamba's and hybrid's (29.9k, 30.2k).
_K = KimiDeltaAttentionConfig
register_mixer(
    KimiDeltaAttentionConfig, arch="kda", hybrid="kda_hybrid", lr=3e-4, order=5,
    presets={"tiny": Stack(32, 6, mixer=_K(heads=1, head_dim=20)), "0.5M": Stack(64, 11, mixer=_K(heads=4)),
             "1M": Stack(128, 18, mixer=_K(heads=3)), "2M": Stack(128, 19, mixer=_K(heads=3, expand_v=2))},
    hybrid_presets={"tiny": Stack(32, 4, d_mlp=64, n_heads=2, mixer=_K(heads=1, head_dim=20)),
                    "0.5M": Stack(64, 15, mixer=_K(heads=3, head_dim=24)),
                    "1M": Stack(128, 16, mixer=_K(heads=4, head_dim=20)),
                    "2M": Stack(128, 16, mixer=_K(heads=3, head_dim=48))},
)
