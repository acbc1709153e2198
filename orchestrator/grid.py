"""The grid a spec sweeps: its task and model variants, its cells (the trials only
a learning rate tells apart) and its trials, each built by `trial_config`, the
builder `icr-sweep train` uses too. The variant helpers take plain data (the axes'
lists); the rest read a validated SweepSpec."""

from __future__ import annotations

import itertools
from typing import NamedTuple

from workloads.config import TrialConfig, trial_config
from workloads.models import ModelConfig, preset
from workloads.naming import cell_name as _cell_name
from workloads.naming import field_label, joined
from workloads.tasks import task_config


class TaskVariant(NamedTuple):
    setup: str  # the task's setup
    label: str  # the task fields' label (seqlen64), empty without task axes
    fields: dict  # the task fields it sets


class ModelVariant(NamedTuple):
    size: str  # the preset's size
    fields: dict  # the model dimensions it replaces
    config: ModelConfig


class Cell(NamedTuple):
    arch: str
    setup: str  # a label of task_variants (vanilla-seqlen64)
    size: str  # a label of model_variants (tiny-dstate4)
    n: int
    seed: int


def task_variants(setups: list[str], task_axes: dict[str, list]) -> dict[str, TaskVariant]:
    """{setup label: variant} for every setup and, with task axes, every
    combination of their values (vanilla-seqlen64)."""
    out = {}
    for setup in setups:
        for values in itertools.product(*task_axes.values()):
            fields = dict(zip(task_axes, values))
            label = field_label(fields)
            out[joined(setup, label)] = TaskVariant(setup, label, fields)
    return out


def model_variants(arch: str, sizes: list[str], dims: dict[str, list[int]] | list[dict[str, int]]) -> dict[str, ModelVariant]:
    """The models of `arch` swept, by size label: with model dimensions `dims` as a
    dict of lists, each size's preset with each combination of their values
    (tiny-dstate4-expand1); as a list of dicts, each size's preset with each dict's
    fields ({} the preset itself, tiny; {d_state: 1, n_layers: 4}, tiny-dstate1-nlayers4).
    A dimension the architecture has no layer for (d_state of a Transformer, n_heads
    of Mamba) is not swept for it: the variants would be one model trained twice.
    Raises ValueError (or ValidationError) for a variant that is no valid model."""
    out = {}
    for size in sizes:
        base = preset(arch, size)
        for fields in _variant_fields(dims, base.dimensions):
            config = base.variant(fields)
            out[config.size] = ModelVariant(size, fields, config)
    return out


def _variant_fields(dims, known: set[str]) -> list[dict]:
    """Each variant's fields, those of `known` dimensions: the listed ones, or the
    crossing of the dimensions' lists."""
    if isinstance(dims, list):
        variants = [{k: v for k, v in fields.items() if k in known} for fields in dims]
        return list({tuple(f.items()): f for f in variants}.values())  # a field dropped may leave twins
    own = {k: v for k, v in dims.items() if k in known}
    return [dict(zip(own, values)) for values in itertools.product(*own.values())]


def _task_variant(spec, setup: str) -> TaskVariant:
    return task_variants(spec.axes.setups, spec.axes.task).get(setup, TaskVariant(setup, "", {}))


def variant_task(spec, variant: TaskVariant, n: int):
    """The task config of a task variant at size n, with the spec's task parameters."""
    return task_config(spec.task, n, variant.setup, **spec.task_params, **variant.fields)


def cell_task(spec, setup: str, n: int):
    """The task config of a cell; `setup` is a label of task_variants (or a bare setup)."""
    return variant_task(spec, _task_variant(spec, setup), n)


def cell_model(spec, arch: str, size: str) -> ModelConfig:
    """The model of a cell; `size` is a label of model_variants."""
    return model_variants(arch, spec.axes.sizes, spec.axes.model_axes(arch))[size].config


def cells(spec) -> list[Cell]:
    """Every cell of the grid, in a stable order."""
    a = spec.axes
    setups = task_variants(a.setups, a.task)
    return [Cell(arch, setup, size, n, seed) for arch in a.archs for setup, variant in setups.items()
            for size in model_variants(arch, a.sizes, a.model_axes(arch)) for n in a.n_for(variant.setup)
            for seed in a.seeds]


def cell_name(cell: Cell) -> str:
    """A cell's name, as `plan` lists it and an Optuna study is called: mamba-cot-0.5M-n16-s0."""
    return _cell_name(*cell)


def trial_for(spec, arch: str, setup: str, size: str, n: int, seed: int, lr: float) -> TrialConfig:
    """The trial of a cell at learning rate `lr`."""
    task = _task_variant(spec, setup)
    model = model_variants(arch, spec.axes.sizes, spec.axes.model_axes(arch))[size]
    device = "cpu" if spec.resources.device == "cpu" else "auto"
    return trial_config(arch, model.size, variant_task(spec, task, n), lr=lr, dims=model.fields, task_label=task.label,
                        seed=seed, device=device, **spec.training_for(arch, task.setup, n).model_dump())


def expand(spec) -> list[TrialConfig]:
    """Every trial of a grid spec: the cross product of the axes and the lr rule."""
    if spec.search.method != "grid":
        raise ValueError("an optuna spec has no fixed trial list; see cells()")
    return [trial_for(spec, *cell, lr) for cell in cells(spec) for lr in spec.lr.values(cell.arch)]


def cell_rates(spec, cell: Cell) -> list[float]:
    """The fixed learning rates of a cell of an Optuna spec: those of its arch when the
    spec gives it a value or a list (its cells then run each once, as a grid would,
    beside the searched archs); empty when its rate is searched."""
    return spec.lr.values(cell.arch)


def cell_budget(spec, cell: Cell) -> int:
    """The trials an Optuna spec runs in a cell: search.num_samples where the rate is
    searched, one per fixed rate otherwise."""
    return len(cell_rates(spec, cell)) or spec.search.num_samples


def shape_trials(spec) -> list[TrialConfig]:
    """Every trial of a grid spec, or one trial per cell of an Optuna spec (at its
    range's low learning rate, or its first fixed one: the rate changes no shape,
    memory or speed)."""
    if spec.search.method == "grid":
        return expand(spec)
    return [trial_for(spec, *cell, (cell_rates(spec, cell) or [getattr(spec.lr, cell.arch).low])[0])
            for cell in cells(spec)]


def planned_trials(spec) -> dict[str, dict]:
    """The trials a grid spec runs, by name, as the configs stored with them
    (an Optuna spec's trial names are not known in advance: empty)."""
    if spec.search.method != "grid":
        return {}
    return {t.name: t.model_dump(mode="json") for t in expand(spec)}


def plan(spec) -> dict:
    """What launch stores beside the spec (orchestrator.rundir's plan.json): the
    search method, the number of trials, a grid's trials by name, and what chooses
    each cell's rate (the search's metric, mode and tie-break, as the spec resolves them)."""
    search = spec.search
    return {"method": search.method, "trial_count": spec.trial_count(), "trials": planned_trials(spec),
            "chosen_by": [search.metric, search.mode, search.ties_by]}


def planned_costs(spec) -> list[tuple[tuple, int, float]]:
    """Each planned trial's (class: arch, size, setup, n; samples; cost of a sample,
    `sample_cost`): what the progress view's time left weighs a trial by, at the
    speeds it measures."""
    if spec.search.method == "grid":
        planned = [(t, 1) for t in expand(spec)]
    else:
        planned = [(t, cell_budget(spec, cell)) for cell, t in zip(cells(spec), shape_trials(spec))]
    return [(cost_class(t), t.train.samples, sample_cost(t)) for t, count in planned for _ in range(count)]


def cost_class(trial) -> tuple:
    """What sets a trial's speed: its model and its task's shape."""
    return (trial.model.arch, trial.model.size, trial.setup, trial.task.n)


def sample_cost(trial) -> float:
    """A rough relative cost of one training sample: its length times the model's
    width and depth, times the recurrent mixer's measured premium on CPU."""
    m = trial.model
    factor = m.mixer.cpu_cost if m.n_recurrent_layers else 1
    return trial.task.longest_sample * m.d_model * m.n_layers * factor


def planned_work(spec) -> tuple[int, int]:
    """(trials, training samples) the sweep runs in all: a grid's trials, an Optuna
    spec's trial budget per cell (the progress view's denominators)."""
    if spec.search.method == "grid":
        trials = expand(spec)
        return len(trials), sum(t.train.samples for t in trials)
    budgets = [(cell_budget(spec, cell), trial) for cell, trial in zip(cells(spec), shape_trials(spec))]
    return sum(n for n, _ in budgets), sum(n * trial.train.samples for n, trial in budgets)
