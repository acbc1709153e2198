"""The sweep spec: a tree of small frozen pydantic models, one per concern, and
how a YAML file or a run directory becomes one.

Unknown keys are errors (extra="forbid"), so a misspelt YAML key names its path
instead of being silently ignored. The grid a spec sweeps (its variants, cells
and trials) is orchestrator/grid.py; how its trials share a GPU,
orchestrator/packing.py.
"""

import itertools
import json
import math
import re
import typing
from copy import copy
from pathlib import Path
from typing import Literal, Optional, Union

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model, field_validator, model_validator

from orchestrator.grid import model_variants, plan, task_variants, variant_task
from workloads.config import PER_TRIAL, Device, Seed, TrainConfig
from workloads.metrics import HEADLINE, METRICS
from workloads.models.config import DEFAULT_LR, MODEL_DIMENSIONS, Arch, Size, preset
from workloads.tasks import DEFAULT_TASK, TASKS

# Where Ray Tune can store results (pyarrow filesystems); a plain path is local.
STORAGE_SCHEMES = ("s3", "gs", "gcs", "hdfs", "file")
# A spec that expands to more trials than this gets a warning: likely a typo.
PLAUSIBLE_TRIALS = 2_000
MAX_SPEC_BYTES = 1_000_000


def scheme_typo(location: str) -> str:
    """A message where `location` looks like a storage URI with a slash missing
    (s3:/bucket, which would silently become a local directory), else ''."""
    scheme, colon, rest = location.partition(":")
    if colon and scheme.lower() in STORAGE_SCHEMES and not rest.startswith("//"):
        return f"{location!r} looks like a {scheme}:// URI with a slash missing; write {scheme}://{rest.lstrip('/')}"
    return ""


def _admits_bool(annotation) -> bool:
    return annotation is bool or any(_admits_bool(a) for a in typing.get_args(annotation))


def _section(annotation):
    """The spec section (a model class) an optional field holds, else None."""
    for a in (annotation, *typing.get_args(annotation)):
        if isinstance(a, type) and issubclass(a, BaseModel):
            return a
    return None


def _holds_bool(value) -> bool:
    if isinstance(value, bool):
        return True
    if isinstance(value, dict):
        return any(_holds_bool(v) for v in value.values())
    return isinstance(value, (list, tuple)) and any(_holds_bool(v) for v in value)


class _Spec(BaseModel):
    # No inf or nan in any number; and no YAML true/false where a number is meant
    # (pydantic would read true as 1: `samples: true` trained one sample).
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    @field_validator("*", mode="before")
    @classmethod
    def _no_bools_for_numbers(cls, value, info):
        field = cls.model_fields.get(info.field_name)
        if field is None or (isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel)):
            return value  # a section: its own fields check theirs
        if _holds_bool(value) and not _admits_bool(field.annotation):
            if isinstance(value, bool) and _section(field.annotation):
                raise ValueError(f"a section of {_section(field.annotation).__name__.removesuffix('Spec')}'s fields is "
                                 f"expected (`icr-sweep schema` lists them), not the YAML boolean {str(value).lower()}")
            if isinstance(value, bool):
                raise ValueError(f"a number is expected, not the YAML boolean {str(value).lower()}")
            raise ValueError(f"numbers are expected, not YAML booleans: {json.dumps(value)}")
        return value


def _no_bool_as_number(where: str, field, values: list) -> None:
    """A boolean is refused where the task's field is a number (pydantic would take
    true as 1.0)."""
    if field.annotation is bool:
        return
    bad = [v for v in values if isinstance(v, bool)]
    if bad:
        kind = getattr(field.annotation, "__name__", str(field.annotation))
        raise ValueError(f"{where}: {str(bad[0]).lower()} is a boolean; the field takes a {kind}")


def _is_variant_list(value) -> bool:
    """An arch's models given one by one: a list of dicts ([{}, {d_state: 1, n_layers: 4}])."""
    return isinstance(value, list) and bool(value) and all(isinstance(v, dict) for v in value)


def _check_variant_list(arch: str, variants: list[dict], known: str) -> None:
    for i, fields in enumerate(variants):
        for field, v in fields.items():
            if field not in MODEL_DIMENSIONS:
                raise ValueError(f"{arch}[{i}]: {field!r} is not a model dimension; known: {known}")
            if isinstance(v, bool) or v < 1:
                raise ValueError(f"{arch}[{i}].{field}: a positive integer, got {v!r}")
    if len({tuple(sorted(f.items())) for f in variants}) != len(variants):
        raise ValueError(f"{arch}: a model is listed twice in {variants}")


class AxesSpec(_Spec):
    """The grid: one trial per combination (and per learning rate, see `lr`)."""

    archs: list[Arch] = Field(["transformer", "mamba", "hybrid"], min_length=1)
    setups: Optional[list[str]] = Field(None, min_length=1, description="those the task has (default: all of them)")
    sizes: list[Size] = Field(["0.5M", "1M", "2M"], min_length=1)
    n: Union[list[int], dict[str, list[int]]] = Field(
        [16, 32, 64], description="the task's size (the paper's task: vertices in each graph); `icr-sweep tasks` says "
        "what it counts for each task and its bounds. One list for every setup, or one per setup: {vanilla: [5], "
        "cot: [4, 5], retrieval: [4, 5]}")
    # Kept as the specs so far spell it; a task field like the rest, moved into
    # task_params before validation (SweepSpec._family_is_a_task_field).
    family: Optional[str] = Field(
        None, description="IsTree's graph family (binary or random) for every trial: task_params.family, written "
        "here; default: the task's. Sweep it as axes.task: {family: [binary, random]}")
    seeds: list[Seed] = Field([0], min_length=1)
    model: dict[str, Union[list[int], dict[str, list[int]], list[dict[str, int]]]] = Field(
        {}, description="model dimensions to sweep beyond the presets, each a list crossed with sizes, e.g. "
        "{d_state: [4, 16, 64]}: a preset with its fields replaced, named like tiny-dstate4; per arch: "
        "{mamba: {d_state: [4, 16]}, transformer: {d_model: [64]}}; or per arch a list of models, each a preset's "
        "fields to replace ({} the preset itself), not crossed: {mamba: [{}, {d_state: 1, n_layers: 4}]}")

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
        per_arch = [isinstance(v, dict) or _is_variant_list(v) for v in value.values()]
        if any(per_arch) and not all(per_arch):
            raise ValueError("give dimensions for every arch ({d_state: [4, 16]}) or per arch "
                             "({mamba: {d_state: [4, 16]}}), not both")
        archs = Arch.__args__
        known = ", ".join(map(repr, MODEL_DIMENSIONS))
        for key, axes in value.items():
            if (isinstance(axes, dict) or _is_variant_list(axes)) and key not in archs:
                raise ValueError(f"{key!r} is not an arch; known: {', '.join(map(repr, archs))}")
            if _is_variant_list(axes):
                _check_variant_list(key, axes, known)
                continue
            for field, values in (axes.items() if isinstance(axes, dict) else [(key, axes)]):
                if field not in MODEL_DIMENSIONS:
                    raise ValueError(f"{field!r} is not a model dimension to sweep; known: {known}")
                where = f"{key}.{field}" if isinstance(axes, dict) else field
                if not values or len(set(values)) != len(values) or min(values) < 1:
                    raise ValueError(f"{where}: a list of distinct positive values, got {values}")
        return value

    def model_axes(self, arch: str) -> Union[dict[str, list[int]], list[dict[str, int]]]:
        """The model dimensions swept for `arch`: `model` itself, or its entry for the
        arch (a dict of lists, crossed, or a list of models)."""
        if any(isinstance(v, dict) or _is_variant_list(v) for v in self.model.values()):
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


class Distribution(_Spec):
    """A learning-rate range for Optuna to search."""

    distribution: Literal["loguniform", "uniform"]
    low: float = Field(gt=0, allow_inf_nan=False)
    high: float = Field(gt=0, allow_inf_nan=False)

    @model_validator(mode="after")
    def _ordered(self):
        if self.low >= self.high:
            raise ValueError(f"low ({self.low}) must be below high ({self.high})")
        return self


LrValue = Union[float, list[float], Distribution]


class _LearningRates(_Spec):
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
        if any(not (math.isfinite(v) and v > 0) for v in values):
            raise ValueError(f"learning rates must be finite and > 0, got {value}")
        if len(set(values)) != len(values):
            raise ValueError(f"repeated learning rates in {value}: each would run twice and count as extra seeds")
        return value

    def values(self, arch: str) -> list[float]:
        """The learning rates the grid uses for `arch` (empty for a distribution)."""
        value = getattr(self, arch)
        return value if isinstance(value, list) else [] if isinstance(value, Distribution) else [value]

    def searched(self, archs) -> dict[str, Distribution]:
        return {a: getattr(self, a) for a in archs if isinstance(getattr(self, a), Distribution)}


# One field per architecture, defaulting to its rate in DEFAULT_LR (PAPER.md's for
# the paper's three: 1e-3 for the Transformer, 3e-4 for Mamba and the hybrid).
LearningRateSpec = create_model(
    "LearningRateSpec", __base__=_LearningRates,
    __doc__="Per-architecture rule: a value, a list to grid over, or a distribution to search.",
    **{arch: (LrValue, lr) for arch, lr in DEFAULT_LR.items()},
)


# The training protocol every trial shares: TrainConfig's fields (their defaults,
# PAPER.md's, and bounds written there once) but those the grid sets per trial.
TrainingSpec = create_model(
    "TrainingSpec", __base__=_Spec, __doc__="Training protocol shared by every trial (PAPER.md's defaults).",
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
    "TrainingOverride", __base__=_Spec,
    __doc__="Training fields for some archs, setups and n (later rules win over earlier ones, all over `training`).",
    archs=(Optional[list[Arch]], Field(None, min_length=1, description="the archs it applies to (all: leave it out)")),
    setups=(Optional[list[str]], Field(None, min_length=1, description="the setups it applies to (all: leave it out)")),
    n=(Optional[list[int]], Field(None, min_length=1, description="the task sizes it applies to (all: leave it out)")),
    **{name: (Optional[info.annotation], _optional(info)) for name, info in TrainingSpec.model_fields.items()},
)


class ResourcesSpec(_Spec):
    cpus_per_trial: float = Field(1.0, gt=0)
    gpus_per_trial: Union[float, Literal["auto"]] = Field(
        1.0, description="a GPU or a fraction of one, in (0, 1]; auto: per trial, the smallest of "
        "1/8, 1/4, 1/2 or 1 GPU that its estimated peak memory fits (`icr-sweep plan` shows them)",
    )
    gpu_memory_gb: float = Field(40.0, gt=0, description="memory of the GPUs trials run on (A100 40 GB by default): "
                                 "plan's fit check and gpus_per_trial: auto use it")

    @field_validator("gpus_per_trial", mode="before")
    @classmethod
    def _share(cls, value):
        if value == "auto":
            return value
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
            raise ValueError(f"a GPU or a fraction of one, in (0, 1], or auto; got {value!r}")
        return float(value)
    device: Device = Field(
        "auto",
        description="auto: GPUs if the cluster has any when the sweep starts or, attached to a cluster, "
        "its autoscaler can add GPU nodes; else CPU (trials then see no GPU). cuda: always ask for GPUs",
    )
    max_concurrent: Optional[int] = Field(None, gt=0, description="cap on trials running at once")
    max_failures: int = Field(2, ge=0, description="retries of a crashed trial, from its last checkpoint")


# The metrics a learning rate may be chosen by: not one measured on the held-out set,
# which the robust score reports.
CHOOSABLE = tuple(name for name, m in METRICS.items() if not m.held_out)


class SearchSpec(_Spec):
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


class WandbSpec(_Spec):
    project: str = Field(min_length=1, description="the W&B project")
    mode: Literal["offline", "online"] = Field(
        "offline", description="offline: run files on disk only (`wandb sync` uploads them later); online: needs "
        "WANDB_API_KEY or `wandb login`")
    entity: Optional[str] = Field(None, description="the W&B team or user; default: your default entity")
    group: Optional[str] = Field(None, description="default: the sweep's name")
    dir: Optional[str] = Field(None, description="where W&B writes (<dir>/wandb/); default: the run directory when "
                               "local, else the driver's trial folders")


# MLflow's tracking stores (its REST client and its SQLAlchemy store's databases).
MLFLOW_SCHEMES = ("http", "https", "databricks", "sqlite", "postgresql", "mysql", "mssql")


class MlflowSpec(_Spec):
    tracking_uri: Optional[str] = Field(
        None, description="an MLflow tracking URI (http://host:5000, sqlite:////abs/path.db); "
        "default: sqlite:///<run directory>/mlflow.db, for a local run directory")

    @field_validator("tracking_uri")
    @classmethod
    def _a_uri_mlflow_opens(cls, value):
        if value is None:  # the default: the run directory's own mlflow.db
            return value
        scheme = value.partition("://")[0] if "://" in value else ""
        if scheme in ("", "file"):
            raise ValueError(f"{value!r} names MLflow's file store, which is in maintenance mode and refuses to open; "
                             "use sqlite:////abs/path.db or an MLflow server's http://host:5000")
        if scheme.split("+")[0] not in MLFLOW_SCHEMES:  # postgresql+psycopg2:// names its driver
            raise ValueError(f"{value!r}: unknown scheme {scheme}://; MLflow opens {', '.join(s + '://' for s in MLFLOW_SCHEMES)}")
        return value
    experiment: Optional[str] = Field(None, description="default: the sweep's name")


class TrackingSpec(_Spec):
    """Experiment trackers, each through Ray Tune's own logger callback: every trial a
    run, with its config and every reported row (evaluations and their metrics)."""

    wandb: Optional[WandbSpec] = None
    mlflow: Optional[MlflowSpec] = None
    tensorboard: bool = Field(True, description="TensorBoard event files in each trial's directory (Ray Tune's)")


class SweepSpec(_Spec):
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", description="the run directory's name")
    task: str = Field(DEFAULT_TASK, description=f"a registered task: {DEFAULT_TASK} (the paper's); `icr-sweep tasks` "
                      "lists them")
    task_params: dict[str, Union[int, float, str]] = Field(
        {}, description="the task's other config fields, the same for every trial (e.g. ar: {keys: 64, values: 64})")
    axes: AxesSpec = Field(AxesSpec(), validate_default=True)
    lr: LearningRateSpec = LearningRateSpec()
    training: TrainingSpec = TrainingSpec()
    training_overrides: list[TrainingOverride] = Field(
        [], description="training fields by arch and setup, e.g. fewer samples for retrieval than for CoT: "
        "[{setups: [retrieval], samples: 30000}]; rules apply in order, the later winning")
    resources: ResourcesSpec = ResourcesSpec()
    search: SearchSpec = SearchSpec()
    tracking: TrackingSpec = TrackingSpec()
    storage: str = Field("./runs", description="results go to <storage>/<name>/; a local path or s3://...")

    @model_validator(mode="before")
    @classmethod
    def _family_is_a_task_field(cls, data):
        """axes.family (the paper's specs write it there) is task_params.family: one
        task field like the rest, checked by the task's config."""
        axes = data.get("axes") if isinstance(data, dict) else None
        if not (isinstance(axes, dict) and axes.get("family") is not None):
            return data
        family, params = axes["family"], data.get("task_params") or {}
        if isinstance(params, dict) and "family" in params:
            raise ValueError(f"axes.family: {family} is given as task_params.family too ({params['family']}); "
                             "give the graph family in one place")
        if isinstance(axes.get("task"), dict) and "family" in axes["task"]:
            raise ValueError(f"axes.family: {family} is given in axes.task.family too ({axes['task']['family']}); "
                             "give the graph family in one place")
        task = TASKS.get(data.get("task", DEFAULT_TASK))
        if task and not task[0].has("family"):
            having = ", ".join(name for name, (config_cls, _) in TASKS.items() if config_cls.has("family"))
            raise ValueError(f"axes.family: {data.get('task')} has no graph family (a field of {having})")
        if task and task[0].choices("family") and family not in task[0].choices("family"):
            raise ValueError(f"axes.family: {family!r} is not a graph family of {data.get('task', DEFAULT_TASK)}; "
                             f"choose one of {', '.join(task[0].choices('family'))}")
        if not isinstance(params, dict):
            return data  # task_params' own check names it
        return {**data, "axes": {k: v for k, v in axes.items() if k != "family"}, "task_params": {**params, "family": family}}

    @field_validator("storage")
    @classmethod
    def _known_scheme(cls, value):
        typo = scheme_typo(value)
        if typo:
            raise ValueError(typo)
        scheme, sep, _ = value.partition("://")
        if sep and scheme not in STORAGE_SCHEMES:
            raise ValueError(f"unknown storage scheme {scheme + '://'!r} in {value!r}; use a local path or one of "
                             + ", ".join(f"{s}://" for s in STORAGE_SCHEMES))
        if not value.strip():
            raise ValueError("storage is empty; use a local path (default ./runs) or s3://bucket/prefix")
        return value

    @field_validator("task")
    @classmethod
    def _known_task(cls, value):
        if value not in TASKS:
            raise ValueError(f"unknown task {value!r}; known tasks: {', '.join(sorted(TASKS))}")
        return value

    @field_validator("axes")
    @classmethod
    def _axes_fit_the_task(cls, axes, info):
        task = info.data.get("task")
        if task not in TASKS:
            return axes  # reported on `task`
        config_cls = TASKS[task][0]
        setups = config_cls.setups()
        if axes.setups is None:  # the task's own setups, in its order
            axes = axes.model_copy(update={"setups": list(setups)})
        bad = [s for s in axes.setups if s not in setups]
        if bad:
            raise ValueError(f"setups: {task} has the setups {', '.join(setups)}; got {bad}")
        if isinstance(axes.n, dict):
            # A setup of the task that the axes leave out is no error (a spec narrowed
            # to fewer setups keeps its sizes), as in training_overrides.
            unknown = [s for s in axes.n if s not in setups]
            if unknown:
                raise ValueError(f"n: {', '.join(unknown)} is not a setup of {task} ({', '.join(setups)})")
            missing = [s for s in axes.setups if s not in axes.n]
            if missing:
                raise ValueError(f"n: one list per setup swept ({', '.join(axes.setups)}); no sizes for {', '.join(missing)}")
        lo, hi = config_cls.n_range()
        bad = [v for v in axes.all_n() if (lo is not None and v < lo) or (hi is not None and v > hi)]
        if bad:
            raise ValueError(f"n: {task} sizes must be in {lo}..{hi} (n: {config_cls.n_means()}), got {bad}")
        return axes

    @model_validator(mode="after")
    def _consistent(self):
        searched = self.lr.searched(self.axes.archs)
        if self.search.method == "grid" and searched:
            raise ValueError(f"lr for {', '.join(searched)} is a distribution; set search.method: optuna to search it")
        if self.search.method == "optuna" and not searched:
            raise ValueError("search.method is optuna, but no learning rate of the swept archs is a distribution")
        metric = METRICS[self.search.metric]
        if self.search.mode != metric.mode:
            raise ValueError(f"search.mode: {metric.name} is better {'higher' if metric.mode == 'max' else 'lower'}; "
                             f"set mode: {metric.mode}")
        for field, name in (("metric", self.search.metric), ("tie_break", self.search.ties_by)):
            chosen = METRICS[name]
            if chosen.generation and not getattr(TASKS[self.task][1], "generates", False):
                raise ValueError(f"search.{field}: {self.task} has no generation protocol, so no {chosen.name}; "
                                 f"choose one of {', '.join(m for m, d in METRICS.items() if not d.generation)}")
        if self.search.tie_break == self.search.metric:
            raise ValueError(f"search.tie_break: {self.search.metric} is search.metric already and breaks no tie of "
                             f"its own; choose another of {', '.join(m for m in METRICS if m != self.search.metric)}")
        if self.search.storage and self.search.method != "optuna":
            raise ValueError("search.storage keeps Optuna's studies; set search.method: optuna or remove it")
        if self.training.warmup_samples >= self.training.samples:
            raise ValueError(f"training.warmup_samples ({self.training.warmup_samples}) must be below training.samples")
        self._check_overrides()
        unswept = [arch for arch, axes in self.axes.model.items()
                   if (isinstance(axes, dict) or _is_variant_list(axes)) and arch not in self.axes.archs]
        if unswept:
            raise ValueError(f"axes.model names {', '.join(unswept)}, which axes.archs does not sweep "
                             f"({', '.join(self.axes.archs)})")
        self._check_model_dimensions()
        for arch in self.axes.archs:
            try:
                model_variants(arch, self.axes.sizes, self.axes.model_axes(arch))  # every variant is a valid model
            except ValidationError as e:
                raise ValueError(f"axes.model with {arch}: {e.errors()[0]['msg'].removeprefix('Value error, ')}") from None
            except ValueError as e:
                raise ValueError(f"axes.model with {arch}: {e}") from None
        fields = TASKS[self.task][0].model_fields
        for field in self.axes.task:
            if field in ("name", "n", "setup") or field not in fields:
                other = sorted(set(fields) - {"name", "n", "setup"})
                raise ValueError(f"axes.task: {field!r} is not a parameter of {self.task} to sweep; "
                                 f"its parameters: {', '.join(other) or 'none'} (n and setup have axes of their own)")
            if field in self.task_params:
                raise ValueError(f"axes.task: {field} is also in task_params; give it in one place")
            _no_bool_as_number(f"axes.task.{field}", fields[field], self.axes.task[field])
        where = "axes.task" if self.axes.task else "task_params"
        for label, variant in task_variants(self.axes.setups, self.axes.task).items():
            self._check_task_variant(label, variant, where)
        return self

    def _check_model_dimensions(self) -> None:
        """A dimension given for an arch that has no layer for it is refused by name
        (as `train --dim` refuses it); one given for every arch must fit one of them."""
        per_arch = any(isinstance(v, dict) or _is_variant_list(v) for v in self.axes.model.values())
        own = {arch: preset(arch, self.axes.sizes[0]).dimensions for arch in self.axes.archs}
        if per_arch:
            for arch in self.axes.archs:
                axes = self.axes.model_axes(arch)
                given = {f for fields in axes for f in fields} if isinstance(axes, list) else set(axes)
                lacking = sorted(given - own[arch])
                if lacking:
                    raise ValueError(f"axes.model.{arch}: {arch} has no {', '.join(lacking)} to set; its dimensions: "
                                     f"{', '.join(sorted(own[arch]))}")
            return
        unused = sorted(f for f in self.axes.model if not any(f in dims for dims in own.values()))
        if unused:
            raise ValueError(f"axes.model: no arch swept ({', '.join(self.axes.archs)}) has {', '.join(unused)}")

    def _check_task_variant(self, label: str, variant, where: str) -> None:
        for n in self.axes.n_for(variant.setup):
            try:
                variant_task(self, variant, n)
            except ValidationError as e:
                first = e.errors()[0]
                raise ValueError(f"{where}: {'.'.join(map(str, first['loc'])) or self.task}: "
                                 f"{first['msg'].removeprefix('Value error, ')} (task {self.task}, setup {label}, n {n})") from None

    def _check_overrides(self) -> None:
        setups = TASKS[self.task][0].setups()
        for i, rule in enumerate(self.training_overrides):
            # Archs are checked by their type; a known arch or setup the axes leave out is
            # no error (a rule then applies to nothing: a spec narrowed keeps its rules).
            where = f"training_overrides[{i}]"
            bad = [v for v in rule.setups or [] if v not in setups]
            if bad:
                raise ValueError(f"{where}.setups: {', '.join(bad)} is not a setup of {self.task} ({', '.join(setups)})")
            if not rule.model_dump(exclude=set(SELECTORS), exclude_none=True):
                raise ValueError(f"{where}: sets no training field (`icr-sweep schema` lists them under TrainingSpec)")
        swept_n = self.axes.all_n()
        for i, rule in enumerate(self.training_overrides):
            unswept = [v for v in rule.n or [] if v not in swept_n]
            if unswept:
                raise ValueError(f"training_overrides[{i}].n: no setup sweeps n {', '.join(map(str, unswept))} "
                                 f"(axes.n: {', '.join(map(str, swept_n))}); the rule would apply to nothing")
        for arch, setup in itertools.product(self.axes.archs, self.axes.setups):
            for n in self.axes.n_for(setup):
                self._check_override(arch, setup, n)

    def _check_override(self, arch: str, setup: str, n: int) -> None:
        try:
            t = self.training_for(arch, setup, n)
        except ValidationError as e:
            msg = e.errors()[0]["msg"].removeprefix("Value error, ")
            raise ValueError(f"training_overrides: for {arch} with {setup} at n {n}: {msg}") from None
        if t.warmup_samples >= t.samples:
            raise ValueError(f"training_overrides: for {arch} with {setup} at n {n}, warmup_samples "
                             f"({t.warmup_samples}) must be below samples ({t.samples})")

    def training_for(self, arch: str, setup: str, n: int) -> "TrainingSpec":
        """The training protocol of the trials of `arch` in `setup` at size `n`:
        `training` with the overrides that name them (or leave that selector out)
        applied in order."""
        fields = self.training.model_dump()
        for rule in self.training_overrides:
            if all(chosen is None or value in chosen for chosen, value in
                   ((rule.archs, arch), (rule.setups, setup), (rule.n, n))):
                fields.update(rule.model_dump(exclude=set(SELECTORS), exclude_none=True))
        return TrainingSpec.model_validate(fields) if self.training_overrides else self.training

    def storage_uri(self) -> str:
        """The storage path as Ray Tune takes it: a URI as given, a local path made absolute."""
        return self.storage if "://" in self.storage else str(Path(self.storage).expanduser().resolve())

    def run_dir(self) -> str:
        return f"{self.storage_uri().rstrip('/')}/{self.name}"

    def trial_count(self) -> int:
        """How many trials the spec runs, computed without building the trials."""
        a = self.axes
        per_model = sum(len(a.n_for(s)) for s in a.setups) * math.prod(len(v) for v in a.task.values()) * len(a.seeds)
        models = {arch: len(model_variants(arch, a.sizes, a.model_axes(arch))) for arch in a.archs}
        if self.search.method == "optuna":  # a searched arch: num_samples per cell; a fixed one: one per rate
            return sum((len(self.lr.values(arch)) or self.search.num_samples) * models[arch] for arch in a.archs) * per_model
        return sum(len(self.lr.values(arch)) * models[arch] for arch in a.archs) * per_model

    def warnings(self) -> list[str]:
        count = self.trial_count()
        if count > PLAUSIBLE_TRIALS:
            return [f"the spec expands to {count:,} trials (more than {PLAUSIBLE_TRIALS:,}); check its axes and lr lists"]
        return []


def run_spec(run_dir: Path | str) -> Optional["SweepSpec"]:
    """The spec a run directory (local or remote) was launched with, or None where
    it holds none; SpecError naming the file when it is damaged."""
    from orchestrator.rundir import RecordError, spec_location, spec_record  # pandas: not for `validate`

    try:
        stored = spec_record(run_dir)
    except RecordError as e:
        raise SpecError(str(e)) from None
    if stored is None:
        return None
    try:
        return stored_spec(stored)
    except SpecError as e:
        raise SpecError(f"{spec_location(run_dir)} is damaged ({e})") from None


def stored_spec(data: dict) -> "SweepSpec":
    """A spec as a run directory stored it, validated by today's schema; SpecError
    with the first problem where it no longer validates."""
    try:
        return SweepSpec.model_validate(_stored_before_family_was_the_tasks(data))
    except ValidationError as e:  # the first problem, with its field path (an unknown key names itself)
        raise SpecError(format_errors(e, "the spec").splitlines()[0].removeprefix("the spec: ")) from None
    except (ValueError, KeyError, TypeError) as e:
        problem = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise SpecError(f"{type(e).__name__}: {problem}") from None


def plan_of_record(stored: dict) -> Optional[dict]:
    """The plan of a run launched before plans were stored (orchestrator.rundir's
    plan.json), from its stored spec; None where today's schema cannot read it."""
    try:
        return plan(stored_spec(stored))
    except SpecError:
        return None


def _stored_before_family_was_the_tasks(data: dict) -> dict:
    """A stored spec as it loads today: runs launched while axes.family defaulted
    to binary for every task stored it for tasks without graphs too."""
    axes = data.get("axes") if isinstance(data, dict) else None
    task = TASKS.get(data.get("task", DEFAULT_TASK)) if isinstance(data, dict) else None
    if isinstance(axes, dict) and task and not task[0].has("family") and "family" in axes:
        data = {**data, "axes": {k: v for k, v in axes.items() if k != "family"}}
    return data


class SpecError(ValueError):
    """A spec that cannot be used; the message names the file, field path and problem."""


def _path(loc) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else f".{part}" if out else str(part)
    return out or "(top level)"


def _allowed_keys(loc) -> list[str]:
    """The field names of the spec model at `loc` (for unknown-key errors)."""
    model = SweepSpec
    for part in loc[:-1]:
        if isinstance(part, int):
            continue  # an item of a list of sections: the section's model
        field = model.model_fields.get(part) if isinstance(part, str) else None
        section = _section(field.annotation) if field is not None else None  # a section, or a list of them
        if section is None:
            return []
        model = section
    return list(model.model_fields)


def format_errors(error: ValidationError, source: str) -> str:
    lines = []
    for err in error.errors():
        loc = [p for p in err["loc"] if not (isinstance(p, str) and "[" in p)]  # drop union branch tags
        msg = err["msg"]
        if err["type"] == "extra_forbidden":
            allowed = _allowed_keys(loc)
            msg = "unknown key" + (f"; allowed keys: {', '.join(allowed)}" if allowed else "")
        elif err["type"] == "value_error":
            msg = msg.removeprefix("Value error, ")  # our own messages name the bad value
            field, sep, rest = msg.partition(": ")
            if sep and loc == ["axes"] and field in AxesSpec.model_fields:  # a check of axes against the task
                loc, msg = ["axes", field], rest
        elif err["type"] == "model_type":  # a section given as something else ("lr: 1e-3")
            keys = _allowed_keys(loc + ["?"])
            msg = (f"a mapping{' of ' + ', '.join(keys) if keys else ''}, got {err['input']!r}"
                   + _yaml_number_hint(err["input"]))
        elif "input" in err and err["type"] != "missing":
            msg += f" (got {err['input']!r})" + _yaml_number_hint(err["input"])
        if not loc:  # a check across fields: its message names the field it is about
            match = re.match(r"^((?:axes|training|resources|search|lr)\.\w+ with \w+|(?:axes|training|resources|search|lr)\.\w+): (.*)$", msg, re.S)
            if match:
                lines.append(f"{source}: {match.group(1)}: {match.group(2)}")
                continue
        lines.append(f"{source}: {_path(loc)}: {msg}")
    return "\n".join(dict.fromkeys(lines))


def _yaml_number_hint(value) -> str:
    """YAML 1.1 reads 1e-3 as text (it wants 1.0e-3): say so where a text is a number."""
    if isinstance(value, str):
        try:
            float(value)
        except ValueError:
            return ""
        return f"; YAML reads {value} as text, write it with a point (1.0e-3)"
    return ""


class _SpecLoader(yaml.SafeLoader):
    """YAML for specs: no aliases (an alias bomb expands exponentially once
    validated), and a repeated key is an error instead of a silent overwrite."""

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise yaml.constructor.ConstructorError(
                None, None, f"aliases (*{event.anchor}) are not allowed in a spec; write the value out", event.start_mark
            )
        return super().compose_node(parent, index)

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            if key in seen:
                raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep)


def load_spec(path: Path | str) -> SweepSpec:
    """Reads and validates a YAML spec; raises SpecError with every problem found."""
    path = Path(path)
    if not path.is_file():
        raise SpecError(f"{path}: no such spec file")
    size = path.stat().st_size
    if size > MAX_SPEC_BYTES:
        raise SpecError(f"{path}: {size:,} bytes is not a spec (specs are a few hundred bytes; the limit is {MAX_SPEC_BYTES:,})")
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as e:
        raise SpecError(f"{path}: not UTF-8 text (byte {e.start}); a spec is a YAML file") from None
    if "\x00" in text:
        raise SpecError(f"{path}: a binary file (it holds NUL bytes); a spec is a YAML file")
    try:
        data = yaml.load(text, Loader=_SpecLoader)
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark
        raise SpecError(f"{path}:{mark.line + 1}:{mark.column + 1}: not valid YAML: {e.problem}") from None
    except yaml.YAMLError as e:
        raise SpecError(f"{path}: not valid YAML: {e}") from None
    if not isinstance(data, dict):
        raise SpecError(f"{path}: the spec must be a mapping of keys (name, axes, ...), got {type(data).__name__}")
    try:
        return SweepSpec.model_validate(data)
    except ValidationError as e:
        raise SpecError(format_errors(e, str(path))) from None
