"""`validate` and `plan`: a spec checked, and the trials it would run with their
memory, GPU share and projected wall time; nothing is started."""

import json
from pathlib import Path
from typing import Optional

import typer

from orchestrator.cli.common import ListFormat, app, fail, print_table, spec_or_exit


@app.command("validate")
def validate(spec: Path = typer.Argument(..., metavar="SPEC", help="sweep spec (YAML)")):
    """Check a sweep spec; exit 0 when it is valid."""
    s = spec_or_exit(spec)
    if getattr(s, "kind", None) == "evaluation":
        typer.echo(f"{spec}: valid (evaluation, {s.trial_count()} trials, results in {s.run_dir()})")
        return
    typer.echo(f"{spec}: valid ({s.search.method}, results in {s.run_dir()})")
    _rates_not_given(s)


def _rates_not_given(s) -> None:
    """Says which rate each architecture the spec's `lr:` leaves out trains at, and why."""
    left = s.rates_not_given()
    if left:
        typer.echo("lr: not given for " + "; ".join(left))


@app.command("plan")
def plan(
    spec: Path = typer.Argument(..., metavar="SPEC", help="sweep spec (YAML)"),
    format: ListFormat = typer.Option("table", "--format"),
    device_name: Optional[str] = typer.Option(
        None, help="the device to project the wall time on, as bench/bench_sweep.py names it (cpu, or a GPU's "
        "name such as 'NVIDIA H100 80GB HBM3') [default: this machine's first GPU, or cpu]"),
    devices: Optional[float] = typer.Option(None, help="GPUs (or CPUs) to project on [default: this machine's]"),
    rates: Optional[Path] = typer.Option(None, help="measured rates to project from [default: "
                                         "bench/results/sweep_<device>.json]"),
):
    """Show the trials a spec would run, with each trial's estimated peak GPU memory
    and GPU share, warnings for trials that would not fit their share, and the
    sweep's projected wall time from measured rates (bench/bench_sweep.py)."""
    from orchestrator.arrays import members_per_array
    from orchestrator.grid import shape_trials

    s = spec_or_exit(spec)
    if getattr(s, "kind", None) == "evaluation":
        return _plan_evaluation(s, format, device_name)
    # What a trial gets where it runs: on this machine unless --device-name names
    # another (device auto runs on CPU where there is no GPU).
    target = device_name or next(iter(local_gpus()), "cpu")
    s, measured_on = _packed_as_measured(s, device_name, rates)
    on_gpu = s.resources.device == "cuda" or (s.resources.device == "auto" and target != "cpu")
    rows, shares = _rows(s, on_gpu)
    fuse = members_per_array(s.resources, on_gpu, shape_trials(s))
    if fuse > 1 and s.search.method == "grid":
        _in_arrays(s, rows, shares, fuse, on_gpu)
    for row in rows:
        if on_gpu:
            row["gpus"], row["gpu_mem_gb"] = shares[row["name"]][0], round(shares[row["name"]][1], 1)
        else:
            row["cpus"] = s.resources.cpus_per_trial
    if format == "json":
        typer.echo(json.dumps(rows, indent=1))
        return
    _print_plan(s, rows, shares, fuse, on_gpu, device_name, devices, rates, measured_on)


def _packed_as_measured(s, device_name: Optional[str], rates: Optional[Path]):
    """The spec, and for `gpu_memory_gb: auto` with another device named, that
    device's GPU memory as its rates file recorded it (the spec as it is where none
    did), and the device it came from."""
    from orchestrator.projection import RatesError, load_rates, rates_file

    if s.resources.gpu_memory_gb != "auto" or not device_name or device_name == "cpu":
        return s, None
    try:
        record = load_rates(rates or rates_file(device_name))
    except RatesError:
        return s, None  # the projection line says what is wrong with the file
    if record is None or record.device != device_name or not record.gpu_memory_gb:
        return s, None
    resources = s.resources.model_copy(update={"gpu_memory_gb": record.gpu_memory_gb})
    return s.model_copy(update={"resources": resources}), device_name


def _rows(s, on_gpu: bool) -> tuple[list[dict], dict]:
    """The plan's rows (a grid's trials, or an Optuna spec's cells) and each one's GPU share."""
    from orchestrator.grid import cell_budget, cell_name, cell_rates, cells, expand, shape_trials
    from orchestrator.packing import gpu_share

    rows, shares = [], {}
    if s.search.method == "grid":
        for t in expand(s):
            rows.append(dict(name=t.name, arch=t.model.arch, setup=t.setup, size=t.model.size, n=t.task.n,
                             **_task_columns(t.task), lr=t.train.lr, seed=t.train.seed, samples=t.train.samples,
                             config=t.model_dump(mode="json")))
            shares[t.name] = gpu_share(s.resources, t) if on_gpu else None
    else:
        for cell, shape in zip(cells(s), shape_trials(s)):
            arch, setup, size, n, seed = cell
            d, fixed, budget = getattr(s.lr, arch), cell_rates(s, cell), cell_budget(s, cell)
            name = cell_name(cell)
            rows.append(dict(name=name, arch=arch, setup=setup, size=size, n=n, **_task_columns(shape.task),
                             lr=", ".join(f"{v:g}" for v in fixed) if fixed else f"{d.distribution}({d.low:g}, {d.high:g})",
                             seed=seed, trials=budget, samples=shape.train.samples * budget))
            shares[name] = gpu_share(s.resources, shape) if on_gpu else None
    return rows, shares


def _print_plan(s, rows, shares, fuse, on_gpu, device_name, devices, rates, measured_on=None) -> None:
    from orchestrator.packing import gpu_memory_gb, gpu_memory_said, memory_warnings

    print_table([{k: v for k, v in r.items() if k != "config"} for r in rows])
    _rates_not_given(s)
    n_trials = sum(r.get("trials", 1) for r in rows)
    typer.echo(f"{n_trials} trials, {sum(r['samples'] for r in rows):,} training samples in all -> {s.run_dir()}")
    if not on_gpu and s.resources.device == "auto":
        typer.echo(f"device auto, and {'this machine has' if device_name is None else device_name + ' is'} no GPU: "
                   f"each trial runs on CPU with {s.resources.cpus_per_trial:g} CPU(s); --device-name "
                   "'NVIDIA A100-SXM4-40GB' (say) shows the GPU share each gets on a GPU machine")
    if fuse > 1:
        _say_arrays(s, rows, fuse, on_gpu)
    if on_gpu:
        typer.echo(f"gpu_mem_gb: estimated peak GPU memory of a training step (workloads/memory.py), "
                   f"against {gpu_memory_said(s.resources, measured_on)}")
        for warning in memory_warnings(gpu_memory_gb(s.resources), shares):
            typer.secho(f"warning: {warning}", fg=typer.colors.YELLOW, err=True)
    typer.echo(_projection_line(s, device_name, devices, rates))


def _in_arrays(s, rows: list[dict], shares: dict, fuse: int, on_gpu: bool) -> None:
    """Each grid trial's array (orchestrator/arrays.py) in its row, and on a GPU the
    share its array asks for and the array's memory (workloads.memory.array_estimate)."""
    from orchestrator.arrays import arrays, member_names
    from orchestrator.packing import gpu_share
    from workloads.config import TrialConfig

    for array in arrays([r["config"] for r in rows], fuse):
        k = len(array["members"])
        share = gpu_share(s.resources, TrialConfig.model_validate(array["members"][0]), members=k) if on_gpu else None
        for name in member_names(array):
            next(r for r in rows if r["name"] == name)["array"] = f"{array['name']} ({k})"
            shares[name] = share


def _say_arrays(s, rows: list[dict], fuse: int, on_gpu: bool) -> None:
    if s.search.method == "grid":
        what = f"{len(rows)} trials run as {len({r['array'] for r in rows})} trial arrays of at most {fuse}"
    else:
        what = f"a cell's trials are asked for in arrays of at most {fuse}, with its other seeds' trials"
    per = ", its GPU share the array's (gpu_mem_gb: its members' activations and state, one worker)" if on_gpu else ""
    typer.echo(f"resources.fuse {s.resources.fuse}: {what}, each array one Tune trial whose members train as one "
               f"model{per}; each member keeps its own trial directory (docs/gpu.md). The projection below takes "
               "a member's rate in arrays of its size where the rates hold one (bench/bench_sweep.py --fuse K), "
               "else counts the members as separate trials, and says how many classes")


def local_gpus() -> list[str]:
    """The names of this machine's GPUs, as nvidia-smi gives them (none without it)."""
    from orchestrator.packing import nvidia_smi

    return nvidia_smi("name")


def _projection_line(s, device_name: Optional[str], devices: Optional[float], rates: Optional[Path]) -> str:
    """'projected wall time: ...' from the measured rates of the device the spec would run on."""
    import os

    import math

    from orchestrator.projection import RatesError, load_rates, project, rates_file, spec_trials

    if devices is not None and not (math.isfinite(devices) and devices > 0):
        fail(f"--devices: a positive number of GPUs or CPUs, got {devices:g}")
    gpus = local_gpus() if s.resources.device != "cpu" and device_name is None else []
    device = device_name or (gpus[0] if gpus else "cpu")
    on_gpu = device != "cpu"
    count = devices or (len(gpus) or 1 if on_gpu else os.cpu_count() or 1)
    unit = "GPU" if on_gpu else "CPU"
    path = rates or rates_file(device)
    try:
        record = load_rates(path)
    except RatesError as e:
        fail(f"--rates {e}")
    if record is None:
        return (f"projected wall time: unknown; no measured rates for {device} in {path} "
                f"(`python bench/bench_sweep.py --device {'cuda' if on_gpu else 'cpu'}` on that device writes them)")
    if record.device != device:
        fail(f"--rates {path} was measured on {record.device}, not on {device}: a projection for one device from "
              f"another's rates would be wrong; give --device-name {record.device!r} or that device's rates")
    try:
        p = project(spec_trials(s, on_gpu), record.classes, count)
    except ValueError as e:
        return f"projected wall time: unknown; {e} ({path})"
    scaled = ", the others scaled by sample length from the nearest measured class" if p.scaled else ""
    return (f"projected wall time: {p.describe()} on {count:g} {unit} ({device}), from the rates in {path}"
            f"{scaled}; evaluation excluded")


def _task_columns(task) -> dict:
    """The task of a plan's row: its name and its other fields, as the trial's task
    config holds them (task_params, axes.task or the task's defaults)."""
    return {"task": task.name, **{field: getattr(task, field) for field in type(task).parameters()}}


def _plan_evaluation(s, format, device_name: Optional[str]) -> None:
    """`plan` of an evaluation spec: its trials, each with the GPU share (or CPUs) it
    asks for; no projection (no rates are measured for pretrained models)."""
    target = device_name or next(iter(local_gpus()), "cpu")
    on_gpu = s.resources.device == "cuda" or (s.resources.device == "auto" and target != "cpu")
    rows = [dict(name=e.name, arch=e.model.arch, size=e.model.size, condition=e.setup, questions=e.task.n,
                 **({"gpus": s.resources.gpus_per_trial} if on_gpu else {}), cpus=s.resources.cpus_per_trial)
            for e in s.evaluations()]
    if format == "json":
        typer.echo(json.dumps(rows, indent=1))
        return
    print_table(rows)
    where = f"{s.resources.gpus_per_trial:g} GPU each" if on_gpu else "on CPU"
    typer.echo(f"{len(rows)} evaluations, {where}; no wall-time projection (none is measured for pretrained models)")
