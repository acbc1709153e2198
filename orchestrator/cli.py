"""The `icr-sweep` command line. Heavy imports (torch, Ray) happen inside commands."""

import json
from enum import Enum
from pathlib import Path
from typing import Optional

import typer

app = typer.Typer(
    help="Sweeps of the IsTree in-context retrieval experiment on Ray Tune.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)


class Format(str, Enum):
    text = "text"
    jsonl = "jsonl"


class Setup(str, Enum):
    vanilla = "vanilla"
    cot = "cot"
    retrieval = "retrieval"


class Family(str, Enum):
    binary = "binary"
    random = "random"


@app.callback()
def _root() -> None:
    """Sweeps of the IsTree in-context retrieval experiment on Ray Tune."""


def _fail(message: str) -> None:
    typer.secho(f"error: {message}", fg=typer.colors.RED, err=True)
    raise typer.Exit(2)


@app.command("show-task")
def show_task(
    task: str = typer.Argument("istree", help="task name"),
    n: int = typer.Option(8, help="vertices per graph"),
    setup: Setup = typer.Option(Setup.cot),
    family: Family = typer.Option(Family.binary),
    seed: int = typer.Option(0),
    count: int = typer.Option(3, min=1),
    format: Format = typer.Option(Format.text, "--format"),
):
    """Print samples of a task. In text, tokens the retriever fills are [bracketed]."""
    from pydantic import ValidationError

    from workloads.tasks import TASKS, build_task
    from workloads.tasks.istree import TRAIN_STREAM, IsTreeConfig

    if task not in TASKS:
        _fail(f"unknown task {task!r}; known tasks: {', '.join(sorted(TASKS))}")
    try:
        config = IsTreeConfig(n=n, setup=setup.value, family=family.value)
    except ValidationError as e:
        _fail(_first_error(e))
    for i, s in enumerate(build_task(config).samples(seed, TRAIN_STREAM, 0, count)):
        if format is Format.jsonl:
            typer.echo(json.dumps(s))
            continue
        first_eos = s["tokens"].index("EOS")
        shown = [
            f"[{tok}]" if i > first_eos and not sup else tok
            for i, (tok, sup) in enumerate(zip(s["tokens"], s["supervised"]))
        ]
        typer.echo(f"# sample {i}: {'tree' if s['label'] else 'not a tree'}, {len(shown)} tokens")
        typer.echo(" ".join(shown))


class ListFormat(str, Enum):
    table = "table"
    json = "json"


@app.command("models")
def models(format: ListFormat = typer.Option(ListFormat.table, "--format")):
    """List the model presets with their trainable parameter counts."""
    from workloads.models import PRESETS, build_model

    rows = [
        # The frozen embedding is not a parameter, so the vocabulary size does not matter.
        dict(arch=arch, size=size, params=build_model(cfg, vocab_size=2).num_params(),
             d_model=cfg.d_model, n_layers=cfg.n_layers, attn_layer_idx=list(cfg.attn_layer_idx))
        for arch, sizes in PRESETS.items()
        for size, cfg in sizes.items()
    ]
    if format is ListFormat.json:
        typer.echo(json.dumps(rows))
    else:
        for r in rows:
            idx = r.pop("attn_layer_idx")
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
    Console().print(table)


class Arch(str, Enum):
    transformer = "transformer"
    mamba = "mamba"
    hybrid = "hybrid"


class Precision(str, Enum):
    fp32 = "fp32"
    bf16 = "bf16"


class Device(str, Enum):
    auto = "auto"
    cpu = "cpu"
    cuda = "cuda"


@app.command("train")
def train(
    arch: Arch = typer.Option(..., help="model family"),
    size: str = typer.Option(..., help="preset: tiny, 0.5M, 1M, 2M"),
    setup: Setup = typer.Option(...),
    n: int = typer.Option(..., help="vertices per graph"),
    out: Path = typer.Option(..., help="directory for metrics.json, history.jsonl and the checkpoint"),
    family: Family = typer.Option(Family.binary),
    samples: int = typer.Option(1_000_000, help="training samples in all"),
    lr: Optional[float] = typer.Option(None, help="peak learning rate [default: 1e-3 transformer, 3e-4 others]"),
    seed: int = typer.Option(0),
    batch_size: int = typer.Option(64),
    warmup_samples: int = typer.Option(10_000),
    eval_every: int = typer.Option(100_000, help="samples between evaluations and checkpoints"),
    val_samples: int = typer.Option(5_000),
    gen_every_eval: bool = typer.Option(False, help="generation accuracy at every evaluation"),
    grad_clip: Optional[float] = typer.Option(None),
    device: Device = typer.Option(Device.auto),
    precision: Precision = typer.Option(Precision.fp32),
):
    """Train and evaluate one trial without Ray. Re-running with the same --out resumes it."""
    from pydantic import ValidationError
    from tqdm import tqdm

    from workloads.config import trial_config
    from workloads.tasks import IsTreeConfig
    from workloads.train import CHECKPOINT_FILE, run_trial

    try:
        config = trial_config(
            arch.value, size, IsTreeConfig(n=n, setup=setup.value, family=family.value), lr=lr,
            samples=samples, seed=seed, batch_size=batch_size, warmup_samples=warmup_samples,
            eval_every=eval_every, val_samples=val_samples, gen_every_eval=gen_every_eval,
            grad_clip=grad_clip, device=device.value, precision=precision.value,
        )
    except (ValidationError, ValueError) as e:
        _fail(_first_error(e) if isinstance(e, ValidationError) else str(e))
    out.mkdir(parents=True, exist_ok=True)
    checkpoint = out / "checkpoint"
    resume = checkpoint if (checkpoint / CHECKPOINT_FILE).exists() else None
    typer.echo(f"{config.name}: {samples:,} samples -> {out}" + (" (resuming)" if resume else ""), err=True)
    bar = tqdm(total=samples, unit="sample", unit_scale=True, dynamic_ncols=True)

    def on_step(done: int) -> None:
        bar.update(done - bar.n)

    def report(metrics: dict, _checkpoint) -> None:
        shown = {k: metrics[k] for k in ("train_loss", "val_loss", "val_exact_match", "gen_accuracy") if metrics[k] is not None}
        bar.set_postfix({k: f"{v:.3f}" for k, v in shown.items()})
        with open(out / "history.jsonl", "a") as f:
            f.write(json.dumps({k: v for k, v in metrics.items() if k != "config"}) + "\n")

    try:
        metrics = run_trial(config, report=report, checkpoint_dir=checkpoint, resume_from=resume, on_step=on_step)
    except ValueError as e:  # e.g. a checkpoint in --out from another config
        _fail(str(e))
    finally:
        bar.close()
    (out / "metrics.json").write_text(json.dumps(metrics, indent=1))
    typer.echo(json.dumps({k: v for k, v in metrics.items() if k != "config"}))


def _first_error(e) -> str:
    err = e.errors()[0]
    path = ".".join(str(p) for p in err["loc"]) or "(root)"
    return f"{path}: {err['msg']} (got {err.get('input')!r})"


if __name__ == "__main__":
    app()
