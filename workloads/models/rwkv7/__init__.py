"""RWKV-7 "Goose" and its hybrid: config, presets and learning rate (torch-free);
the layer, RWKV-7's time mixing (the generalised delta rule), is `layer.py`."""

from typing import ClassVar, Literal

from pydantic import Field

from workloads.models.base import MixerConfigBase, Stack, register_mixer


class RWKV7Config(MixerConfigBase):
    """RWKV-7's time mixing (layer.py): a state with a per-channel decay and an
    in-context learning rate, keys and values as wide as the model."""

    layer: ClassVar[str] = "workloads.models.rwkv7.layer:RWKV7Mixer"
    cpu_cost: ClassVar[float] = 3.0

    name: Literal["rwkv7"] = "rwkv7"
    head_dim: int = Field(32, gt=0, description="channels per head; d_model must be a multiple")
    decay_rank: int = Field(32, gt=0, description="the decay's low-rank projection (fla's decay_low_rank_dim)")
    a_rank: int = Field(32, gt=0, description="the in-context learning rate's low-rank projection")
    gate_rank: int = Field(32, gt=0, description="the output gate's low-rank projection")
    chunk: int = Field(16, gt=0, description="tokens per chunk of our CPU form (results do not depend on it)")
    scan: Literal["auto", "chunked", "recurrent"] = "auto"

    def _heads(self, d_model: int) -> int:
        if d_model % self.head_dim:
            raise ValueError(f"d_model {d_model} is not a multiple of RWKV-7's head_dim {self.head_dim}")
        return d_model // self.head_dim

    def params(self, d_model: int) -> int:
        self._heads(d_model)
        d = d_model
        loras = d * (2 * self.decay_rank + 2 * self.a_rank + 2 * self.gate_rank) + 2 * d  # w and a have biases
        # r k v o; the six token-shift mixes, k_k, k_a, r_k; the group norm's weight and bias
        return 4 * d * d + loras + 9 * d + 2 * d

    def state_floats(self, d_model: int) -> int:
        """Every head's state (head_dim x head_dim) and the previous token's input
        (the token shift)."""
        return d_model * self.head_dim + d_model

    def activation_floats(self, d_model: int) -> float:
        """What our chunked form keeps per token, fitted to what autograd keeps
        across widths, heads, ranks and chunks (tests/workloads/test_memory.py),
        never below it and up to a quarter above at width 32: 50 floats per channel
        (the token-shift mixes, projections, LoRA outputs, scan inputs and their
        chunk factors, the group norm and the gate), the LoRAs' hidden rows, 4
        chunk-wide rows per head (the chunk's four score matrices) and the state
        once per chunk."""
        heads = self._heads(d_model)
        ranks = self.decay_rank + self.a_rank + self.gate_rank
        return 50 * d_model + ranks + 4 * heads * self.chunk + d_model * self.head_dim / self.chunk


# fla's shapes (keys and values as wide as the model, heads of 32), with as many
# layers, and low ranks, as bring each within 1% of the paper's Mamba (0.52M, 1.17M,
# 2.10M) and hybrid (0.46M, 0.98M, 1.80M), the tiny ones within 1% of the tiny
# Mamba's and hybrid's (29.9k, 30.2k); at width 128 the ranks are fla's default
# gate rank, 64.
_TINY = RWKV7Config(gate_rank=20)
_R40, _R48, _R64 = (RWKV7Config(decay_rank=r, a_rank=r, gate_rank=r) for r in (40, 48, 64))
register_mixer(
    RWKV7Config, arch="rwkv7", hybrid="rwkv7_hybrid", lr=3e-4, order=3,
    presets={"tiny": Stack(32, 3, mixer=_TINY), "0.5M": Stack(64, 16, mixer=_R40), "1M": Stack(128, 10, mixer=_R64),
             "2M": Stack(128, 18, mixer=_R64)},
    hybrid_presets={"tiny": Stack(32, 2, d_mlp=64, n_heads=2, mixer=_TINY), "0.5M": Stack(64, 11, mixer=_R48),
                    "1M": Stack(128, 7, mixer=_R64), "2M": Stack(128, 14, mixer=_R64)},
)
