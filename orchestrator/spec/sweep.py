"""The sweep spec: its sections (sections.py) checked against each other, the
task, the models they build and the grid they expand to (orchestrator/grid.py)."""

import itertools
import math
from pathlib import Path
from typing import Union

from pydantic import Field, ValidationError, field_validator, model_validator

from orchestrator.grid import model_variants, task_variants, variant_task
from orchestrator.spec.sections import (SELECTORS, STORAGE_SCHEMES, AxesSpec, LearningRateSpec, ResourcesSpec,
                                        SearchSpec, Section, TrackingSpec, TrainingOverride, TrainingSpec,
                                        is_variant_list, no_bool_as_number, scheme_typo)
from workloads.metrics import METRICS
from workloads.models.config import preset
from workloads.tasks import DEFAULT_TASK, TASKS

# A spec that expands to more trials than this gets a warning: likely a typo.
PLAUSIBLE_TRIALS = 2_000


class SweepSpec(Section):
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", max_length=255,  # a file name's limit: the run directory
                      description="the run directory's name")
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
                   if (isinstance(axes, dict) or is_variant_list(axes)) and arch not in self.axes.archs]
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
            no_bool_as_number(f"axes.task.{field}", fields[field], self.axes.task[field])
        where = "axes.task" if self.axes.task else "task_params"
        for label, variant in task_variants(self.axes.setups, self.axes.task).items():
            self._check_task_variant(label, variant, where)
        return self

    def _check_model_dimensions(self) -> None:
        """A dimension given for an arch that has no layer for it is refused by name
        (as `train --dim` refuses it); one given for every arch must fit one of them."""
        per_arch = any(isinstance(v, dict) or is_variant_list(v) for v in self.axes.model.values())
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

    def rates_not_given(self) -> list[str]:
        """Each architecture the sweep trains that `lr:` leaves out, with the rate it
        trains at and why: the paper's rule (1e-3 for the Transformer, 3e-4 for Mamba
        and the hybrid) or the mixer's own default (its package registers it)."""
        from workloads.models.config import DEFAULT_LR, PAPER_ARCHS
        from workloads.naming import short_float

        out = []
        for arch in self.axes.archs:
            if arch in self.lr.model_fields_set:
                continue
            why = ("the paper's rule: 1e-3 for Transformers, 3e-4 for Mamba and the hybrid" if arch in PAPER_ARCHS
                   else "its mixer's own default, not a rate of the paper's")
            out.append(f"{arch} at {short_float(DEFAULT_LR[arch])} ({why})")
        return out

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


