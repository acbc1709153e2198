"""Log-linear Mamba-2 and its hybrid: config, presets and learning rate
(torch-free); the layer, Mamba-2 with a Fenwick tree of states, is `layer.py`."""

from typing import ClassVar, Literal

from pydantic import Field

from workloads.models.base import MixerConfigBase, Stack, register_mixer
from workloads.models.mamba2 import Mamba2Config


class LogLinearMamba2Config(MixerConfigBase):
    """Log-linear Mamba-2 (layer.py): Mamba-2 with a state per level of a Fenwick
    tree over the tokens, so its state grows with the log of the length."""

    layer: ClassVar[str] = "workloads.models.log_linear_mamba2.layer:LogLinearMamba2Mixer"
    cpu_cost: ClassVar[float] = 3.5  # bench/results/models_cpu_mixers.json: 0.30x the Transformer's at 200 tokens

    name: Literal["log_linear_mamba2"] = "log_linear_mamba2"
    d_state: int = Field(64, gt=0)
    d_conv: int = Field(4, gt=1)
    expand: int = Field(2, gt=0)
    headdim: int = Field(32, gt=0, description="channels per head; expand * d_model must be a multiple")
    levels: int = Field(15, gt=1, description="levels of the tree, each a state per head: up to 2^(levels - 1) "
                        "tokens (fla's 15: 16,384)")
    scan: Literal["auto", "quadratic", "recurrent"] = "auto"

    _shapes = Mamba2Config._shapes  # d_inner, heads and the conv's channels, as Mamba-2's

    def params(self, d_model: int) -> int:
        d_inner, heads, conv_dim = self._shapes(d_model)
        in_proj = d_model * (2 * d_inner + 2 * self.d_state + heads * (1 + self.levels))
        return in_proj + conv_dim * (self.d_conv + 1) + 3 * heads + heads * self.levels + d_inner + d_inner * d_model

    def state_floats(self, d_model: int) -> int:
        """What cached decoding carries: a state per level (d_inner x d_state each),
        every level kept, and the conv's last d_conv - 1 inputs of xBC. At a given
        length far fewer levels hold anything: `state_floats_at`."""
        d_inner, _, conv_dim = self._shapes(d_model)
        return self.levels * d_inner * self.d_state + conv_dim * (self.d_conv - 1)

    def state_floats_at(self, d_model: int, length: int) -> int:
        """The most state a sequence of `length` tokens holds at once: at position t
        the tree holds 1 + popcount(t) levels, at most bit_length(length) of them
        before `length` (Mamba-2's state at length 1, growing by one level each time
        the length doubles)."""
        d_inner, _, conv_dim = self._shapes(d_model)
        return min(self.levels, max(1, length.bit_length())) * d_inner * self.d_state + conv_dim * (self.d_conv - 1)

    def activation_floats(self, d_model: int) -> float:
        """Mamba-2's count (the kernel's) and the levels' projections and weights."""
        d_inner, heads, conv_dim = self._shapes(d_model)
        mamba2 = (2 * d_inner + conv_dim + heads) + 2 * conv_dim + (conv_dim + heads + d_inner) + 3 * d_inner + 1
        return mamba2 + 3 * heads * self.levels


# Mamba-2's widths and heads (expand 2, heads of 32 channels), d_state and layers chosen
# to bring each within 1% of the paper's Mamba (0.52M, 1.17M, 2.10M) and hybrid (0.46M,
# 0.98M, 1.80M), the tiny ones within 1% of the tiny Mamba's and hybrid's (29.9k,
# 30.2k): the levels' projections (heads x 15 per layer) leave room for fewer layers.
_M = LogLinearMamba2Config
register_mixer(
    LogLinearMamba2Config, arch="log_linear_mamba2", hybrid="log_linear_mamba2_hybrid", lr=3e-4, order=7,
    presets={"tiny": Stack(32, 3, mixer=_M(d_state=32)), "0.5M": Stack(64, 11, mixer=_M(d_state=128)),
             "1M": Stack(96, 17, mixer=_M(d_state=16)), "2M": Stack(128, 14, mixer=_M(d_state=128))},
    hybrid_presets={"tiny": Stack(32, 2, d_mlp=64, n_heads=2, mixer=_M(d_state=32)),
                    "0.5M": Stack(64, 11, mixer=_M(d_state=48)), "1M": Stack(96, 11),
                    "2M": Stack(128, 13, mixer=_M(d_state=32))},
)
