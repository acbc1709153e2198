"""The sections of a sweep spec (axes, learning rates, training, resources,
search, tracking): small frozen pydantic models, one per concern, with the checks
each can make alone. SweepSpec (sweep.py) holds them and checks them together."""

import math
from copy import copy
from typing import Literal, Optional, Union

from pydantic import ConfigDict, Field, create_model, field_validator, model_validator

from orchestrator.spec.section import Section
from workloads.config import LR_MAX, PER_TRIAL, Device, Seed, TrainConfig
from workloads.metrics import HEADLINE, METRICS
from workloads.models.config import DEFAULT_LR, MODEL_FIELDS, MODEL_OPTIONS, PAPER_ARCHS, PAPER_SIZES, Arch, Size
from workloads.switch import Switch
from workloads.tasks import DEFAULT_TASK, TASKS

# Where Ray Tune can store results (pyarrow filesystems); a plain path is local.
STORAGE_SCHEMES = ("s3", "gs", "gcs", "hdfs", "file")


def scheme_typo(location: str) -> str:
    """A message where `location` looks like a storage URI with a slash missing
    (s3:/bucket, which would silently become a local directory), else ''."""
    scheme, colon, rest = location.partition(":")
    if colon and scheme.lower() in STORAGE_SCHEMES and not rest.startswith("//"):
        return f"{location!r} looks like a {scheme}:// URI with a slash missing; write {scheme}://{rest.lstrip('/')}"
    return ""


def no_bool_as_number(where: str, field, values: list) -> None:
    """A boolean is refused where the task's field is a number (pydantic would take
    true as 1.0)."""
    if field.annotation is bool:
        return
    bad = [v for v in values if isinstance(v, bool)]
    if bad:
        kind = getattr(field.annotation, "__name__", str(field.annotation))
        raise ValueError(f"{where}: {str(bad[0]).lower()} is a boolean; the field takes a {kind}")


def is_variant_list(value) -> bool:
    """An arch's models given one by one: a list of dicts ([{}, {d_state: 1, n_layers: 4}])."""
    return isinstance(value, list) and bool(value) and all(isinstance(v, dict) for v in value)


def _check_field_value(where: str, field: str, value) -> None:
    """A model dimension takes a positive integer, a model option one of its values."""
    if field in MODEL_OPTIONS:
        if value not in MODEL_OPTIONS[field]:
            raise ValueError(f"{where}: {value!r} is not a value of {field}; its values: "
                             f"{', '.join(MODEL_OPTIONS[field])}")
    elif isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{where}: a positive integer, got {value!r}")


def _check_variant_list(arch: str, variants: list[dict], known: str) -> None:
    for i, fields in enumerate(variants):
        for field, v in fields.items():
            if field not in MODEL_FIELDS:
                raise ValueError(f"{arch}[{i}]: {field!r} is not a model dimension or option; known: {known}")
            _check_field_value(f"{arch}[{i}].{field}", field, v)
    if len({tuple(sorted(f.items())) for f in variants}) != len(variants):
        raise ValueError(f"{arch}: a model is listed twice in {variants}")


FieldValue = Union[int, str]  # a model dimension's (a positive integer) or a model option's (a named value)


class AxesSpec(Section):
    """The grid: one trial per combination (and per learning rate, see `lr`)."""

    archs: list[Arch] = Field(list(PAPER_ARCHS), min_length=1)
    setups: Optional[list[str]] = Field(None, min_length=1, description="those the task has (default: all of them)")
    sizes: list[Size] = Field(list(PAPER_SIZES), min_length=1)
    n: Union[list[int], dict[str, list[int]]] = Field(
        list(TASKS[DEFAULT_TASK][0].default_n), description="the task's size (the paper's task: vertices in each graph); `icr-sweep tasks` says "
        "what it counts for each task and its bounds. One list for every setup, or one per setup: {vanilla: [5], "
        "cot: [4, 5], retrieval: [4, 5]}")
    seeds: list[Seed] = Field([0], min_length=1)
    model: dict[str, Union[list[FieldValue], dict[str, list[FieldValue]], list[dict[str, FieldValue]]]] = Field(
        {}, description="model dimensions to sweep beyond the presets, each a list crossed with sizes, e.g. "
        "{d_state: [4, 16, 64]}: a preset with its fields replaced, named like tiny-dstate4; per arch: "
        "{mamba: {d_state: [4, 16]}, transformer: {d_model: [64]}}; or per arch a list of models, each a preset's "
        "fields to replace ({} the preset itself), not crossed: {mamba: [{}, {d_state: 1, n_layers: 4}]}. "
        "Model options take their named values the same way: {mamba: [{}, {init: mimetic}]} (tiny-initmimetic)")

    task: dict[str, list[Union[bool, int, float, str]]] = Field(
        {}, description="the task's other config fields to sweep, each a list crossed with setups, e.g. "
        "mqar: {seq_len: [64, 256]}: trials named like vanilla-seqlen64, reported as setups of their own")

    @field_validator("task")
    @classmethod
    def _task_axes(cls, value):
        for field, values in value.items():
            if not values or len(set(map(str, values))) != len(values):
                raise ValueError(f"{field}: a list of distinct values, got {values}")
        return value

    @field_validator("model")
    @classmethod
    def _model_axes(cls, value):
        per_arch = [isinstance(v, dict) or is_variant_list(v) for v in value.values()]
        if any(per_arch) and not all(per_arch):
            raise ValueError("give dimensions for every arch ({d_state: [4, 16]}) or per arch "
                             "({mamba: {d_state: [4, 16]}}), not both")
        archs = Arch.__args__
        known = ", ".join(map(repr, MODEL_FIELDS))
        for key, axes in value.items():
            if (isinstance(axes, dict) or is_variant_list(axes)) and key not in archs:
                raise ValueError(f"{key!r} is not an arch; known: {', '.join(map(repr, archs))}")
            if is_variant_list(axes):
                _check_variant_list(key, axes, known)
                continue
            for field, values in (axes.items() if isinstance(axes, dict) else [(key, axes)]):
                if field not in MODEL_FIELDS:
                    raise ValueError(f"{field!r} is not a model dimension or option to sweep; known: {known}")
                where = f"{key}.{field}" if isinstance(axes, dict) else field
                if not values or len(set(values)) != len(values):
                    raise ValueError(f"{where}: a list of distinct values, got {values}")
                for v in values:
                    _check_field_value(where, field, v)
        return value

    def model_axes(self, arch: str) -> Union[dict[str, list[FieldValue]], list[dict[str, FieldValue]]]:
        """The model dimensions swept for `arch`: `model` itself, or its entry for the
        arch (a dict of lists, crossed, or a list of models)."""
        if any(isinstance(v, dict) or is_variant_list(v) for v in self.model.values()):
            return self.model.get(arch, {})
        return self.model

    @field_validator("archs", "setups", "sizes", "seeds")
    @classmethod
    def _no_repeats(cls, values):
        if values is not None and len(set(values)) != len(values):
            raise ValueError(f"repeated values in {values}")
        return values

    @field_validator("n")
    @classmethod
    def _n_lists(cls, value):
        for setup, values in (value.items() if isinstance(value, dict) else [(None, value)]):
            where = f"{setup}: " if setup is not None else ""
            if not values:
                raise ValueError(f"{where}a list of one or more sizes, got {values}")
            if len(set(values)) != len(values):
                raise ValueError(f"{where}repeated values in {values}")
        return value

    def n_for(self, setup: str) -> list[int]:
        """The task sizes swept with `setup` (a bare setup: vanilla, not vanilla-seqlen64)."""
        return self.n[setup] if isinstance(self.n, dict) else self.n

    def all_n(self) -> list[int]:
        """Every task size some setup sweeps, ascending."""
        return sorted({v for setup in self.setups or [] for v in self.n_for(setup)} if isinstance(self.n, dict) else self.n)


class Distribution(Section):
    """A learning-rate range for Optuna to search."""

    distribution: Literal["loguniform", "uniform"]
    low: float = Field(gt=0, le=LR_MAX, allow_inf_nan=False)
    high: float = Field(gt=0, le=LR_MAX, allow_inf_nan=False)

    @model_validator(mode="after")
    def _ordered(self):
        if self.low >= self.high:
            raise ValueError(f"low ({self.low}) must be below high ({self.high})")
        return self


LrValue = Union[float, list[float], Distribution]


class _LearningRates(Section):
    # Infinite and nan rates reach `_positive`, whose message is clearer than the union's.
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=True)

    @model_validator(mode="before")
    @classmethod
    def _known_archs(cls, data):
        unknown = [k for k in data if k not in DEFAULT_LR] if isinstance(data, dict) else []
        if unknown:
            raise ValueError(f"no architecture named {', '.join(map(repr, unknown))}; known: {', '.join(DEFAULT_LR)}")
        return data

    @field_validator("*")
    @classmethod
    def _positive(cls, value):
        values = value if isinstance(value, list) else [value] if isinstance(value, float) else []
        if isinstance(value, list) and not value:
            raise ValueError("an empty list of learning rates")
        if any(not (math.isfinite(v) and 0 < v <= LR_MAX) for v in values):
            raise ValueError(f"learning rates must be in (0, {LR_MAX:g}], got {value}: Adam's first step scales the "
                             "rate by 10 and the weights are float32 (at most 3.4e+38); above 1 no model trains anyway")
        if len(set(values)) != len(values):
            raise ValueError(f"repeated learning rates in {value}: each would run twice and count as extra seeds")
        return value

    def values(self, arch: str) -> list[float]:
        """The learning rates the grid uses for `arch` (empty for a distribution)."""
        value = getattr(self, arch)
        return value if isinstance(value, list) else [] if isinstance(value, Distribution) else [value]

    def searched(self, archs) -> dict[str, Distribution]:
        return {a: getattr(self, a) for a in archs if isinstance(getattr(self, a), Distribution)}


# One field per architecture, defaulting to its rate in DEFAULT_LR (docs/experiment.md's for
# the paper's three: 1e-3 for the Transformer, 3e-4 for Mamba and the hybrid).
LearningRateSpec = create_model(
    "LearningRateSpec", __base__=_LearningRates,
    __doc__="Per-architecture rule: a value, a list to grid over, or a distribution to search.",
    **{arch: (LrValue, lr) for arch, lr in DEFAULT_LR.items()},
)


# The training protocol every trial shares: TrainConfig's fields (their defaults,
# docs/experiment.md's, and bounds written there once) but those the grid sets per trial.
TrainingSpec = create_model(
    "TrainingSpec", __base__=Section, __doc__="Training protocol shared by every trial (docs/experiment.md's defaults).",
    **{name: (info.annotation, copy(info)) for name, info in TrainConfig.model_fields.items() if name not in PER_TRIAL},
)


def _optional(info):
    """A copy of a field's info that defaults to None (an override that leaves it as it is)."""
    info = copy(info)
    info.default = None
    return info


# A rule of `training_overrides`: the trials it applies to (the archs, setups and
# task sizes named; all where a list is left out) and the training fields it sets.
SELECTORS = ("archs", "setups", "n")
TrainingOverride = create_model(
    "TrainingOverride", __base__=Section,
    __doc__="Training fields for some archs, setups and n (later rules win over earlier ones, all over `training`).",
    archs=(Optional[list[Arch]], Field(None, min_length=1, description="the archs it applies to (all: leave it out)")),
    setups=(Optional[list[str]], Field(None, min_length=1, description="the setups it applies to (all: leave it out)")),
    n=(Optional[list[int]], Field(None, min_length=1, description="the task sizes it applies to (all: leave it out)")),
    **{name: (Optional[info.annotation], _optional(info)) for name, info in TrainingSpec.model_fields.items()},
)


class ResourcesSpec(Section):
    cpus_per_trial: float = Field(1.0, gt=0)
    gpus_per_trial: Union[float, Literal["auto"]] = Field(
        1.0, description="a GPU or a fraction of one, in (0, 1]; auto: per trial, the smallest of "
        "1/8, 1/4, 1/2 or 1 GPU that its estimated peak memory fits (`icr-sweep plan` shows them)",
    )
    gpu_memory_gb: Union[float, Literal["auto"]] = Field(
        40.0, description="memory of the GPUs trials run on (A100 40 GB by default): plan's fit check, gpus_per_trial: "
        "auto and fuse: auto pack trials against it; auto: this machine's GPU's (nvidia-smi; the smallest of several), "
        "40 where it has none (a cluster's head)")

    @field_validator("gpus_per_trial", mode="before")
    @classmethod
    def _share(cls, value):
        if value == "auto":
            return value
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
            raise ValueError(f"a GPU or a fraction of one, in (0, 1], or auto; got {value!r}")
        return float(value)
    @field_validator("gpu_memory_gb", mode="before")
    @classmethod
    def _gigabytes(cls, value):
        if value == "auto":
            return value
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
            raise ValueError(f"a finite number of GB greater than 0, or auto; got {value!r}")
        return float(value)

    @field_validator("fuse", mode="before")
    @classmethod
    def _members(cls, value):
        if value == "auto":
            return value
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"a whole number of trials, 1 or more, or auto; got {value!r}")
        return value

    device: Device = Field(
        "auto",
        description="auto: GPUs if the cluster has any when the sweep starts or, attached to a cluster, "
        "its autoscaler can add GPU nodes; else CPU (trials then see no GPU). cuda: always ask for GPUs",
    )
    fuse: Union[int, Literal["auto"]] = Field(
        1, description="the most trials trained as one array (trials equal but for learning rate and seed, one model "
        "computing them all at once: docs/gpu.md); 1: each trial alone; auto: on GPUs, as many as a GPU's memory "
        "holds, up to 16; on CPU, 1 (arrays measured slower there: bench/results/arrays_cpu.json)")
    max_concurrent: Optional[int] = Field(None, gt=0, description="cap on trials (or arrays) running at once")
    mps: Switch = Field(
        "auto", description="trials sharing a GPU run as clients of an MPS control daemon the launch starts as you, "
        "in its private folder, and stops at its end (orchestrator/mps.py): their kernels side by side instead of "
        "taking turns; auto: where the embedded Ray's trials share a GPU of a kind MPS measured faster on "
        "(docs/gpu.md) and nvidia-cuda-mps-control is on PATH; a daemon that fails to start is named and the trials "
        "share the GPU time-sliced")
    max_failures: int = Field(2, ge=0, description="retries of a crashed trial, from its last checkpoint")


# The metrics a learning rate may be chosen by: not one measured on the held-out set,
# which the robust score reports.
CHOOSABLE = tuple(name for name, m in METRICS.items() if not m.held_out)


class SearchSpec(Section):
    method: Literal["grid", "optuna"] = "grid"
    num_samples: int = Field(8, gt=0, description="optuna: trials per grid cell")
    metric: Literal[CHOOSABLE] = Field(HEADLINE, description="what picks each cell's learning rate")
    mode: Literal["max", "min"] = Field("max", description="max or min: the metric's own direction")
    tie_break: Optional[Literal[CHOOSABLE]] = Field(
        None, description="what decides between learning rates whose metric ties (in its own direction), e.g. "
        "every rate at exact match 0; default: val_loss (val_exact_match where the metric is val_loss)")
    storage: Optional[str] = Field(
        None, pattern=r"^[a-z][a-z0-9+]*://", description="optuna: where the studies are kept, an Optuna storage URL "
        "(sqlite:////abs/path.db, postgresql://user@host/db); default: optuna.db in a local run directory "
        "(optuna-dashboard opens either)")

    @field_validator("metric", "tie_break", mode="before")
    @classmethod
    def _not_held_out(cls, value):
        if isinstance(value, str) and value in METRICS and METRICS[value].held_out:
            raise ValueError(f"{value} is measured on the held-out set, which no learning rate may be chosen on; "
                             f"choose one of {', '.join(CHOOSABLE)}")
        return value

    @property
    def ties_by(self) -> str:
        """The tie-break in use: the one given, else validation loss (exact match
        where validation loss is the metric)."""
        return self.tie_break or ("val_loss" if self.metric != "val_loss" else HEADLINE)


def _tracking_model() -> type[Section]:
    """The `tracking:` section: a field per registered tracker (orchestrator/trackers/),
    its section's model, or an on/off switch."""
    from orchestrator.trackers import load

    trackers = load()
    names = [*(n for n in FIELD_ORDER if n in trackers), *(n for n in trackers if n not in FIELD_ORDER)]
    fields = {name: (t.section if t.section is bool else Optional[t.section],
                     Field(t.default, description=t.description or None)) for name in names if (t := trackers[name])}
    return create_model("TrackingSpec", __base__=Section, __doc__=TRACKING_DOC, __module__=__name__, **fields)


FIELD_ORDER = ("wandb", "mlflow", "tensorboard")  # the built-in trackers' keys, in the order a spec dump gives them
TRACKING_DOC = """Experiment trackers, each through Ray Tune's own logger callback: every trial a
    run, with its config and every reported row (evaluations and their metrics)."""


def rebuild_tracking() -> None:
    """The `tracking:` section made again with the trackers registered now (a tracker
    registered after the spec was built), and SweepSpec's field with it."""
    import sys

    from pydantic.fields import FieldInfo

    global TrackingSpec
    TrackingSpec = _tracking_model()
    sweep = sys.modules.get("orchestrator.spec.sweep")
    if sweep is not None and hasattr(sweep, "SweepSpec"):
        sweep.SweepSpec.model_fields["tracking"] = FieldInfo(annotation=TrackingSpec, default=TrackingSpec())
        sweep.SweepSpec.model_rebuild(force=True)


TrackingSpec = _tracking_model()


