"""The mixer contract: what a recurrent mixer gives the model stack, and its registry.

A mixer is one package under workloads/models/ (mamba/ is the example): its
`__init__.py` defines its typed config (a `MixerConfigBase` with a
`name: Literal[...]` field, the discriminator) and calls `register_mixer` with the
architectures it brings (the mixer alone and, optionally, its hybrid: the same
stack with one LLaMA layer on top), their presets for every size and their
learning rates; its layer, the torch code, lives beside it (`layer.py`, named by
the config's `layer`) and is imported only when a model is built. The split is
Hugging Face's configuration/modeling one, for the same reason: the CLI reads
specs, parameter counts and state sizes without importing torch. Every package
here is imported at start-up (workloads/models/config.py); nothing else is edited
to add a mixer.
"""

from __future__ import annotations

import importlib
import inspect
import math
from dataclasses import dataclass, field
from typing import ClassVar, Literal, Optional, get_args

from pydantic import BaseModel, ConfigDict

# A selective SSM's initialisation (Mamba's, Mamba-2's): its authors', or the mimetic one
# (workloads/models/recurrent_parts.py, `mimetic_`).
Init = Literal["default", "mimetic"]
INIT_HELP = ("default = the authors' (mamba-ssm's); mimetic = Trockman et al. 2024 (arXiv 2410.11135), the layer "
             "started as causal linear attention: a state that barely decays, C correlated with B, the short "
             "convolution the identity (its parts: `mimetic`; docs/rnns.md)")
# Which parts of the mimetic init a layer with `init: mimetic` takes (recurrent_parts.py,
# `mimetic_`): decay (A and dt), bc (C's projection B's plus a little noise), conv (the
# short convolution the identity); every part by default. Joined by `_`: a value is part
# of a model's size label (tiny-initmimetic-mimeticdecay_bc).
MIMETIC_PARTS = ("decay", "bc", "conv")
MimeticParts = Literal["decay_bc_conv", "decay_bc", "decay_conv", "bc_conv", "decay", "bc", "conv"]
def parts_need_mimetic(config):
    """A mixer config's `mimetic` parts are read only with `init: mimetic`: elsewhere a
    value other than the default is an error, not a setting silently dropped."""
    if config.mimetic != get_args(MimeticParts)[0] and config.init != "mimetic":
        raise ValueError(f"mimetic: {config.mimetic!r} names parts of the mimetic init, but init is {config.init!r}; "
                         "set init: mimetic beside it, or drop mimetic")
    return config


MIMETIC_HELP = ("the mimetic init's parts, where init is mimetic: decay (A and dt: the state barely decays), bc (C's "
                "projection B's plus noise of 0.1 its scale), conv (the short convolution the identity), joined by _")
Size = Literal["tiny", "0.5M", "1M", "2M"]  # docs/experiment.md's three; tiny is ours, for tests and CPU demos
SIZES = get_args(Size)


class MixerConfigBase(BaseModel):
    """What every recurrent mixer's config gives: parameter and state counts from
    its shapes, the floats its layer keeps per token for the backward pass (on
    CUDA, with its kernels: the memory estimate), and its layer."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    layer: ClassVar[str]  # "module:class" of its torch layer, imported on build
    cpu_cost: ClassVar[float]  # a training step's cost on CPU against attention's, for scheduling
    # Why the mixer cannot run on a CPU and what to use there (None: it runs everywhere):
    # a sweep or `train` that would run it on a CPU is refused before anything starts.
    cpu_refusal: ClassVar[Optional[str]] = None
    # Its fields of named values (a Literal) that a spec's axes.model may set, as it sets
    # the integer dimensions: Mamba's `init`, not its `scan` (results do not depend on the scan).
    options: ClassVar[tuple[str, ...]] = ()

    def params(self, d_model: int) -> int:
        raise NotImplementedError

    def state_floats(self, d_model: int) -> int:
        raise NotImplementedError

    def state_floats_at(self, d_model: int, length: int) -> int:
        """The most state a sequence of `length` tokens holds at once: `state_floats`,
        whatever the length, for a mixer whose state does not grow (log-linear
        Mamba-2's does)."""
        return self.state_floats(d_model)

    def activation_floats(self, d_model: int) -> float:
        raise NotImplementedError

    @classmethod
    def scans(cls) -> tuple[str, ...]:
        """The values its `scan` field takes (auto, and its forms: chunked and
        recurrent, or Mamba's cpu and reference, ...); none for a mixer without one."""
        field = cls.model_fields.get("scan")
        return get_args(field.annotation) if field is not None else ()

    def _layer_class(self):
        module, cls = self.layer.split(":")
        return getattr(importlib.import_module(module), cls)

    def build(self, d_model: int, n_layers: int, norm_eps: float, layer_idx: int = 0):
        """The mixer module; n_layers, the recurrent layers of the model, scales
        its output projection at init (GPT-2's rule, as mamba-ssm applies it). A
        layer whose init depends on its depth (RWKV-7's) takes `layer_idx`, its
        place among them; the others do not declare it."""
        fields = self.model_dump(exclude={"name"})
        layer = self._layer_class()
        if "layer_idx" in inspect.signature(layer).parameters:
            fields["layer_idx"] = layer_idx
        return layer(d_model, n_layers=n_layers, norm_eps=norm_eps, **fields)

    def check_device(self, device) -> None:
        """Refuses to run where the mixer would crawl: its layer class's
        `check_device(config, device)`, where it has one (Mamba on CUDA without
        mamba-ssm's kernel)."""
        check = getattr(self._layer_class(), "check_device", None)
        if check is not None:
            check(self, device)


@dataclass(frozen=True)
class Stack:
    """One preset's shape: width and recurrent layers; for a hybrid, its one
    attention layer's MLP width and heads; the mixer's config where a size changes
    it (None: the config's defaults)."""

    d_model: int
    layers: int
    d_mlp: int = 256
    n_heads: int = 4
    mixer: Optional[MixerConfigBase] = None


@dataclass(frozen=True)
class Mixer:
    """A registered mixer: its config and the architectures it brings."""

    config: type[MixerConfigBase]
    arch: str  # the mixer alone
    lr: float  # its peak learning rate (and its hybrid's, unless hybrid_lr)
    presets: dict[str, Stack]
    hybrid: Optional[str] = None  # the same stack with one LLaMA layer on top
    hybrid_presets: dict[str, Stack] = field(default_factory=dict)
    hybrid_lr: Optional[float] = None
    order: int = 100  # where `models` and messages list it (the paper's first)

    @property
    def name(self) -> str:
        return self.config.model_fields["name"].default

    def archs(self) -> dict[str, tuple[float, dict[str, Stack]]]:
        """{arch: (learning rate, presets)} for the mixer alone and its hybrid."""
        out = {self.arch: (self.lr, self.presets)}
        if self.hybrid:
            out[self.hybrid] = (self.lr if self.hybrid_lr is None else self.hybrid_lr, self.hybrid_presets)
        return out


REGISTRY: dict[str, Mixer] = {}  # mixer name -> its registration


def register_mixer(config: type[MixerConfigBase], **registration) -> Mixer:
    """Adds a mixer (the fields of `Mixer` beside its config); checks it now, so that
    a mixer with a missing size, rate or layer fails at import naming itself."""
    mixer = Mixer(config, **registration)
    who = config.__name__
    if not issubclass(config, MixerConfigBase):
        raise TypeError(f"{who} must derive from MixerConfigBase")
    name_field = config.model_fields.get("name")
    if name_field is None or get_args(name_field.annotation) != (name_field.default,):
        raise TypeError(f"{who} needs a field name: Literal['<its name>'] = '<its name>' (the discriminator)")
    if ":" not in getattr(config, "layer", ""):
        raise TypeError(f"{who}.layer must name its torch layer as 'module:Class'")
    if mixer.hybrid and not mixer.hybrid_presets:
        raise ValueError(f"{who}: hybrid {mixer.hybrid!r} has no presets")
    for arch, (lr, presets) in mixer.archs().items():
        if not (isinstance(lr, float) and math.isfinite(lr) and lr > 0):
            raise ValueError(f"{who}: the learning rate of {arch} must be a positive float, got {lr!r}")
        missing = [s for s in SIZES if s not in presets]
        if missing or set(presets) - set(SIZES):
            raise ValueError(f"{who}: {arch} needs a preset for each size {', '.join(SIZES)} and no other; "
                             f"missing {missing}, unknown {sorted(set(presets) - set(SIZES))}")
    taken = {a for m in REGISTRY.values() if m.name != mixer.name for a in m.archs()} | {"transformer"}
    clash = sorted(taken & set(mixer.archs()))
    if clash:
        raise ValueError(f"{who}: architecture {', '.join(clash)} is already registered")
    if REGISTRY.get(mixer.name, mixer) != mixer:
        raise ValueError(f"mixer {mixer.name!r} is registered twice")
    REGISTRY[mixer.name] = mixer
    return mixer
