"""Model specs and the size presets of PAPER.md, one registry for all families.

A model is a stack of `n_layers` layers; `attn_layer_idx` says which are LLaMA
decoder layers (attention + SwiGLU MLP) and the rest are Mamba layers. The three
families are three settings of that list, so another hybrid is one more preset.

Layout rule (the reference's hybrid): the final RMSNorm follows the recurrent
stack, and attention layers stacked on top of it come after that norm, with no
norm before the head. A model of one kind ends with the norm.
"""

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

Arch = Literal["transformer", "mamba", "hybrid"]
Size = Literal["tiny", "0.5M", "1M", "2M"]
SIZES = Size.__args__


class ModelConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    arch: str = Field(description="family name, used for the learning-rate rule and reports")
    size: str = Field(description="preset name, e.g. 0.5M")
    d_model: int = Field(gt=0)
    n_layers: int = Field(gt=0)
    attn_layer_idx: tuple[int, ...] = Field(description="indices of the attention layers; the others are Mamba")
    d_mlp: int = Field(256, gt=0, description="SwiGLU hidden size of attention layers")
    n_heads: int = Field(4, gt=0)
    d_state: int = Field(16, gt=0)
    d_conv: int = Field(4, gt=1)
    expand: int = Field(2, gt=0)
    norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    scan: Literal["auto", "cuda", "cpu", "reference"] = Field(
        "auto",
        description="Mamba's selective scan: auto = mamba-ssm's kernel on CUDA (required there), our compiled "
        "kernel on CPU; reference = the step-by-step scan, on any device (slow: tests and debugging)",
    )
    attn_init: Literal["normal", "torch"] = Field(
        "normal",
        description="attention layers' Linear init: normal = N(0, 0.02) (Hugging Face LLaMA, the reference's "
        "Transformer); torch = PyTorch's default (the reference's hybrid, which never re-initialises its layer)",
    )

    @model_validator(mode="after")
    def _check(self):
        bad = [i for i in self.attn_layer_idx if not 0 <= i < self.n_layers]
        if bad:
            raise ValueError(f"attn_layer_idx {bad} outside 0..{self.n_layers - 1}")
        if self.attn_layer_idx and self.d_model % self.n_heads:
            raise ValueError(f"d_model {self.d_model} is not divisible by n_heads {self.n_heads}")
        return self

    @property
    def n_mamba_layers(self) -> int:
        return self.n_layers - len(self.attn_layer_idx)

    @property
    def norm_idx(self) -> int:
        """How many layers run before the final RMSNorm (see the layout rule above)."""
        top = self.n_layers
        if self.n_mamba_layers:
            while top > 0 and top - 1 in self.attn_layer_idx:
                top -= 1
        return top

    @property
    def n_params(self) -> int:
        """Trainable parameters (the frozen embedding aside), counted from the layer
        shapes without building the model."""
        d, d_inner, n_state, dt_rank = self.d_model, self.d_inner, self.d_state, self.dt_rank
        mamba = (d + 2 * d * d_inner + d_inner * (self.d_conv + 1) + d_inner * (dt_rank + 2 * n_state)
                 + (dt_rank + 1) * d_inner + d_inner * n_state + d_inner + d_inner * d)
        attention = 2 * d + 4 * d * d + 3 * d * self.d_mlp
        return self.n_mamba_layers * mamba + len(self.attn_layer_idx) * attention + d

    @property
    def state_floats(self) -> int:
        """The recurrent state one sequence carries from token to token, all layers
        together: per Mamba layer its SSM state (d_inner x d_state) and its conv's
        last d_conv - 1 inputs. Attention's KV cache, which grows with the sequence,
        is kv_floats_per_token."""
        return self.n_mamba_layers * self.d_inner * (self.d_state + self.d_conv - 1)

    @property
    def kv_floats_per_token(self) -> int:
        """Keys and values cached per token, all attention layers together."""
        return len(self.attn_layer_idx) * 2 * self.d_model

    @property
    def d_inner(self) -> int:
        return self.expand * self.d_model

    @property
    def dt_rank(self) -> int:
        return -(-self.d_model // 16)  # ceil(d_model / 16), as in Mamba


def _transformer(size, d_model, d_mlp, n_layers, n_heads):
    return ModelConfig(arch="transformer", size=size, d_model=d_model, n_layers=n_layers,
                       attn_layer_idx=tuple(range(n_layers)), d_mlp=d_mlp, n_heads=n_heads)


def _mamba(size, d_model, n_layers):
    return ModelConfig(arch="mamba", size=size, d_model=d_model, n_layers=n_layers, attn_layer_idx=())


def _hybrid(size, d_model, n_mamba, d_mlp, n_heads):
    # PAPER.md: a Mamba stack, its norm, then ONE LLaMA decoder layer with PyTorch's init.
    return ModelConfig(arch="hybrid", size=size, d_model=d_model, n_layers=n_mamba + 1,
                       attn_layer_idx=(n_mamba,), d_mlp=d_mlp, n_heads=n_heads, attn_init="torch")


# PAPER.md's table; `tiny` is ours, for tests and CPU demos.
PRESETS: dict[str, dict[str, ModelConfig]] = {
    "transformer": {
        "tiny": _transformer("tiny", 32, 64, 2, 2),
        "0.5M": _transformer("0.5M", 64, 256, 8, 4),
        "1M": _transformer("1M", 64, 256, 16, 4),
        "2M": _transformer("2M", 128, 256, 12, 4),
    },
    "mamba": {
        "tiny": _mamba("tiny", 32, 3),
        "0.5M": _mamba("0.5M", 64, 16),
        "1M": _mamba("1M", 128, 10),
        "2M": _mamba("2M", 128, 18),
    },
    "hybrid": {
        "tiny": _hybrid("tiny", 32, 2, 64, 2),
        "0.5M": _hybrid("0.5M", 64, 12, 256, 4),
        "1M": _hybrid("1M", 128, 7, 256, 4),
        "2M": _hybrid("2M", 128, 14, 256, 4),
    },
}

# Trainable parameters PAPER.md gives per preset (the frozen embedding excluded).
PAPER_PARAMS = {
    ("transformer", "0.5M"): 0.53e6, ("transformer", "1M"): 1.05e6, ("transformer", "2M"): 1.97e6,
    ("mamba", "0.5M"): 0.52e6, ("mamba", "1M"): 1.17e6, ("mamba", "2M"): 2.10e6,
    ("hybrid", "0.5M"): 0.46e6, ("hybrid", "1M"): 0.98e6, ("hybrid", "2M"): 1.80e6,
}


def preset(arch: str, size: str) -> ModelConfig:
    """The preset for (arch, size); an unknown name raises with the valid ones."""
    if arch not in PRESETS:
        raise ValueError(f"unknown architecture {arch!r}; known: {', '.join(PRESETS)}")
    if size not in PRESETS[arch]:
        raise ValueError(f"unknown size {size!r} for {arch}; known: {', '.join(PRESETS[arch])}")
    return PRESETS[arch][size]
