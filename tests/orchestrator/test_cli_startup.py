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
