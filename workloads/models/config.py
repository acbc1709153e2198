"""Model specs and the size presets of PAPER.md, one registry for all architectures.

A model is a stack of `n_layers` layers; `attn_layer_idx` says which are LLaMA
decoder layers (attention + SwiGLU MLP), and the others are pre-norm residual
layers of one recurrent mixer, `mixer` (Mamba, Mamba-2, Gated DeltaNet): its
typed config, told apart by `name`. `layers` reads the pattern as a list of
names. An architecture is a name with its presets and its learning rate
(`PRESETS`, `DEFAULT_LR`): another hybrid is one more entry.

A mixer's config lives here, beside the presets, and its layer code in its own
module (`layer` names it, imported when a model is built): the CLI reads specs,
parameter counts and state sizes without importing torch. Adding a mixer adds its
module, its tests, and here its config, its place in `MixerConfig` and its presets.

Layout rule (the reference's hybrid): the final RMSNorm follows the recurrent
stack, and attention layers stacked on top of it come after that norm, with no
norm before the head. A model of one kind ends with the norm.
"""

import importlib
from typing import Annotated, ClassVar, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, model_validator

Size = Literal["tiny", "0.5M", "1M", "2M"]
SIZES = Size.__args__


class _Mixer(BaseModel):
    """What every recurrent mixer's config gives: parameter and state counts from
    its shapes, the floats its layer keeps per token for the backward pass (on
    CUDA, with its kernels: the memory estimate), and its layer."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    layer: ClassVar[str]  # "module:class" of its torch layer, imported on build
    cpu_cost: ClassVar[float]  # a training step's cost on CPU against attention's, for scheduling

    def params(self, d_model: int) -> int:
        raise NotImplementedError

    def state_floats(self, d_model: int) -> int:
        raise NotImplementedError

    def activation_floats(self, d_model: int) -> float:
        raise NotImplementedError

    def build(self, d_model: int, n_layers: int, norm_eps: float):
        """The mixer module; n_layers, the recurrent layers of the model, scales
        its output projection at init (GPT-2's rule, as mamba-ssm applies it)."""
        module, cls = self.layer.split(":")
        fields = self.model_dump(exclude={"name"})
        return getattr(importlib.import_module(module), cls)(d_model, n_layers=n_layers, norm_eps=norm_eps, **fields)

    def check_device(self, device) -> None:
        """Refuses to run where the mixer would crawl: its layer class's
        `check_device(config, device)`, where it has one (Mamba on CUDA without
        mamba-ssm's kernel)."""
        module, cls = self.layer.split(":")
        check = getattr(getattr(importlib.import_module(module), cls), "check_device", None)
        if check is not None:
            check(self, device)


# mamba-ssm's selective scan keeps its (2 x d_state) running state once per
# chunk of this many tokens for the backward pass (selective_scan_fwd_kernel).
SCAN_CHUNK = 2048


class MambaConfig(_Mixer):
    """Mamba (v1), the paper's RNN: mamba-ssm's `Mamba` (workloads/models/mamba.py)."""

    layer: ClassVar[str] = "workloads.models.mamba:MambaMixer"
    cpu_cost: ClassVar[float] = 3.0  # the compiled CPU scan's measured premium

    name: Literal["mamba"] = "mamba"
    d_state: int = Field(16, gt=0)
    d_conv: int = Field(4, gt=1)
    expand: int = Field(2, gt=0)
    scan: Literal["auto", "cuda", "cpu", "reference"] = Field(
        "auto",
        description="the selective scan: auto = mamba-ssm's kernel on CUDA (required there), our compiled "
        "kernel on CPU; reference = the step-by-step scan, on any device (slow: tests and debugging)",
    )

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



class Mamba2Config(_Mixer):
    """Mamba-2 (workloads/models/mamba2.py): SSD with a scalar decay per head."""

    layer: ClassVar[str] = "workloads.models.mamba2:Mamba2Mixer"
    cpu_cost: ClassVar[float] = 3.0  # bench/results/models_cpu_mixers.json: 0.38x the Transformer's speed

    name: Literal["mamba2"] = "mamba2"
    d_state: int = Field(64, gt=0)
    d_conv: int = Field(4, gt=1)
    expand: int = Field(2, gt=0)
    headdim: int = Field(32, gt=0, description="channels per head; expand * d_model must be a multiple")
    chunk: int = Field(32, gt=0, description="tokens per chunk of our CPU form (results do not depend on it)")
    scan: Literal["auto", "chunked", "recurrent"] = "auto"

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


class GatedDeltaNetConfig(_Mixer):
    """Gated DeltaNet (workloads/models/gated_deltanet.py): the delta rule with a decay."""

    layer: ClassVar[str] = "workloads.models.gated_deltanet:GatedDeltaNetMixer"
    cpu_cost: ClassVar[float] = 3.0  # bench/results/models_cpu_mixers.json: 0.34x the Transformer's speed

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
        gated_deltanet.kernel_backward_refused), where fla's kernel keeps about half
        as much (an H100, bench/results/gpu_NVIDIA_H100_80GB_HBM3.json). Per token:
        19 floats per key channel and 13 per value channel (projections, convs,
        normalised q and k, the solve's right-hand sides and results, the gated
        norm), 15 per head (g, beta and their decays), 7 chunk x chunk matrices per
        head (decays, the system, scores) and the state once per chunk. Fitted to
        what autograd keeps across heads, widths and chunks: within 1% of it with
        two or more heads, up to 11% above it with one (tests/workloads/test_memory.py)."""
        dk, dv = self.heads * self.head_dim, self.heads * self.head_dim * self.expand_v
        return 19 * dk + 13 * dv + 15 * self.heads + 7 * self.heads * self.chunk + dk * self.head_dim * self.expand_v / self.chunk


# Any recurrent mixer's config, told apart by `name`.
MixerConfig = Annotated[Union[MambaConfig, Mamba2Config, GatedDeltaNetConfig], Field(discriminator="name")]
MIXERS = {cls.model_fields["name"].default: cls for cls in MixerConfig.__origin__.__args__}
# Fields written at the top level before the mixer was a config of its own (Mamba's):
# read into `mixer`, so older checkpoints and specs load unchanged.
_LEGACY_MIXER_FIELDS = ("d_state", "d_conv", "expand", "scan")


class ModelConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    arch: str = Field(description="architecture name, used for the learning-rate rule and reports")
    size: str = Field(description="preset name, e.g. 0.5M")
    d_model: int = Field(gt=0)
    n_layers: int = Field(gt=0)
    attn_layer_idx: tuple[int, ...] = Field(description="indices of the attention layers; the others are `mixer`'s")
    mixer: MixerConfig = Field(default_factory=MambaConfig, description="the recurrent layers' mixer")
    d_mlp: int = Field(256, gt=0, description="SwiGLU hidden size of attention layers")
    n_heads: int = Field(4, gt=0, description="attention heads")
    norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    attn_init: Literal["normal", "torch"] = Field(
        "normal",
        description="attention layers' Linear init: normal = N(0, 0.02) (Hugging Face LLaMA, the reference's "
        "Transformer); torch = PyTorch's default (the reference's hybrid, which never re-initialises its layer)",
    )

    @model_validator(mode="before")
    @classmethod
    def _legacy_mixer_fields(cls, data):
        if isinstance(data, dict) and any(k in data for k in _LEGACY_MIXER_FIELDS):
            data = dict(data)
            mixer = dict(data.get("mixer") or {"name": "mamba"})
            mixer.update({k: data.pop(k) for k in _LEGACY_MIXER_FIELDS if k in data})
            data["mixer"] = mixer
        return data

    @model_validator(mode="after")
    def _check(self):
        bad = [i for i in self.attn_layer_idx if not 0 <= i < self.n_layers]
        if bad:
            raise ValueError(f"attn_layer_idx {bad} outside 0..{self.n_layers - 1}")
        if self.attn_layer_idx and self.d_model % self.n_heads:
            raise ValueError(f"d_model {self.d_model} is not divisible by n_heads {self.n_heads}")
        if self.attn_layer_idx and (self.d_model // self.n_heads) % 2:
            raise ValueError(f"d_model {self.d_model} over n_heads {self.n_heads} gives heads of "
                             f"{self.d_model // self.n_heads} channels; rotary positions rotate pairs, so it must be even")
        if self.n_recurrent_layers:
            self.mixer.params(self.d_model)  # a mixer's own shape checks (Mamba-2's headdim)
        return self

    def with_fields(self, **fields) -> "ModelConfig":
        """A copy with fields replaced, those of the mixer included (d_state=4)."""
        mixer = {k: fields.pop(k) for k in list(fields) if k in type(self.mixer).model_fields}
        data = {**self.model_dump(), **fields}
        data["mixer"] = {**data["mixer"], **mixer}
        return ModelConfig.model_validate(data)

    def check_device(self, device) -> None:
        """Refuses a model whose recurrent layers would crawl on `device` (Mamba on
        CUDA without mamba-ssm's kernel)."""
        if self.n_recurrent_layers:
            self.mixer.check_device(device)

    @property
    def layers(self) -> tuple[str, ...]:
        """The layer pattern, bottom to top: "attention" or the mixer's name."""
        return tuple("attention" if i in self.attn_layer_idx else self.mixer.name for i in range(self.n_layers))

    @property
    def n_recurrent_layers(self) -> int:
        return self.n_layers - len(self.attn_layer_idx)

    @property
    def norm_idx(self) -> int:
        """How many layers run before the final RMSNorm (see the layout rule above)."""
        top = self.n_layers
        if self.n_recurrent_layers:
            while top > 0 and top - 1 in self.attn_layer_idx:
                top -= 1
        return top

    @property
    def n_params(self) -> int:
        """Trainable parameters (the frozen embedding aside), counted from the layer
        shapes without building the model."""
        d = self.d_model
        recurrent = d + self.mixer.params(d)  # its RMSNorm and its mixer
        attention = 2 * d + 4 * d * d + 3 * d * self.d_mlp
        return self.n_recurrent_layers * recurrent + len(self.attn_layer_idx) * attention + d

    @property
    def state_floats(self) -> int:
        """The recurrent state one sequence carries from token to token, all layers
        together (the mixer's `state_floats`). Attention's KV cache, which grows with
        the sequence, is kv_floats_per_token."""
        return self.n_recurrent_layers * self.mixer.state_floats(self.d_model) if self.n_recurrent_layers else 0

    @property
    def kv_floats_per_token(self) -> int:
        """Keys and values cached per token, all attention layers together."""
        return len(self.attn_layer_idx) * 2 * self.d_model


def _transformer(size, d_model, d_mlp, n_layers, n_heads):
    return ModelConfig(arch="transformer", size=size, d_model=d_model, n_layers=n_layers,
                       attn_layer_idx=tuple(range(n_layers)), d_mlp=d_mlp, n_heads=n_heads)


def _recurrent(arch, size, d_model, n_layers, mixer=MambaConfig()):
    return ModelConfig(arch=arch, size=size, d_model=d_model, n_layers=n_layers, attn_layer_idx=(), mixer=mixer)


def _hybrid(arch, size, d_model, n_recurrent, d_mlp, n_heads, mixer=MambaConfig()):
    # PAPER.md: a recurrent stack, its norm, then ONE LLaMA decoder layer with PyTorch's init.
    return ModelConfig(arch=arch, size=size, d_model=d_model, n_layers=n_recurrent + 1, attn_layer_idx=(n_recurrent,),
                       d_mlp=d_mlp, n_heads=n_heads, attn_init="torch", mixer=mixer)


_GDN2, _GDN4 = GatedDeltaNetConfig(heads=2), GatedDeltaNetConfig(heads=4)

# PAPER.md's table for its three architectures; `tiny` is ours, for tests and CPU
# demos. Mamba-2 and Gated DeltaNet (d_state 64; heads of 32 key channels) follow
# Mamba's widths, with as many layers as bring them within 5% of the nominal size,
# and their hybrids the paper's rule: the same stack with one LLaMA layer on top.
PRESETS: dict[str, dict[str, ModelConfig]] = {
    "transformer": {
        "tiny": _transformer("tiny", 32, 64, 2, 2),
        "0.5M": _transformer("0.5M", 64, 256, 8, 4),
        "1M": _transformer("1M", 64, 256, 16, 4),
        "2M": _transformer("2M", 128, 256, 12, 4),
    },
    "mamba": {
        "tiny": _recurrent("mamba", "tiny", 32, 3),
        "0.5M": _recurrent("mamba", "0.5M", 64, 16),
        "1M": _recurrent("mamba", "1M", 128, 10),
        "2M": _recurrent("mamba", "2M", 128, 18),
    },
    "hybrid": {
        "tiny": _hybrid("hybrid", "tiny", 32, 2, 64, 2),
        "0.5M": _hybrid("hybrid", "0.5M", 64, 12, 256, 4),
        "1M": _hybrid("hybrid", "1M", 128, 7, 256, 4),
        "2M": _hybrid("hybrid", "2M", 128, 14, 256, 4),
    },
    "mamba2": {
        "tiny": _recurrent("mamba2", "tiny", 32, 3, Mamba2Config()),
        "0.5M": _recurrent("mamba2", "0.5M", 64, 15, Mamba2Config()),
        "1M": _recurrent("mamba2", "1M", 96, 14, Mamba2Config()),
        "2M": _recurrent("mamba2", "2M", 128, 17, Mamba2Config()),
    },
    "mamba2_hybrid": {
        "tiny": _hybrid("mamba2_hybrid", "tiny", 32, 2, 64, 2, Mamba2Config()),
        "0.5M": _hybrid("mamba2_hybrid", "0.5M", 64, 13, 256, 4, Mamba2Config()),
        "1M": _hybrid("mamba2_hybrid", "1M", 96, 13, 256, 4, Mamba2Config()),
        "2M": _hybrid("mamba2_hybrid", "2M", 128, 16, 256, 4, Mamba2Config()),
    },
    "gated_deltanet": {
        "tiny": _recurrent("gated_deltanet", "tiny", 32, 3, GatedDeltaNetConfig(heads=1)),
        "0.5M": _recurrent("gated_deltanet", "0.5M", 64, 15, _GDN2),
        "1M": _recurrent("gated_deltanet", "1M", 128, 15, _GDN2),
        "2M": _recurrent("gated_deltanet", "2M", 128, 15, _GDN4),
    },
    "gated_deltanet_hybrid": {
        "tiny": _hybrid("gated_deltanet_hybrid", "tiny", 32, 2, 64, 2, GatedDeltaNetConfig(heads=1)),
        "0.5M": _hybrid("gated_deltanet_hybrid", "0.5M", 64, 13, 256, 4, _GDN2),
        "1M": _hybrid("gated_deltanet_hybrid", "1M", 128, 13, 256, 4, _GDN2),
        "2M": _hybrid("gated_deltanet_hybrid", "2M", 128, 14, 256, 4, _GDN4),
    },
}
# Every architecture by name: what a spec's axes.archs and `train --arch` take.
Arch = Literal[tuple(PRESETS)]

# Peak learning rates by architecture. PAPER.md: Adam at 1e-3 for Transformers,
# 3e-4 for Mamba and hybrids; the newer recurrent models take the RNNs' rate.
DEFAULT_LR = {"transformer": 1e-3, "mamba": 3e-4, "hybrid": 3e-4, "mamba2": 3e-4, "mamba2_hybrid": 3e-4,
              "gated_deltanet": 3e-4, "gated_deltanet_hybrid": 3e-4}


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
