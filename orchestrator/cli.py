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


def _first_error(e) -> str:
    err = e.errors()[0]
    path = ".".join(str(p) for p in err["loc"]) or "(root)"
    return f"{path}: {err['msg']} (got {err.get('input')!r})"


if __name__ == "__main__":
    app()
