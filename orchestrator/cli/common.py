"""What every command shares: the Typer app, the way a command fails (one red
line, exit 2), tables, a spec read and checked, a run directory named."""

import sys
from pathlib import Path
from typing import Literal, Optional

import typer


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


def fail(message: str) -> None:
    typer.secho(f"error: {message}", fg=typer.colors.RED, err=True)
    raise typer.Exit(2)


def print_table(rows: list[dict]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table()
    for key in rows[0]:
        table.add_column(key, justify="right" if isinstance(rows[0][key], (int, float)) else "left")
    for r in rows:
        table.add_row(*(f"{v:,}" if isinstance(v, int) else str(v) for v in r.values()))
    Console(width=None if sys.stdout.isatty() else 200).print(table)


def spec_or_exit(path: Path, storage: Optional[str] = None):
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


RUN_DIR = typer.Argument(..., metavar="RUN_DIR", help="the sweep's run directory: a path, or a URI such as s3://bucket/prefix/name")


def run_location(run_dir: str) -> str:
    """The run directory as the commands use it: a URI as given, a path made absolute."""
    from orchestrator.spec import scheme_typo
    from orchestrator.storage import is_remote

    if scheme_typo(run_dir):
        fail(scheme_typo(run_dir))

    return run_dir.rstrip("/") if is_remote(run_dir) else str(Path(run_dir.removeprefix("file://")).resolve())
