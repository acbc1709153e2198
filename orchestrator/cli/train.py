"""`icr-sweep train`: one trial without Ray, written as a sweep's trial is."""

import json
from pathlib import Path
from typing import Optional

import typer

from orchestrator.cli.common import app, fail
from orchestrator.cli.flags import (DIM_OPTION, SET_OPTION, flag_error, model_dims, protocol_option,
                                    setups_in_words, task_config_of_flags)
from workloads.config import AttentionPrecision, Device, Precision, TrainConfig
from workloads.models.config import DEFAULT_LR, SIZES, Arch
from workloads.naming import significant
from workloads.switch import Switch
from workloads.tasks import DEFAULT_TASK


@app.command("train")
def train(
    arch: Arch = typer.Option(..., help="architecture (`icr-sweep models` lists them)"),
    size: str = typer.Option(..., help=f"a preset: {', '.join(SIZES)} (`icr-sweep models` lists them)"),
    setup: str = typer.Option(..., help=setups_in_words()),
    n: int = typer.Option(..., help="the task's size (istree: vertices; `icr-sweep tasks` says for each)"),
    out: str = typer.Option(..., help="the trial's directory: params.json, result.json and the checkpoint, as a "
                             "sweep's trial (status, report and load_run read it); the final metrics go to stdout as JSON"),
    task: str = typer.Option(DEFAULT_TASK, help="a task name (`icr-sweep tasks` lists them)"),
    sets: list[str] = SET_OPTION,
    dims: list[str] = DIM_OPTION,
    samples: int = protocol_option("samples"),
    lr: Optional[float] = typer.Option(None, help="peak learning rate [default: the architecture's, "
                                       + ", ".join(f"{arch} {significant(rate, 3)}" for arch, rate in DEFAULT_LR.items()) + "]"),
    seed: int = protocol_option("seed"),
    batch_size: int = protocol_option("batch_size"),
    warmup_samples: Optional[int] = typer.Option(
        None, help=f"linear warm-up [default: {TrainConfig.model_fields['warmup_samples'].default:,} (the paper's), or a tenth "
        "of --samples when that is less]"
    ),
    eval_every: int = protocol_option("eval_every"),
    checkpoint_every_s: float = protocol_option("checkpoint_every_s"),
    val_samples: int = protocol_option("val_samples"),
    val_seed: int = protocol_option("val_seed"),
    eval_batch_size: int = protocol_option("eval_batch_size"),
    length_groups: int = protocol_option("length_groups"),
    gen_every_eval: bool = protocol_option("gen_every_eval"),
    grad_clip: Optional[float] = protocol_option("grad_clip"),
    device: Device = protocol_option("device"),
    precision: Precision = protocol_option("precision"),
    cuda_graphs: Switch = protocol_option("cuda_graphs"),
    attention_precision: AttentionPrecision = protocol_option("attention_precision"),
    cpus: int = typer.Option(1, min=1, help="threads for torch, OpenMP and numba (resources.cpus_per_trial in a sweep)"),
):
    """Train and evaluate one trial without Ray. Re-running with the same --out resumes it."""
    protocol = {k: v for k, v in locals().items() if k in TrainConfig.model_fields and k != "lr"}  # as data
    from workloads.threads import bound_threads

    bound_threads(cpus)  # before torch starts its pools: the preflight builds the model
    if warmup_samples is None:
        protocol["warmup_samples"] = min(TrainConfig.model_fields["warmup_samples"].default, samples // 10)
    from orchestrator.rundir import TRIAL_LOCK_FILE, RunDirError, RunLock

    config = _trial_of_flags(arch, size, task_config_of_flags(task, n, setup, sets), lr, model_dims(arch, size, dims),
                             protocol, out)
    try:
        with RunLock(out, TRIAL_LOCK_FILE):  # two `train`s of one --out would each write every row
            _train_trial(config, Path(out), cpus)
    except RunDirError as e:
        fail(str(e))


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
        fail(flag_error(e))
    except (RunDirError, ValueError, OSError) as e:
        fail(str(e))
    return config


def _train_trial(config, out: Path, cpus: int) -> None:
    """Runs one trial in `out` (resuming from its checkpoint there), as a sweep's trial
    is written; prints its final metrics as JSON, or exits saying why it stopped."""
    from tqdm import tqdm

    from orchestrator.rundir import STOP_FILE, TrialFiles, catch_up, repair_results
    from orchestrator.stopping import StopOnSignals, StopRequests
    from workloads.metrics import METRICS
    from workloads.checkpoint import CHECKPOINT_FILE, CheckpointError, DiskSpaceError
    from workloads.train import Checkpoints, Hooks, run_trial

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
        catch_up(files.stored_rows(), rows, report=lambda row: report(row, None),
                 say=lambda line: typer.echo(f"{config.name}: {line}", err=True))

    stop = StopOnSignals(out / STOP_FILE, say=lambda line: typer.secho(f"\n{line}", fg=typer.colors.YELLOW, err=True))
    try:
        with stop:
            hooks = Hooks(report=report, on_step=on_step, stop=StopRequests(out / STOP_FILE), on_resume=on_resume)
            metrics = run_trial(config, hooks, Checkpoints(dir=checkpoint, resume_from=resume))
    except (CheckpointError, DiskSpaceError) as e:
        fail(str(e))
    except FloatingPointError as e:  # the loss diverged: a rate too high for the model, most often
        if getattr(e, "step", None) == 1:  # before any update: the message says no rate made it
            fail(f"{e}; check the --dim and --set values given")
        fail(f"{e}: the training diverged; lower --lr (this trial's: {config.train.lr:g}) or set --grad-clip. "
              f"Its checkpoint, if any, is kept in {checkpoint}")
    finally:
        bar.close()
    if not files.params.exists():  # a directory of an earlier version, resumed
        files.write_config({"trial": config.model_dump(mode="json")})
    _say_how_it_ended(config, metrics, stop.name, checkpoint)


def _say_how_it_ended(config, metrics: dict, stopped_by: str, checkpoint: Path) -> None:
    """Exit 130 where a signal stopped the trial; else its final metrics as JSON,
    after a word where it learnt nothing."""
    from workloads.metrics import learnt_nothing_note

    if metrics.get("stopped"):
        typer.secho(f"Stopped by {stopped_by} at {metrics['samples']:,} samples, checkpointed in {checkpoint}. "
                    "Run the same command to continue.", fg=typer.colors.YELLOW, err=True)
        raise typer.Exit(130)
    note = learnt_nothing_note(metrics.get("val_loss"), config.task.vocab_size, config.train.lr)
    if note:
        typer.secho(f"{config.name} {note}", fg=typer.colors.YELLOW, err=True)
    typer.echo(json.dumps({k: v for k, v in metrics.items() if k != "config"}))


def _train_preflight(config) -> None:
    """The checks a sweep makes before Ray starts, for the one trial of `train`: the
    device there, the model built and run once, its memory within this machine's."""
    from workloads.preflight import check_models, cpu_memory_problems

    if config.train.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            fail("--device cuda: torch sees no CUDA GPU here; use --device auto or cpu")
    import torch

    on_cpu = config.train.device == "cpu" or not torch.cuda.is_available()
    problems = cpu_memory_problems([config], 1)[0] if on_cpu else []
    problems = problems or check_models([config], on_cpu=on_cpu)  # a model that does not fit is not built
    if problems:
        fail("; ".join(problems))
