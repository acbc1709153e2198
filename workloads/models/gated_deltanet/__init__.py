"""Gated DeltaNet and its hybrid: config, presets and learning rate (torch-free);
the layer, the delta rule with a decay, is `layer.py`."""

from typing import ClassVar, Literal

from pydantic import Field

from workloads.models.base import MixerConfigBase, Stack, register_mixer


class GatedDeltaNetConfig(MixerConfigBase):
    """Gated DeltaNet (layer.py): the delta rule with a decay."""

    layer: ClassVar[str] = "workloads.models.gated_deltanet.layer:GatedDeltaNetMixer"
    cpu_cost: ClassVar[float] = 3.0  # bench/results/models_cpu_mixers.json: 0.33x the Transformer's speed

    name: Literal["gated_deltanet"] = "gated_deltanet"
    heads: int = Field(2, gt=0, description="delta-rule heads (attention layers' are n_heads)")
    head_dim: int = Field(32, gt=0, description="key (and query) channels per head")
    expand_v: int = Field(2, gt=0, description="value channels per head = expand_v * head_dim")
    d_conv: int = Field(4, gt=1)
    chunk: int = Field(16, gt=0, description="tokens per chunk of our CPU form (results do not depend on it; 16 measured faster than 32 and 64 at 200 tokens)")
    scan: Literal["auto", "chunked", "recurrent"] = "auto"

    def params(self, d_model: int) -> int:
        dk, dv = self.heads * self.head_dim, self.heads * self.head_dim * self.expand_v
        projections = d_model * (2 * dk + 2 * dv + 2 * self.heads) + dv * d_model  # q k v g a b, o
        return projections + (2 * dk + dv) * self.d_conv + 2 * self.heads + self.head_dim * self.expand_v

    def state_floats(self, d_model: int) -> int:
        """Every head's H (head_dim x value dim) and the last d_conv - 1 inputs of
        the q, k and v convolutions."""
        dk, dv = self.heads * self.head_dim, self.heads * self.head_dim * self.expand_v
        return dk * self.head_dim * self.expand_v + (2 * dk + dv) * (self.d_conv - 1)

    def activation_floats(self, d_model: int) -> float:
        """What our chunked form keeps, the larger of the two paths: it trains on
        CUDA too where fla refuses its backward (Hopper with Triton < 3.7.1, see
        layer.kernel_backward_refused), where fla's kernel keeps about half
        as much (an H100, bench/results/gpu_NVIDIA_H100_80GB_HBM3.json). Per token:
        19 floats per key channel and 13 per value channel (projections, convs,
        normalised q and k, the solve's right-hand sides and results, the gated
        norm), 15 per head (g, beta and their decays), 7 chunk x chunk matrices per
        head (decays, the system, scores) and the state once per chunk. Fitted to
        what autograd keeps across heads, widths and chunks: within 1% of it with
        two or more heads, up to 11% above it with one (tests/workloads/test_memory.py)."""
        dk, dv = self.heads * self.head_dim, self.heads * self.head_dim * self.expand_v
        return 19 * dk + 13 * dv + 15 * self.heads + 7 * self.heads * self.chunk + dk * self.head_dim * self.expand_v / self.chunk


# Mamba's widths, heads of 32 key channels (one in tiny, four at 2M), as many layers
# as bring each within 5% of the nominal size; the hybrid is the paper's rule.
_ONE, _FOUR = GatedDeltaNetConfig(heads=1), GatedDeltaNetConfig(heads=4)
register_mixer(
    GatedDeltaNetConfig, arch="gated_deltanet", hybrid="gated_deltanet_hybrid", lr=3e-4, order=2,
    presets={"tiny": Stack(32, 3, mixer=_ONE), "0.5M": Stack(64, 15), "1M": Stack(128, 15),
             "2M": Stack(128, 15, mixer=_FOUR)},
    hybrid_presets={"tiny": Stack(32, 2, d_mlp=64, n_heads=2, mixer=_ONE), "0.5M": Stack(64, 13),
                    "1M": Stack(128, 13), "2M": Stack(128, 14, mixer=_FOUR)},
)
