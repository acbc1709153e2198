"""Model specs and the size presets of docs/experiment.md, one registry for all architectures.

A model is a stack of `n_layers` layers; `attn_layer_idx` says which are LLaMA
decoder layers (attention + SwiGLU MLP), and the others are pre-norm residual
layers of one recurrent mixer, `mixer` (Mamba, Mamba-2, Gated DeltaNet): its
typed config, told apart by `name`. `layers` reads the pattern as a list of
names. An architecture is a name with its presets and its learning rate
(`PRESETS`, `DEFAULT_LR`): the Transformer's are here, and every mixer package
under workloads/models/ registers its own and its hybrid's (base.py says how);
this module imports them all and builds the union of their configs. Nothing here
imports torch: the CLI reads specs, parameter counts and state sizes without it.

Layout rule (the reference's hybrid): the final RMSNorm follows the recurrent
stack, and attention layers stacked on top of it come after that norm, with no
norm before the head. A model of one kind ends with the norm.
"""

import importlib
import pkgutil
from pathlib import Path
from typing import Annotated, Literal, Optional, Union, get_args

from pydantic import BaseModel, ConfigDict, Field, model_validator

from workloads.models.base import REGISTRY
from workloads.models.base import SIZES, Size, Stack  # noqa: F401  (Size, SIZES: read here by the orchestrator)
from workloads.naming import field_label, joined


# Every mixer package here registers itself at import (workloads/models/base.py).
for _package in pkgutil.iter_modules([str(Path(__file__).parent)]):
    if _package.ispkg:
        importlib.import_module(f"{__package__}.{_package.name}")
_REGISTERED = sorted(REGISTRY.values(), key=lambda m: (m.order, m.name))
MIXERS = {m.name: m.config for m in _REGISTERED}  # mixer name -> its config class
DEFAULT_MIXER = "mamba"  # the paper's RNN: the mixer of a model that names none (older checkpoints)

# Any recurrent mixer's config, told apart by `name`.
_configs = tuple(MIXERS.values())
MixerConfig = _configs[0] if len(_configs) == 1 else Annotated[Union[_configs], Field(discriminator="name")]
# Model dimensions a spec's axes.model and `train --dim` can set beyond a preset: the
# stack's, its attention layers' and every mixer's integer fields (each only for
# the architectures that have a layer with it).
ATTENTION_DIMENSIONS = ("n_heads", "d_mlp")
ATTENTION_FIELDS = (*ATTENTION_DIMENSIONS, "rope_theta", "attn_init")  # what only a model with attention layers uses
MODEL_DIMENSIONS = ("d_model", "n_layers", *ATTENTION_DIMENSIONS, *dict.fromkeys(
    field for cls in MIXERS.values() for field, info in cls.model_fields.items() if info.annotation is int))
# Model options they can set too: a mixer's fields of named values ({init: [default, mimetic]}).
MODEL_OPTIONS = {field: get_args(cls.model_fields[field].annotation)
                 for cls in MIXERS.values() for field in cls.options}
MODEL_FIELDS = (*MODEL_DIMENSIONS, *MODEL_OPTIONS)  # every field a variant of a preset may set
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
    mixer: MixerConfig = Field(default_factory=lambda: MIXERS[DEFAULT_MIXER](), description="the recurrent layers' mixer")
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
            mixer = dict(data.get("mixer") or {"name": DEFAULT_MIXER})
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

    @property
    def dimensions(self) -> set[str]:
        """The MODEL_FIELDS this model has a layer for (no d_state or init for a
        Transformer, no n_heads for Mamba)."""
        own = {"d_model", "n_layers"} | (set(ATTENTION_DIMENSIONS) if self.attn_layer_idx else set())
        mixer = set(type(self.mixer).model_fields) if self.n_recurrent_layers else set()
        return (own | mixer) & set(MODEL_FIELDS)

    def variant(self, fields: dict) -> "ModelConfig":
        """This model with `fields` (its own or its mixer's) replaced, named after
        them (tiny-dstate4). A new n_layers keeps the layout: all attention, none, or
        attention in the last layer (the hybrid)."""
        if not fields:
            return self
        update = dict(fields, size=joined(self.size, field_label(fields)))
        if "n_layers" in fields:
            layers, idx = fields["n_layers"], self.attn_layer_idx
            if len(idx) == self.n_layers:
                update["attn_layer_idx"] = tuple(range(layers))
            elif idx == (self.n_layers - 1,):
                if layers < 2:
                    raise ValueError(f"n_layers {layers} leaves the {self.arch} no recurrent layer below its attention "
                                     "layer; a hybrid needs n_layers of at least 2")
                update["attn_layer_idx"] = (layers - 1,)
            elif idx:
                raise ValueError(f"n_layers of {self.arch}: its attention layers {idx} have no rule to follow")
        return self.with_fields(**update)

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

    def state_floats_at(self, length: int) -> int:
        """The recurrent state at its fullest over a sequence of `length` tokens:
        `state_floats`, unless a mixer's state grows with the length (log-linear
        Mamba-2's, with its log)."""
        if not self.n_recurrent_layers:
            return 0
        return self.n_recurrent_layers * self.mixer.state_floats_at(self.d_model, length)

    @property
    def kv_floats_per_token(self) -> int:
        """Keys and values cached per token, all attention layers together."""
        return len(self.attn_layer_idx) * 2 * self.d_model


def _transformer(size, d_model, d_mlp, n_layers, n_heads, attn_init="normal"):
    return ModelConfig(arch="transformer", size=size, d_model=d_model, n_layers=n_layers,
                       attn_layer_idx=tuple(range(n_layers)), d_mlp=d_mlp, n_heads=n_heads, attn_init=attn_init)


def _from_stack(arch: str, size: str, stack: Stack, config: type, hybrid: bool) -> ModelConfig:
    """A registered preset as a model: the recurrent stack alone or, in a hybrid,
    with ONE LLaMA decoder layer on top (docs/experiment.md), keeping PyTorch's init."""
    top = (stack.layers,) if hybrid else ()
    return ModelConfig(arch=arch, size=size, d_model=stack.d_model, n_layers=stack.layers + len(top),
                       attn_layer_idx=top, d_mlp=stack.d_mlp, n_heads=stack.n_heads,
                       attn_init="torch" if hybrid else "normal", mixer=stack.mixer or config())


# The Transformer (docs/experiment.md's table; `tiny` is ours, for tests and CPU demos) and
# every registered mixer's architectures, in the order `models` lists them.
PRESETS: dict[str, dict[str, ModelConfig]] = {
    "transformer": {
        # Ours, not the paper's: 3 layers, about the tiny Mamba's and hybrid's parameters
        # (30.9k, 29.9k, 30.2k) as the paper's sizes match, and PyTorch's init (as the
        # hybrid's layer), with which it learns IsTree at width 32 (docs/fidelity.md).
        "tiny": _transformer("tiny", 32, 64, 3, 2, attn_init="torch"),
        "0.5M": _transformer("0.5M", 64, 256, 8, 4),
        "1M": _transformer("1M", 64, 256, 16, 4),
        "2M": _transformer("2M", 128, 256, 12, 4),
    },
    **{arch: {size: _from_stack(arch, size, stack, mixer.config, hybrid=arch == mixer.hybrid)
              for size, stack in presets.items()}
       for mixer in _REGISTERED for arch, (_, presets) in mixer.archs().items()},
}
# Every architecture by name: what a spec's axes.archs and `train --arch` take.
Arch = Literal[tuple(PRESETS)]
# Those that run on a CPU: all but the ones whose mixer has no PyTorch path (cpu_refusal).
CPU_ARCHS = tuple(arch for arch, sizes in PRESETS.items()
                  if not any(cfg.n_recurrent_layers and cfg.mixer.cpu_refusal for cfg in sizes.values()))

# Peak learning rates by architecture. docs/experiment.md: Adam at 1e-3 for Transformers,
# 3e-4 for Mamba and hybrids; each mixer registers its own and its hybrid's.
DEFAULT_LR = {"transformer": 1e-3, **{arch: lr for m in _REGISTERED for arch, (lr, _) in m.archs().items()}}


# Trainable parameters docs/experiment.md gives per preset (the frozen embedding excluded).
PAPER_PARAMS = {
    ("transformer", "0.5M"): 0.53e6, ("transformer", "1M"): 1.05e6, ("transformer", "2M"): 1.97e6,
    ("mamba", "0.5M"): 0.52e6, ("mamba", "1M"): 1.17e6, ("mamba", "2M"): 2.10e6,
    ("hybrid", "0.5M"): 0.46e6, ("hybrid", "1M"): 0.98e6, ("hybrid", "2M"): 1.80e6,
}
# The paper's grid of models, a sweep spec's default axes: its architectures at its sizes.
PAPER_ARCHS = tuple(dict.fromkeys(arch for arch, _ in PAPER_PARAMS))
PAPER_SIZES = tuple(dict.fromkeys(size for _, size in PAPER_PARAMS))


# A preset labelled with a paper size holds that many trainable parameters within this
# factor, as the paper's presets do (0.90x to 1.17x of their labels; the findings compare
# models within the same 1.2x): a label is a claim a table and the findings read.
SIZE_LABEL_TOLERANCE = 1.2


def label_params(size: str) -> Optional[float]:
    """The parameters a paper-size label names ("0.5M": 500,000); None for a label of ours."""
    return float(size.removesuffix("M")) * 1e6 if size in PAPER_SIZES else None


def check_size_label(model: ModelConfig) -> None:
    """Raises ValueError where a preset labelled with a paper size is not that size."""
    nominal = label_params(model.size)
    if nominal is None:
        return
    low, high = nominal / SIZE_LABEL_TOLERANCE, nominal * SIZE_LABEL_TOLERANCE
    if not low <= model.n_params <= high:
        raise ValueError(f"{model.arch}'s preset {model.size!r} has {model.n_params:,} trainable parameters, "
                         f"{model.n_params / nominal:.2f}x its label: a preset labelled a paper size holds "
                         f"{low:,.0f} to {high:,.0f} (the paper's own keep 0.90x to 1.17x); resize it, or label it "
                         f"with a size of its own that is not a paper size ({', '.join(PAPER_SIZES)})")


for _sizes in PRESETS.values():
    for _model in _sizes.values():
        check_size_label(_model)


def preset(arch: str, size: str) -> ModelConfig:
    """The preset for (arch, size); an unknown name raises with the valid ones."""
    if arch not in PRESETS:
        raise ValueError(f"unknown architecture {arch!r}; known: {', '.join(PRESETS)}")
    if size not in PRESETS[arch]:
        raise ValueError(f"unknown size {size!r} for {arch}; known: {', '.join(PRESETS[arch])}")
    return PRESETS[arch][size]
