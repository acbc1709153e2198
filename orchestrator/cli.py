"""The `icr-sweep` command line. Heavy imports (torch, Ray) happen inside commands."""

import json
from enum import Enum
from pathlib import Path

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


def _first_error(e) -> str:
    err = e.errors()[0]
    path = ".".join(str(p) for p in err["loc"]) or "(root)"
    return f"{path}: {err['msg']} (got {err.get('input')!r})"


if __name__ == "__main__":
    app()
