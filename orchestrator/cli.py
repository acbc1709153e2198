"""The `icr-sweep` command line. Ray is imported only by the sweep commands that need it."""

import json
import os
import sys
from pathlib import Path
from typing import Literal, Optional

import typer

from workloads.config import Device, Precision, TrainConfig
from workloads.models.config import DEFAULT_LR, Arch
from workloads.naming import significant
from workloads.tasks import DEFAULT_TASK, TASKS, task_config

Format = Literal["text", "jsonl"]
ListFormat = Literal["table", "json"]

app = typer.Typer(
    help="Sweeps of in-context retrieval experiments (first: the ICLR 2025 paper 'RNNs are not Transformers (Yet)') on Ray Tune.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    # Help texts are plain text: "[default: ...]" must not be read as rich markup and vanish.
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(asked: bool) -> None:
    if asked:
        from importlib.metadata import version

        typer.echo(f"icr-sweep {version('icr-sweep')}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                 help="print the installed version and exit"),
) -> None:
    """Sweeps of in-context retrieval experiments (first: the ICLR 2025 paper 'RNNs are not Transformers (Yet)') on Ray Tune."""


def _fail(message: str) -> None:
    typer.secho(f"error: {message}", fg=typer.colors.RED, err=True)
    raise typer.Exit(2)


def _task_config(task: str, n: int, setup: Optional[str], family: Optional[str], sets: list[str]):
    """The config of `task` from command-line options; exit 2 naming the flag at fault."""
    from pydantic import ValidationError

    if task not in TASKS:
        _fail(f"unknown task {task!r}; known tasks: {', '.join(sorted(TASKS))}")
    fields = {}
    for item in sets:
        key, sep, value = item.partition("=")
        if not (sep and key.strip()):
            _fail(f"--set: {item!r} is not FIELD=VALUE")
        if key.strip() in ("n", "setup", "family"):
            _fail(f"--set: {key.strip()} has a flag of its own, --{key.strip()}")
        fields[key.strip()] = value.strip()
    if not TASKS[task][0].has("family") and family is not None:
        _fail(f"--family: {task} has no graph family")
    try:
        return task_config(task, n, setup, family, **fields)
    except ValidationError as e:
        err = e.errors()[0]
        field = str(err["loc"][0]) if err["loc"] else ""
        flag = f"--{field}" if field in ("n", "setup", "family") else f"--set {field}" if field else f"--set ({task})"
        _fail(f"{flag}: {err['msg'].removeprefix('Value error, ')} (got {err.get('input')!r})")


def _protocol_option(field: str):
    """A `train` option for a field of the training protocol, with TrainConfig's
    default and description: the protocol's defaults are written once, there."""
    info = TrainConfig.model_fields[field]
    return typer.Option(info.default, help=info.description)


FAMILY_OPTION = typer.Option(None, help="the graphs' family, for a task that has one (istree: binary or random) "
                             "[default: the task's]")
SET_OPTION = typer.Option([], "--set", metavar="FIELD=VALUE", help="another field of the task's config, FIELD=VALUE (e.g. ar: keys=64); repeatable")
DIM_OPTION = typer.Option([], "--dim", metavar="FIELD=VALUE", help="a model dimension beyond the preset, FIELD=VALUE (d_model, n_layers, the "
                          "attention layers' n_heads and d_mlp, the mixer's fields: d_state, expand, heads, ...), "
                          "as a spec's axes.model; repeatable")


def _model_dims(arch: str, size: str, dims: list[str]) -> dict[str, int]:
    """--dim's fields, checked against the preset as a spec's axes.model is; exit 2
    naming the flag at fault."""
    from pydantic import ValidationError

    from workloads.models import preset
    from workloads.models.config import MODEL_DIMENSIONS

    try:
        base = preset(arch, size)
    except ValueError as e:
        _fail(f"--size: {e}")
    fields = {}
    for item in dims:
        key, sep, value = (part.strip() for part in item.partition("="))
        if not (sep and key in MODEL_DIMENSIONS and value.isdigit() and int(value) > 0):
            _fail(f"--dim: {item!r} is not FIELD=VALUE with FIELD one of {', '.join(MODEL_DIMENSIONS)} and VALUE a positive integer")
        if key not in base.dimensions:
            _fail(f"--dim: {arch} has no layer with {key}; its dimensions: {', '.join(sorted(base.dimensions))}")
        fields[key] = int(value)
    try:
        base.variant(fields)
    except ValidationError as e:
        _fail(f"--dim: {e.errors()[0]['msg'].removeprefix('Value error, ')}")
    except ValueError as e:
        _fail(f"--dim: {e}")
    return fields


@app.command("show-task")
def show_task(
    task: str = typer.Argument(DEFAULT_TASK, help="a task name (`icr-sweep tasks` lists them)"),
    n: Optional[int] = typer.Option(None, help="the task's size (istree: vertices) [default: 8, or as many as --edges needs]"),
    setup: Optional[str] = typer.Option(None, help="vanilla, cot (istree) or retrieval [default: the task's]"),
    family: Optional[str] = FAMILY_OPTION,
    sets: list[str] = SET_OPTION,
    seed: int = typer.Option(0),
    count: int = typer.Option(3, min=1),
    edges: Optional[str] = typer.Option(
        None, help="istree: render this one graph instead of sampling: edges in input order, e.g. '3-1,5-2,4-1,4-3,2-0'"
    ),
    format: Format = typer.Option("text", "--format"),
):
    """Print samples of a task. In text, tokens the retriever fills are [bracketed]."""
    from workloads.config import SEED_MAX
    from workloads.tasks import build_task
    from workloads.tasks.base import TRAIN_STREAM

    if not 0 <= seed <= SEED_MAX:
        _fail(f"--seed must be in 0..{SEED_MAX} (2^64 - 1), got {seed}")
    if edges is not None and not hasattr(TASKS.get(task, (None, None))[1], "render"):
        _fail(f"--edges renders one graph's sample; {task} has no graphs")
    graph = _parse_edges(edges) if edges is not None else None
    if n is None:
        n = len(graph) + 1 if graph is not None else 8
    t = build_task(_task_config(task, n, setup, family, sets))
    try:
        first = [t.render(graph)] if graph is not None else []
    except ValueError as e:
        _fail(f"--edges: {e}")
    # Streamed in chunks of about 2M tokens: memory stays flat whatever --count and n.
    chunk = max(1, 2_000_000 // t.max_length)
    batches = (t.samples(seed, TRAIN_STREAM, start, min(chunk, count - start)) for start in range(0, count, chunk))
    samples = iter(first) if graph is not None else (s for batch in batches for s in batch)
    for i, s in enumerate(samples):
        if format == "jsonl":
            typer.echo(json.dumps(s))
            continue
        first_eos = s["tokens"].index("EOS") if "EOS" in s["tokens"] else len(s["tokens"])
        shown = [
            f"[{tok}]" if i > first_eos and not sup else tok
            for i, (tok, sup) in enumerate(zip(s["tokens"], s["supervised"]))
        ]
        about = type(t).label_text(s["label"])
        typer.echo(f"# sample {i}: {about}, {len(shown)} tokens")
        typer.echo(" ".join(shown))
        if "targets" in s:  # targets that are not the next input token (mqar)
            typer.echo("targets (index: token, each predicted at the index before): " + " ".join(
                f"{j}:{t}" for j, (t, sup) in enumerate(zip(s["targets"], s["supervised"])) if sup))


def _parse_edges(text: str) -> list[tuple[int, int]]:
    """'3-1,5-2 4-1' -> [(3, 1), (5, 2), (4, 1)]: commas or spaces between edges."""
    out = []
    for item in text.replace(",", " ").split():
        u, sep, v = item.partition("-")
        if not (sep and u.strip().isdigit() and v.strip().isdigit()):
            _fail(f"--edges: {item!r} is not an edge like 3-1")
        out.append((int(u), int(v)))
    if not out:
        _fail("--edges: no edges given")
    return out


@app.command("tasks")
def tasks(format: ListFormat = typer.Option("table", "--format")):
    """List the registered tasks: their setups, what their size n counts, and their
    other parameters (set with --set in show-task and train, task_params in a spec)."""
    rows = []
    for name, (config_cls, task_cls) in sorted(TASKS.items()):
        rows.append(dict(task=name, setups=list(config_cls.setups()), n=config_cls.n_means(),
                         parameters=config_cls.parameters(), about=_first_line(task_cls)))
    if format == "json":
        typer.echo(json.dumps(rows, default=str))
        return
    _print_table([{**r, "setups": ", ".join(r["setups"]),
                   "parameters": ", ".join(f"{k}={v}" for k, v in r["parameters"].items())} for r in rows])


def _first_line(task_cls) -> str:
    """The first paragraph of the task module's docstring, on one line."""
    import sys

    doc = sys.modules[task_cls.__module__].__doc__ or ""
    return " ".join(doc.split("\n\n")[0].split())


@app.command("models")
def models(format: ListFormat = typer.Option("table", "--format")):
    """List the model presets: trainable parameters (the frozen embedding aside),
    the recurrent state a sequence carries (floats, all layers) and the KV cache
    attention layers keep per token."""
    from workloads.models import PRESETS

    rows = [
        dict(arch=arch, size=size, params=cfg.n_params, state_floats=cfg.state_floats,
             kv_floats_per_token=cfg.kv_floats_per_token, d_model=cfg.d_model, n_layers=cfg.n_layers,
             attn_layer_idx=list(cfg.attn_layer_idx), mixer=cfg.mixer.name if cfg.n_recurrent_layers else None)
        for arch, sizes in PRESETS.items()
        for size, cfg in sizes.items()
    ]
    if format == "json":
        typer.echo(json.dumps(rows))
    else:
        for r in rows:
            idx = r.pop("attn_layer_idx")
            r["mixer"] = r["mixer"] or "-"
            r["attention layers"] = "all" if len(idx) == r["n_layers"] else ",".join(map(str, idx)) or "none"
        _print_table(rows)


def _print_table(rows: list[dict]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table()
    for key in rows[0]:
        table.add_column(key, justify="right" if isinstance(rows[0][key], (int, float)) else "left")
    for r in rows:
        table.add_row(*(f"{v:,}" if isinstance(v, int) else str(v) for v in r.values()))
    Console(width=None if sys.stdout.isatty() else 200).print(table)


@app.command("train")
def train(
    arch: Arch = typer.Option(..., help="architecture (`icr-sweep models` lists them)"),
    size: str = typer.Option(..., help="preset: tiny, 0.5M, 1M, 2M"),
    setup: str = typer.Option(..., help="vanilla, cot (istree) or retrieval"),
    n: int = typer.Option(..., help="the task's size (istree: vertices; `icr-sweep tasks` says for each)"),
    out: str = typer.Option(..., help="the trial's directory: params.json, result.json and the checkpoint, as a "
                             "sweep's trial (status, report and load_run read it); the final metrics go to stdout as JSON"),
    task: str = typer.Option(DEFAULT_TASK, help="a task name (`icr-sweep tasks` lists them)"),
    sets: list[str] = SET_OPTION,
    dims: list[str] = DIM_OPTION,
    family: Optional[str] = FAMILY_OPTION,
    samples: int = _protocol_option("samples"),
    lr: Optional[float] = typer.Option(None, help="peak learning rate [default: the architecture's, "
                                       + ", ".join(f"{arch} {significant(rate, 3)}" for arch, rate in DEFAULT_LR.items()) + "]"),
    seed: int = _protocol_option("seed"),
    batch_size: int = _protocol_option("batch_size"),
    warmup_samples: Optional[int] = typer.Option(
        None, help="linear warm-up [default: 10,000 (the paper's), or a tenth of --samples when that is less]"
    ),
    eval_every: int = _protocol_option("eval_every"),
    checkpoint_every_s: float = _protocol_option("checkpoint_every_s"),
    val_samples: int = _protocol_option("val_samples"),
    val_seed: int = _protocol_option("val_seed"),
    eval_batch_size: int = _protocol_option("eval_batch_size"),
    length_groups: int = _protocol_option("length_groups"),
    gen_every_eval: bool = _protocol_option("gen_every_eval"),
    grad_clip: Optional[float] = _protocol_option("grad_clip"),
    device: Device = _protocol_option("device"),
    precision: Precision = _protocol_option("precision"),
    cpus: int = typer.Option(1, min=1, help="threads for torch, OpenMP and numba (resources.cpus_per_trial in a sweep)"),
):
    """Train and evaluate one trial without Ray. Re-running with the same --out resumes it."""
    protocol = {k: v for k, v in locals().items() if k in TrainConfig.model_fields and k != "lr"}  # as data
    if warmup_samples is None:
        protocol["warmup_samples"] = min(TrainConfig.model_fields["warmup_samples"].default, samples // 10)
    config = _trial_of_flags(arch, size, _task_config(task, n, setup, family, sets), lr, _model_dims(arch, size, dims),
                             protocol, out)
    _train_trial(config, Path(out), cpus)


def _trial_of_flags(arch: str, size: str, task_cfg, lr: Optional[float], dims: dict, protocol: dict, out: str):
    """The trial `train`'s flags describe, checked as a sweep checks its trials (the
    model built, its memory, `out` its own and writable); exits naming the flag."""
    from pydantic import ValidationError

    from orchestrator.rundir import RunDirError, check_storage, claim_trial_dir
    from workloads.config import trial_config

    try:
        config = trial_config(arch, size, task_cfg, lr=lr, dims=dims, **protocol)
        claim_trial_dir(out, config.model_dump(mode="json"), config.name)  # `out` as given: Path('') is '.'
        _train_preflight(config)
        check_storage(out, flag="--out")
        Path(out).mkdir(parents=True, exist_ok=True)
    except ValidationError as e:
        _fail(_flag_error(e))
    except (RunDirError, ValueError, OSError) as e:
        _fail(str(e))
    return config


def _train_trial(config, out: Path, cpus: int) -> None:
    """Runs one trial in `out` (resuming from its checkpoint there), as a sweep's trial
    is written; prints its final metrics as JSON, or exits saying why it stopped."""
    from workloads.threads import bound_threads

    bound_threads(cpus)  # before torch starts its pools
    from tqdm import tqdm

    from orchestrator.rundir import TrialFiles, repair_results, rows_unstored
    from workloads.metrics import METRICS
    from workloads.train import CHECKPOINT_FILE, CheckpointError, DiskSpaceError, run_trial

    checkpoint = out / "checkpoint"
    resume = checkpoint if (checkpoint / CHECKPOINT_FILE).exists() else None
    typer.echo(f"{config.name}: {config.train.samples:,} samples -> {out}" + (" (resuming)" if resume else ""), err=True)
    files = TrialFiles(out)  # the files of a sweep's trial, by the same writer
    if resume is None:  # a fresh start (a resume keeps both: its checkpoint is checked to be of this config)
        files.start_afresh()  # rows of a run that never checkpointed
        files.write_config({"trial": config.model_dump(mode="json")})
    bar = tqdm(total=config.train.samples, unit="sample", unit_scale=True, dynamic_ncols=True)

    def on_step(done: int) -> None:
        bar.update(done - bar.n)

    def report(metrics: dict, _checkpoint) -> None:
        shown = {k: metrics[k] for k in ("train_loss", *METRICS) if metrics.get(k) is not None}
        bar.set_postfix({k: f"{v:.3f}" for k, v in shown.items()})
        files.append({k: v for k, v in metrics.items() if k != "config"})

    def on_resume(rows: list[dict]) -> None:  # the rows a kill left out (as a sweep's trial)
        if what := repair_results(out):
            typer.echo(f"{config.name}: {what}", err=True)
        for row in rows_unstored(files.stored_rows(), rows):
            report(row, None)

    stop = _StopSignals()
    try:
        with stop:
            metrics = run_trial(config, report=report, checkpoint_dir=checkpoint, resume_from=resume, on_step=on_step,
                                should_stop=stop.requested, on_resume=on_resume)
    except (CheckpointError, DiskSpaceError) as e:
        _fail(str(e))
    except FloatingPointError as e:  # the loss diverged: a rate too high for the model, most often
        _fail(f"{e}: the training diverged; lower --lr (this trial's: {config.train.lr:g}) or set --grad-clip. "
              f"Its checkpoint, if any, is kept in {checkpoint}")
    finally:
        bar.close()
    if not files.params.exists():  # a directory of an earlier version, resumed
        files.write_config({"trial": config.model_dump(mode="json")})
    if metrics.get("stopped"):
        typer.secho(f"Stopped by {stop.name} at {metrics['samples']:,} samples, checkpointed in {checkpoint}. "
                    "Run the same command to continue.", fg=typer.colors.YELLOW, err=True)
        raise typer.Exit(130)
    typer.echo(json.dumps({k: v for k, v in metrics.items() if k != "config"}))


def _train_preflight(config) -> None:
    """The checks a sweep makes before Ray starts, for the one trial of `train`: the
    device there, the model built and run once, its memory within this machine's."""
    from workloads.preflight import check_models, cpu_memory_problems

    if config.train.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            _fail("--device cuda: torch sees no CUDA GPU here; use --device auto or cpu")
    import torch

    problems = cpu_memory_problems([config], 1)[0] if config.train.device == "cpu" or not torch.cuda.is_available() else []
    problems = problems or check_models([config])  # a model that does not fit is not built
    if problems:
        _fail("; ".join(problems))


class _StopSignals:
    """SIGINT and SIGTERM (Ctrl-C, a cluster's or a spot instance's stop) ask the
    trial to stop at its next step, checkpointed; a second signal stops at once."""

    def __init__(self):
        self.name = None
        self._previous = {}

    def requested(self) -> bool:
        return self.name is not None

    def _handle(self, signum, frame):
        import signal

        if self.name is not None:
            raise KeyboardInterrupt
        self.name = signal.Signals(signum).name
        typer.secho(f"\n{self.name}: stopping after this step with a checkpoint (again to stop at once)",
                    fg=typer.colors.YELLOW, err=True)

    def __enter__(self):
        import signal

        for sig in (signal.SIGINT, signal.SIGTERM):
            self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc):
        import signal

        for sig, handler in self._previous.items():
            signal.signal(sig, handler)


def _flag_error(e) -> str:
    """A validation error of a command's options, in the words of its flags."""
    import re

    err = e.errors()[0]
    msg = err["msg"].removeprefix("Value error, ")
    if err["loc"]:
        return f"--{str(err['loc'][-1]).replace('_', '-')}: {msg} (got {err.get('input')!r})"
    return re.sub(r"\b([a-z]+_[a-z_]+|samples)\b", lambda m: "--" + m.group(1).replace("_", "-"), msg)


def _spec(path: Path, storage: Optional[str] = None):
    """The validated spec (with --storage applied), its warnings printed; exit 2 if invalid."""
    from pydantic import ValidationError

    from orchestrator.spec import SpecError, SweepSpec, format_errors, load_spec

    try:
        spec = load_spec(path)
        if storage is not None:
            spec = SweepSpec.model_validate({**spec.model_dump(), "storage": storage})
    except SpecError as e:
        typer.secho(str(e), fg=typer.colors.RED, err=True)
        raise typer.Exit(2) from None
    except ValidationError as e:
        typer.secho(format_errors(e, "--storage"), fg=typer.colors.RED, err=True)
        raise typer.Exit(2) from None
    for warning in spec.warnings():
        typer.secho(f"warning: {warning}", fg=typer.colors.YELLOW, err=True)
    return spec


@app.command("schema")
def schema():
    """Print the JSON schema of sweep specs (for editor completion of the YAML)."""
    from orchestrator.spec import SweepSpec

    typer.echo(json.dumps(SweepSpec.model_json_schema(), indent=1))


@app.command("validate")
def validate(spec: Path = typer.Argument(..., metavar="SPEC", help="sweep spec (YAML)")):
    """Check a sweep spec; exit 0 when it is valid."""
    s = _spec(spec)
    typer.echo(f"{spec}: valid ({s.search.method}, results in {s.run_dir()})")


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
    from orchestrator.grid import cell_budget, cell_name, cell_rates, cells, expand, shape_trials
    from orchestrator.packing import gpu_share, memory_warnings

    s = _spec(spec)
    on_gpu = s.resources.device != "cpu"
    rows, shares = [], {}
    if s.search.method == "grid":
        for t in expand(s):
            rows.append(dict(name=t.name, arch=t.model.arch, setup=t.setup, size=t.model.size, n=t.task.n,
                             **_task_columns(s), lr=t.train.lr, seed=t.train.seed, samples=t.train.samples,
                             config=t.model_dump(mode="json")))
            shares[t.name] = gpu_share(s.resources, t) if on_gpu else None
    else:
        for cell, shape in zip(cells(s), shape_trials(s)):
            arch, setup, size, n, seed = cell
            d, fixed, budget = getattr(s.lr, arch), cell_rates(s, cell), cell_budget(s, cell)
            name = cell_name(cell)
            rows.append(dict(name=name, arch=arch, setup=setup, size=size, n=n, **_task_columns(s),
                             lr=", ".join(f"{v:g}" for v in fixed) if fixed else f"{d.distribution}({d.low:g}, {d.high:g})",
                             seed=seed, trials=budget, samples=shape.train.samples * budget))
            shares[name] = gpu_share(s.resources, shape) if on_gpu else None
    if on_gpu:
        for row in rows:
            row["gpus"], row["gpu_mem_gb"] = shares[row["name"]][0], round(shares[row["name"]][1], 1)
    if format == "json":
        typer.echo(json.dumps(rows, indent=1))
        return
    _print_table([{k: v for k, v in r.items() if k != "config"} for r in rows])
    n_trials = sum(r.get("trials", 1) for r in rows)
    typer.echo(f"{n_trials} trials, {sum(r['samples'] for r in rows):,} training samples in all -> {s.run_dir()}")
    if on_gpu:
        typer.echo(f"gpu_mem_gb: estimated peak GPU memory of a training step (workloads/memory.py), "
                   f"against {s.resources.gpu_memory_gb:g} GB GPUs (resources.gpu_memory_gb)")
        for warning in memory_warnings(s.resources.gpu_memory_gb, shares):
            typer.secho(f"warning: {warning}", fg=typer.colors.YELLOW, err=True)
    typer.echo(_projection_line(s, device_name, devices, rates))


def _local_gpus() -> list[str]:
    """The names of this machine's GPUs, as nvidia-smi gives them (none without it)."""
    import shutil
    import subprocess

    if not shutil.which("nvidia-smi"):
        return []
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [line.strip() for line in out.splitlines() if line.strip()]


def _projection_line(s, device_name: Optional[str], devices: Optional[float], rates: Optional[Path]) -> str:
    """'projected wall time: ...' from the measured rates of the device the spec would run on."""
    import os

    import math

    from orchestrator.projection import RatesError, load_rates, project, rates_file, spec_trials

    if devices is not None and not (math.isfinite(devices) and devices > 0):
        _fail(f"--devices: a positive number of GPUs or CPUs, got {devices:g}")
    gpus = _local_gpus() if s.resources.device != "cpu" and device_name is None else []
    device = device_name or (gpus[0] if gpus else "cpu")
    on_gpu = device != "cpu"
    count = devices or (len(gpus) or 1 if on_gpu else os.cpu_count() or 1)
    unit = "GPU" if on_gpu else "CPU"
    path = rates or rates_file(device)
    try:
        record = load_rates(path)
    except RatesError as e:
        _fail(f"--rates {e}")
    if record is None:
        return (f"projected wall time: unknown; no measured rates for {device} in {path} "
                f"(`python bench/bench_sweep.py --device {'cuda' if on_gpu else 'cpu'}` on that device writes them)")
    if record.device != device:
        _fail(f"--rates {path} was measured on {record.device}, not on {device}: a projection for one device from "
              f"another's rates would be wrong; give --device-name {record.device!r} or that device's rates")
    try:
        p = project(spec_trials(s, on_gpu), record.classes, count)
    except ValueError as e:
        return f"projected wall time: unknown; {e} ({path})"
    scaled = ", the others scaled by sample length from the nearest measured class" if p.scaled else ""
    return (f"projected wall time: {p.describe()} on {count:g} {unit} ({device}), from the rates in {path}"
            f"{scaled}; evaluation excluded")


def _task_columns(spec) -> dict:
    """The task of a plan's rows: its name, and its graph family where it has one (as
    the trials' task configs hold it: axes.family, task_params or the task's default)."""
    from orchestrator.grid import cell_task

    task = cell_task(spec, spec.axes.setups[0], spec.axes.n[0])
    return {"task": spec.task, **({"family": task.family} if "family" in type(task).model_fields else {})}


def _ray_options(address, temp_dir, dashboard_host, dashboard_port, num_cpus):
    """The embedded Ray's options, checked before anything starts: Ray itself fails
    on a bad host or temp dir only after minutes, or with a traceback."""
    import socket

    if address is None:
        try:
            socket.getaddrinfo(dashboard_host, dashboard_port)
            with socket.socket(socket.getaddrinfo(dashboard_host, None)[0][0]) as probe:
                probe.bind((dashboard_host, 0))
        except (OSError, UnicodeError) as e:
            _fail(f"--dashboard-host {dashboard_host}: not an address of this machine ({getattr(e, 'strerror', None) or e}); "
                  "use 127.0.0.1, or 0.0.0.0 to listen on every interface")
        if temp_dir is not None:
            existing = Path(temp_dir)
            while not existing.exists() and existing != existing.parent:
                existing = existing.parent
            if not existing.is_dir():
                _fail(f"--temp-dir {temp_dir}: {existing} is a file, not a directory")
            if not os.access(existing, os.W_OK):
                _fail(f"--temp-dir {temp_dir}: {existing} cannot be written")
    return dict(address=address, temp_dir=temp_dir, dashboard_host=dashboard_host,
                dashboard_port=dashboard_port, num_cpus=num_cpus)


def _start_ray(opts: dict, spec):
    from orchestrator import tune as sweep

    try:
        ctx, notes = sweep.start_ray(spec, **opts)
        for note in notes:
            typer.secho(note, fg=typer.colors.YELLOW, err=True)
        url = getattr(ctx, "dashboard_url", None)
        if url:
            typer.secho(f"Ray dashboard: http://{url}", fg=typer.colors.GREEN, err=True)
            typer.echo("  It asks for Ray's token: print it with `ray get-auth-token` (kept in ~/.ray/auth_token).", err=True)
        resources, note = sweep.trial_resources(spec, attached=opts["address"] is not None)
    except sweep.ClusterError as e:
        _fail(str(e))
    except Exception as e:  # Ray's own start failed (a timeout, a daemon that died): one line, not its traceback
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        _fail(f"Ray did not start ({type(e).__name__}: {first}); its logs are under --temp-dir "
              f"(default /tmp/ray/session_latest/logs)")
    typer.echo(f"Trials: {note}.", err=True)
    return resources


def _finish(run_dir: str) -> None:
    """Reports the sweep; exits 130 when trials are left to run (interrupted), 1
    when some failed for good, 0 when every planned trial finished."""
    trials = _report(run_dir)
    left = trials[trials["state"].isin(["pending", "interrupted", "running"])]
    if len(left):
        counts = ", ".join(f"{v} {k}" for k, v in sorted(left["state"].value_counts().items()))
        typer.secho(f"The sweep stopped with {len(left)} of {len(trials)} trials unfinished ({counts}). "
                    f"Continue it with:\n  icr-sweep resume {run_dir}", fg=typer.colors.YELLOW, err=True)
        raise typer.Exit(130)
    if _say_failed(trials):
        typer.echo(f"Retry them from their checkpoints with:\n  icr-sweep resume {run_dir}", err=True)
        raise typer.Exit(1)


def _run_locked(run_dir: str, work, fresh: bool = False) -> None:
    """Runs `work()` holding the run directory's lock (local storage; remote storage
    has no lock), then reports. Ctrl-C stops the sweep; the report then says what
    is left and how to resume. A `fresh` launch that ends before any trial started
    (a failed Ray start, a stop seconds in) leaves no run directory behind."""
    import contextlib

    from orchestrator.rundir import RunDirError, RunLock, discard_unstarted
    from orchestrator.storage import is_remote

    lock = contextlib.nullcontext() if is_remote(run_dir) else RunLock(run_dir)
    interrupted = False
    try:
        with lock:
            work()
    except RunDirError as e:
        _fail(str(e))
    except KeyboardInterrupt:
        interrupted = True
    except (SystemExit, typer.Exit):  # a refusal (exit 2) inside work: nothing of the launch is kept
        if fresh:
            discard_unstarted(run_dir)
        raise
    except Exception as e:  # the driver itself failed (a full disk, Tune's state cut short): the trials' files stay
        import errno

        full = isinstance(e, OSError) and e.errno == errno.ENOSPC or "truncated" in str(e)
        typer.secho(f"The sweep's driver stopped: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
                    + ("; the disk is full, or was: free some space before resuming" if full else ""),
                    fg=typer.colors.RED, err=True)
        interrupted = True
    if fresh and discard_unstarted(run_dir):
        typer.secho("Stopped before any trial started: nothing was kept. Launch the spec again to run it.",
                    fg=typer.colors.YELLOW, err=True)
        raise typer.Exit(130)
    if interrupted:
        typer.secho("Interrupted.", fg=typer.colors.YELLOW, err=True)
    _finish(run_dir)


RAY_OPTIONS = dict(
    address=typer.Option(None, help="attach to a running Ray cluster (e.g. auto) instead of starting one"),
    temp_dir=typer.Option(None, help="temp dir of the embedded Ray (default: Ray's)"),
    dashboard_host=typer.Option("127.0.0.1", help="where the embedded Ray's dashboard listens"),
    dashboard_port=typer.Option(8265, min=1, max=65535),
    num_cpus=typer.Option(None, min=1, help="CPUs the embedded Ray may use (default: all)"),
)


@app.command("launch")
def launch(
    spec: Path = typer.Argument(..., metavar="SPEC", help="sweep spec (YAML)"),
    storage: Optional[str] = typer.Option(None, help="override the spec's storage path"),
    address: Optional[str] = RAY_OPTIONS["address"],
    temp_dir: Optional[str] = RAY_OPTIONS["temp_dir"],
    dashboard_host: str = RAY_OPTIONS["dashboard_host"],
    dashboard_port: int = RAY_OPTIONS["dashboard_port"],
    num_cpus: Optional[int] = RAY_OPTIONS["num_cpus"],
):
    """Run a sweep on Ray Tune (embedded local Ray unless --address) and write its report."""
    from orchestrator.rundir import RunDirError, check_launch_dir, check_storage

    s = _spec(spec, storage)
    run_dir = s.run_dir()
    opts = _ray_options(address, temp_dir, dashboard_host, dashboard_port, num_cpus)
    _check_trackers(s)
    try:
        check_storage(run_dir)  # first: it names paths too long to look into
        check_launch_dir(run_dir)
    except RunDirError as e:
        _fail(str(e))

    def work():
        from orchestrator import tune as sweep

        if sweep.holds_sweep(run_dir):
            _fail(f"{run_dir} already holds a sweep; continue it with `icr-sweep resume {run_dir}`, "
                  "or pick another name or --storage")
        _check_optuna_storage(s, run_dir)
        _preflight(s, on_this_cpu=address is None and (s.resources.device == "cpu" or (
            s.resources.device == "auto" and not _local_gpus())), cpus=num_cpus)
        resources = _start_ray(opts, s)
        if resources["gpu"]:
            from orchestrator.packing import gpu_shares, memory_warnings

            for warning in memory_warnings(s.resources.gpu_memory_gb, gpu_shares(s)):
                typer.secho(f"warning: {warning}", fg=typer.colors.YELLOW, err=True)
        typer.echo(f"Sweep {s.name!r} -> {run_dir}", err=True)
        sweep.launch(s, resources)

    _run_locked(run_dir, work, fresh=True)


def _check_trackers(s) -> None:
    """The trackers the spec turns on can take the sweep (orchestrator/tracking.py):
    exit 2 naming the field before Ray starts."""
    from orchestrator.tracking import TrackerError, check_trackers
    from orchestrator.tune import mlflow_uri

    try:
        check_trackers(s.tracking, mlflow_uri(s) if s.tracking.mlflow else None)
    except TrackerError as e:
        _fail(str(e))


def _check_optuna_storage(s, run_dir: str) -> None:
    """An Optuna sweep's study storage opens, and holds no study of this sweep's name
    yet (a new launch would otherwise continue an earlier sweep's studies)."""
    if s.search.method != "optuna":
        return
    from orchestrator.tune import optuna_storage, studies_in_use

    storage = optuna_storage(s, run_dir)
    if storage is None:
        typer.secho("warning: the run directory is remote and search.storage is not set: the Optuna studies live "
                    "in the driver's memory (and its checkpoints) only, out of optuna-dashboard's reach",
                    fg=typer.colors.YELLOW, err=True)
        return
    try:
        taken = studies_in_use(s, storage)
    except Exception as e:  # a driver missing, a host down, a bad path: SQLAlchemy raises many kinds
        _fail(f"search.storage: cannot open the Optuna storage {storage}: {type(e).__name__}: {str(e).splitlines()[0]}")
    if taken:
        _fail(f"search.storage: {storage} already holds studies of a sweep named {s.name!r} ({taken[0]}, ...); "
              f"continue that sweep with `icr-sweep resume`, or rename this one")


def _preflight(s, on_this_cpu: bool, cpus: Optional[int] = None) -> None:
    """Builds and runs each distinct model of the sweep once on the CPU, and holds
    CPU trials' memory against this machine's, before Ray starts: exit 2 naming
    the trials that could not run."""
    import os

    from orchestrator.grid import shape_trials
    from workloads.preflight import check_models, cpu_memory_problems

    trials = shape_trials(s)
    problems, warnings = [], []
    if on_this_cpu:
        slots = int((cpus or os.cpu_count() or 1) // s.resources.cpus_per_trial) or 1
        concurrent = min(slots, s.resources.max_concurrent or slots, len(trials))
        problems, warnings = cpu_memory_problems(trials, concurrent)
    too_big = {p.split(" ", 1)[0] for p in problems}
    problems += check_models([t for t in trials if t.name not in too_big])  # a model that does not fit is not built
    for warning in warnings:
        typer.secho(f"warning: {warning}", fg=typer.colors.YELLOW, err=True)
    if problems:
        more = f"\n  ... and {len(problems) - 10} more" if len(problems) > 10 else ""
        _fail("no trial was started; these could not run:\n  " + "\n  ".join(problems[:10]) + more)


RUN_DIR = typer.Argument(..., metavar="RUN_DIR", help="the sweep's run directory: a path, or a URI such as s3://bucket/prefix/name")


def _run_location(run_dir: str) -> str:
    """The run directory as the commands use it: a URI as given, a path made absolute."""
    from orchestrator.spec import scheme_typo
    from orchestrator.storage import is_remote

    if scheme_typo(run_dir):
        _fail(scheme_typo(run_dir))

    return run_dir.rstrip("/") if is_remote(run_dir) else str(Path(run_dir.removeprefix("file://")).resolve())


@app.command("resume")
def resume(
    run_dir: str = RUN_DIR,
    address: Optional[str] = RAY_OPTIONS["address"],
    temp_dir: Optional[str] = RAY_OPTIONS["temp_dir"],
    dashboard_host: str = RAY_OPTIONS["dashboard_host"],
    dashboard_port: int = RAY_OPTIONS["dashboard_port"],
    num_cpus: Optional[int] = RAY_OPTIONS["num_cpus"],
):
    """Continue an interrupted sweep: finished trials stay, the rest continue from their checkpoints."""
    from orchestrator.rundir import RunDirError, check_storage, spec_location
    from orchestrator.spec import SpecError, run_spec

    run = _run_location(run_dir)
    try:
        s = run_spec(run)
    except SpecError as e:
        _fail(f"{e}; launch the spec again into a new directory (finished trials there are kept as they are)")
    except (RunDirError, OSError) as e:
        _fail(f"{run_dir}: cannot be read ({e})")
    if s is None:
        _fail(f"{run_dir} is not a sweep run directory (no {spec_location(run_dir).rsplit('/', 1)[-1]}, which launch writes)")
    try:
        check_storage(run, flag="place: copy the run directory somewhere writable and resume the copy")
    except RunDirError as e:
        _fail(str(e))
    _check_trackers(s)
    opts = _ray_options(address, temp_dir, dashboard_host, dashboard_port, num_cpus)

    def work():
        from orchestrator import tune as sweep

        if not sweep.can_resume(run) and not sweep.holds_sweep(run):
            _fail(f"{run_dir}: Ray Tune saved no experiment state there yet; launch the spec again")
        resources = _start_ray(opts, s)
        try:
            sweep.resume(run, s, resources, say=lambda line: typer.secho(line, fg=typer.colors.YELLOW, err=True))
        except sweep.ClusterError as e:
            _fail(str(e))

    _run_locked(run, work)


def _read_run(run_dir: str):
    """The run as stored (orchestrator.rundir.Run), read from a local copy when it is remote."""
    from orchestrator.api import read_stored
    from orchestrator.rundir import RunDirError
    from orchestrator.storage import is_remote, local_view

    _require_local_run(run_dir)
    try:
        with local_view(run_dir) as local:
            return read_stored(local, locked=not is_remote(run_dir))
    except (RunDirError, OSError) as e:
        _fail(f"{run_dir}: cannot be read ({e})")


def _require_local_run(run_dir: str) -> None:
    """Refuses a local path that does not exist or is not a directory, by name."""
    from orchestrator.storage import is_remote

    if is_remote(run_dir):
        return
    path = Path(run_dir)
    if not path.exists():
        _fail(f"{run_dir}: no such run directory (a sweep's is <storage>/<name>, e.g. runs/istree_smoke)")
    if not path.is_dir():
        _fail(f"{run_dir}: not a directory; a sweep's run directory is <storage>/<name>, e.g. runs/istree_smoke")


@app.command("status")
def status(run_dir: str = RUN_DIR, format: ListFormat = typer.Option("table", help="table, or json: one object per trial")):
    """Trials of a sweep with their state and latest metrics (during or after it)."""
    run = _read_run(_run_location(run_dir))
    df = run.trials
    if df.empty:
        _fail(f"{run_dir}: no trials yet")
    for note in run.notes:
        typer.secho(f"note: {note}", fg=typer.colors.YELLOW, err=True)
    from workloads.metrics import METRICS, PLOTTED

    generates = TASKS[run.task][1].generates if run.task in TASKS else True
    shown = [m for m in PLOTTED if generates or not METRICS[m].generation]
    columns = ["trial", "state", "samples", "train_loss", *shown, "error"]
    trials = df.sort_values("trial")
    if format == "json":  # every value as stored: numbers as numbers, null where not measured
        records = [{c: (None if isinstance(r[c], float) and r[c] != r[c] else r[c]) for c in columns}
                   for r in trials.to_dict("records")]
        typer.echo(json.dumps(records, indent=1, default=float))
        return
    rows = [
        dict(trial=r["trial"], state=r["state"], samples=_int(r["samples"]), train_loss=_f(r["train_loss"]),
             **{m: _f(r[m]) for m in shown}, error=r["error"][:60])
        for _, r in trials.iterrows()
    ]
    _print_table(rows)
    typer.echo(", ".join(f"{v} {k}" for k, v in sorted(df["state"].value_counts().items())))


def _int(v):
    return "-" if v is None or v != v else int(v)


def _f(v):
    return "-" if v is None or v != v else f"{v:.3f}"


@app.command("report")
def report(
    run_dir: str = RUN_DIR,
    out: Optional[Path] = typer.Option(None, help="remote runs: also keep the report here (default ./reports/NAME)"),
    solved: float = typer.Option(0.9, min=0.0, max=1.0, help="exact match at which the frontier counts a cell solved"),
):
    """Aggregate stored results: report.md, results.csv, best.csv, accuracy plots and, for a
    sweep over several n, the frontier (frontier.csv, frontier.png), written into the run
    directory (on remote storage too)."""
    _say_failed(_report(_run_location(run_dir), out, solved))


def _say_failed(trials) -> list[str]:
    """Names the trials that failed for good, if any; returns them."""
    failed = sorted(trials.loc[trials["state"] == "error", "trial"])
    if failed:
        typer.secho(f"{len(failed)} trial(s) failed (errors in the report): {', '.join(failed)}", fg=typer.colors.RED, err=True)
    return failed


def _report(run_dir: str, out: Optional[Path] = None, solved: float = 0.9):
    """Writes and prints the report (into the run directory; for a remote run also
    into `out`, a local folder); returns the per-trial table."""
    import shutil

    import errno

    from orchestrator.api import read_stored
    from orchestrator.report import report_files, write_report
    from orchestrator.rundir import RunDirError
    from orchestrator.storage import is_remote, local_view, upload

    remote = is_remote(run_dir)
    _require_local_run(run_dir)
    try:
        with local_view(run_dir) as local:
            run = read_stored(local, locked=not remote)
            trials = run.trials
            try:
                text, _ = write_report(run, local, solved=solved)
            except FileNotFoundError as e:
                _fail(str(e).replace(str(local), run_dir))
            except OSError as e:
                if e.errno != errno.ENOSPC:
                    raise
                # A full disk: the trials' files can still be read; what is left, and how to go on, is said.
                typer.secho(f"The report cannot be written into {run_dir}: the disk is full. Free some space, then "
                            f"`icr-sweep report {run_dir}` writes it.", fg=typer.colors.RED, err=True)
                return trials
            files = report_files(local)
            if remote:
                upload(files, run_dir)
                out = out or Path("reports") / local.name
                out.mkdir(parents=True, exist_ok=True)
                for file in files:
                    shutil.copy(file, out / file.name)
    except (RunDirError, OSError) as e:
        _fail(f"{run_dir}: cannot be read or written ({e})")
    typer.echo(text.split("## Every trial")[0].rstrip())
    where = f"{run_dir}/report.md and {out}/report.md" if remote else f"{run_dir}/report.md"
    typer.echo(f"Report: {where} ({', '.join(f.name for f in files if f.name != 'report.md')} beside it)")
    return trials


if __name__ == "__main__":
    app()
