"""What every command shares: the Typer app, the way a command fails (one red
line, exit 2), tables, a spec read and checked, a run directory named."""

import sys
from pathlib import Path
from typing import Literal, Optional

import typer


Format = Literal["text", "jsonl"]
ListFormat = Literal["table", "json"]


# What an option's value is, in words, for --help (Typer shows its type: <str>,
# <int range>); options not named here are named by their type or their own name.
VALUE_WORDS = {"storage": "PATH|URI", "address": "HOST:PORT|auto", "temp_dir": "DIR", "dashboard_host": "HOST",
               "dashboard_port": "PORT", "device_name": "DEVICE", "rates": "FILE", "out": "DIR", "solved": "FRACTION",
               "lr": "RATE", "grad_clip": "NORM", "checkpoint_every_s": "SECONDS", "edges": "EDGES",
               "val_seed": "SEED"}


def _value_words(param) -> str:
    desc = getattr(param, "type_descriptor", None)  # Typer's description of the option's type (0.2x)
    if desc is None:  # an earlier Typer: its options are click's, with click's types
        return _click_value_words(param)
    if desc.is_choice:
        choices = [str(c) for c in desc.choices or ()]
        return "|".join(choices) if len(choices) <= 4 else param.name.upper()
    if desc.is_path:
        return "PATH"
    return _number_words(param, param.bare_type())


def _click_value_words(param) -> str:
    import click

    kind = param.type
    if isinstance(kind, click.Choice):
        choices = [str(c) for c in kind.choices or ()]
        return "|".join(choices) if len(choices) <= 4 else param.name.upper()
    if isinstance(kind, click.Path):
        return "PATH"
    numbers = {click.types.IntParamType: "int", click.types.FloatParamType: "float"}
    return _number_words(param, next((name for cls, name in numbers.items() if isinstance(kind, cls)), ""))


def _number_words(param, kind: str) -> str:
    if kind in ("int", "float") and param.name not in ("n", "seed", "val_seed"):
        return "N" if kind == "int" else "NUMBER"
    return param.name.upper()


class _Command(typer.core.TyperCommand):
    """A command whose options name their values in words in --help (--storage
    PATH|URI, --num-cpus N), where Typer names their types (<str>, <int range>)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        for param in self.params:
            if param.param_type_name == "option" and not getattr(param, "is_flag", False) and param.metavar is None:
                param.metavar = VALUE_WORDS.get(param.name) or _value_words(param)


class _App(typer.Typer):
    def command(self, *args, cls=None, **kwargs):
        return super().command(*args, cls=cls or _Command, **kwargs)


app = _App(
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
    from orchestrator.secrets import guard_console

    guard_console()  # no secret printed, any console's encoding, a pipe's reader gone: secrets.Console


def say(text: str, err: bool = False, fg: Optional[str] = None) -> None:
    """Prints `text` (to stderr where `err`, in colour `fg`); on a terminal, each line
    wrapped at its words to the terminal's width, a continuation indented under its
    line. A `command` in backticks is never split: where it is wider than the
    terminal, the terminal folds it, which copies back as one line."""
    typer.secho(wrapped(text, _terminal_width(err)), fg=fg, err=err)


def wrapped(text: str, width: Optional[int]) -> str:
    """`text`, each line wrapped at `width` (None: as it is) at its words, never
    inside backticks."""
    import re
    import textwrap

    if not width:
        return text
    out = []
    for line in text.split("\n"):
        indent = line[:len(line) - len(line.lstrip())]
        kept = re.sub(r"`[^`]*`", lambda m: m.group(0).replace(" ", "\0"), line)  # a command is one word
        out += [part.replace("\0", " ") for part in
                textwrap.wrap(kept, width, subsequent_indent=indent + "  ", break_long_words=False,
                              break_on_hyphens=False) or [""]]
        if out[-1] == "" and line:
            out[-1] = line
    return "\n".join(out)


def _terminal_width(err: bool = False) -> Optional[int]:
    """The terminal's columns where stdout (stderr where `err`) is one, else None (a
    file or a pipe keeps whole lines)."""
    import shutil

    return shutil.get_terminal_size().columns if (sys.stderr if err else sys.stdout).isatty() else None


def fail(message: str) -> None:
    from orchestrator.secrets import redact  # a URL's password is never printed

    typer.secho(f"error: {redact(message)}", fg=typer.colors.RED, err=True)
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
            spec = type(spec).model_validate({**spec.model_dump(), "storage": storage})
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
