"""The CLI starts instantly: reading, validating and planning specs never imports
torch, numba or numpy (seconds of start-up); commands that train import them."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
PROBE = """
import json, sys
from typer.testing import CliRunner
from orchestrator.cli import app
result = CliRunner().invoke(app, sys.argv[1:])
heavy = sorted(m for m in ("torch", "numba", "numpy", "ray") if m in sys.modules)
print(json.dumps({"exit": result.exit_code, "heavy": heavy}))
"""


@pytest.mark.parametrize("args", [["--help"], ["validate", "sweeps/istree_grid.yaml"], ["plan", "sweeps/istree_grid.yaml"],
                                  ["schema"], ["models"], ["tasks"], ["validate", "sweeps/no_such_spec.yaml"]])
def test_spec_commands_import_no_heavy_module(args):
    out = subprocess.run([sys.executable, "-c", PROBE, *args], cwd=ROOT, capture_output=True, text=True, check=True)
    result = json.loads(out.stdout.splitlines()[-1])
    assert result["heavy"] == [] and result["exit"] in (0, 2)


def test_the_cli_keeps_the_conventions_of_a_command_line_tool():
    """Issue 30: --version from the package's metadata, -h beside --help, typer's shell
    completion, and metavars in words."""
    from importlib.metadata import version

    from typer.testing import CliRunner

    from orchestrator.cli import app

    runner = CliRunner()
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0 and result.output.strip() == f"icr-sweep {version('icr-sweep')}"
    short = runner.invoke(app, ["launch", "-h"])
    assert short.exit_code == 0 and short.output == runner.invoke(app, ["launch", "--help"]).output
    top = runner.invoke(app, ["-h"]).output
    assert "--install-completion" in top and "--show-completion" in top
    assert "SPEC" in short.output and "{spec}" not in short.output
    train = runner.invoke(app, ["train", "-h"]).output
    assert "--set FIELD=VALUE" in train and "--dim FIELD=VALUE" in train and "list[str]" not in train
    assert "RUN_DIR" in runner.invoke(app, ["status", "-h"]).output
    # Issue 44: every option's value named in words, not Typer's types (<str>, <int range>).
    for command in ("launch", "resume", "status", "report", "plan", "train", "show-task", "tasks", "models"):
        text = runner.invoke(app, [command, "-h"], terminal_width=200).output
        options = [line.strip().split("  ")[0] for line in text.splitlines() if line.lstrip().startswith("-")]
        assert options and not [option for option in options if "<" in option], options  # e.g. "--storage PATH|URI"
    assert "--storage PATH|URI" in " ".join(short.output.split()) and "--num-cpus N" in " ".join(short.output.split())


def test_options_name_their_values_under_typers_click_based_options_too():
    """Typer before 0.2x builds options on click's types and has no type
    descriptors (the GPU machine's Typer crashed every command here)."""
    click = pytest.importorskip("click")
    from orchestrator.cli.common import _value_words

    def option(name, kind):
        opt = click.Option([f"--{name}"], type=kind)
        assert not hasattr(opt, "type_descriptor")
        return _value_words(opt)

    assert option("format", click.Choice(["table", "json"])) == "table|json"
    assert option("setup", click.Choice(["a", "b", "c", "d", "e"])) == "SETUP"
    assert option("spec", click.Path()) == "PATH"
    assert option("count", click.IntRange(min=1)) == "N"
    assert option("solved", click.FloatRange(0, 1)) == "NUMBER"
    assert option("seed", click.INT) == "SEED"
    assert option("instance", click.STRING) == "INSTANCE"
