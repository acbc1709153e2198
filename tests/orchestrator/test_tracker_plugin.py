"""A tracker is a plug-in (orchestrator/trackers/): a package's one module,
registered by an entry point of the group `icr_sweep.trackers`, is read by the spec,
checked before Ray starts, given every trial's rows, and named in the report and the
console, with no line of the tool changed (issue 78)."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from tests.orchestrator.e2e import cli, free_port

ROOT = Path(__file__).parents[2]

PROBE = '''
"""A tracker of its own: every row of every trial as a line of JSON in one file."""

import json
from pathlib import Path
from typing import Optional

from pydantic import Field

from orchestrator.spec.section import Section
from orchestrator.trackers import Launch, Shown, Tracker, TrackerError, register


class ProbeSpec(Section):
    out: str = Field(description="the file every row goes to")


def callback_class():
    from ray.tune.logger import LoggerCallback

    from orchestrator.trackers.common import STEP, logged_once_per_member, tracked_metrics

    @logged_once_per_member
    class Probe(LoggerCallback):
        def __init__(self, out):
            self.out = out

        def log_trial_result(self, iteration, trial, result):
            with open(self.out, "a") as f:
                f.write(json.dumps({"trial": str(trial), **tracked_metrics(result)}) + "\\n")

    return Probe


@register
class ProbeTracker(Tracker):
    name, section = "probe", ProbeSpec

    def check(self, config, launch: Launch) -> None:
        if not Path(config.out).parent.is_dir():
            raise TrackerError(f"tracking.probe.out: {Path(config.out).parent} is no folder; make it first")

    def callbacks(self, config, launch: Launch) -> list:
        return [callback_class()(config.out)]

    def opens(self, config, shown: Shown) -> Optional[str]:
        return f"Probe: `cat {config['out']}`"
'''


def _plugin(folder: Path) -> Path:
    """The probe as an installed package would be: its module, and its metadata with
    the entry point, on a folder that PYTHONPATH names."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "icr_probe_tracker.py").write_text(textwrap.dedent(PROBE))
    meta = folder / "icr_probe_tracker-0.1.dist-info"
    meta.mkdir(exist_ok=True)
    (meta / "METADATA").write_text("Metadata-Version: 2.1\nName: icr-probe-tracker\nVersion: 0.1\n")
    (meta / "entry_points.txt").write_text("[icr_sweep.trackers]\nprobe = icr_probe_tracker\n")
    return folder


def _run(args: list[str], plugin: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(plugin), str(ROOT), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run(args, capture_output=True, text=True, timeout=600, env=env, cwd=ROOT)


@pytest.mark.slow
def test_a_tracker_in_one_module_is_read_checked_called_and_named_in_the_report(tmp_path, ray_temp):
    plugin = _plugin(tmp_path / "plugin")
    spec = yaml.safe_load((ROOT / "sweeps" / "istree_micro.yaml").read_text())
    rows = tmp_path / "probe" / "rows.jsonl"

    # Read by the spec: a misspelt field of its section is named with its path, and the schema lists it.
    spec.update(tracking={"probe": {"outt": str(rows)}})
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(spec))
    bad = _run([sys.executable, "-m", "orchestrator.cli", "validate", str(tmp_path / "bad.yaml")], plugin)
    assert bad.returncode == 2 and "tracking.probe.outt" in bad.stdout + bad.stderr, bad.stdout + bad.stderr
    schema = _run([sys.executable, "-m", "orchestrator.cli", "schema"], plugin)
    assert "ProbeSpec" in schema.stdout, schema.stdout[-2000:]

    # Checked before Ray starts: its own check refuses, naming the field; nothing is launched.
    spec.update(tracking={"probe": {"out": str(rows)}})
    (tmp_path / "t.yaml").write_text(yaml.safe_dump(spec))
    storage = tmp_path / "runs"
    refused = _run(cli("launch", str(tmp_path / "t.yaml"), "--storage", str(storage), ray_temp=ray_temp,
                       port=free_port()), plugin)
    assert refused.returncode == 2 and "tracking.probe.out:" in refused.stderr, refused.stdout + refused.stderr
    assert not (storage / "istree_micro").exists()

    # Called with every trial's rows, and named in the report and on the console.
    rows.parent.mkdir()
    result = _run(cli("launch", str(tmp_path / "t.yaml"), "--storage", str(storage), ray_temp=ray_temp,
                      port=free_port()), plugin)
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    logged = [json.loads(line) for line in rows.read_text().splitlines()]
    stored = {p.parent.name: [json.loads(x) for x in p.read_text().splitlines()]
              for p in (storage / "istree_micro").glob("*/result.json")}
    assert len(stored) == 2 and sorted({r["trial"] for r in logged}) == sorted(stored)
    for trial, trial_rows in stored.items():
        evaluations = [r["samples"] for r in trial_rows if "val_exact_match" in r]
        assert [r["samples"] for r in logged if r["trial"] == trial and "val/exact_match" in r] == evaluations
    line = f"Probe: `cat {rows}`"
    assert line in (storage / "istree_micro" / "report.md").read_text()
    assert line in result.stdout, result.stdout[-2000:]


@pytest.fixture
def registered():
    """A tracker registered in this process, taken away after the test."""
    from orchestrator.trackers import unregister

    names = []
    yield names
    for name in names:
        unregister(name)


def test_a_tracker_registered_after_the_spec_was_built_joins_its_tracking_section(registered):
    from pydantic import ValidationError

    from orchestrator.spec import SweepSpec
    from orchestrator.spec.section import Section
    from orchestrator.trackers import Tracker, register

    class LateSpec(Section):
        level: int

    @register
    class Late(Tracker):
        name, section = "late", LateSpec

    registered.append("late")
    assert SweepSpec(name="s", tracking={"late": {"level": 3}}).tracking.late == LateSpec(level=3)
    with pytest.raises(ValidationError, match="tracking.late.level"):
        SweepSpec(name="s", tracking={"late": {"level": "high"}})
    from orchestrator.trackers import unregister

    unregister("late")
    registered.remove("late")
    with pytest.raises(ValidationError, match="tracking.late"):
        SweepSpec(name="s", tracking={"late": {"level": 3}})


@pytest.mark.parametrize("name, module", [("TrialFilesCallback", "orchestrator.trial_files"),
                                          ("MemberCSV", "orchestrator.trial_files"),
                                          ("ArrayCSV", "orchestrator.trial_files"),
                                          ("TensorBoard", "orchestrator.trackers.tensorboard"),
                                          ("MLflow", "orchestrator.trackers.mlflow"),
                                          ("Wandb", "orchestrator.trackers.wandb")])
def test_a_run_launched_before_the_trackers_were_plugins_unpickles_its_callbacks(name, module):
    # Tune's tuner.pkl of an earlier run names each callback's class as orchestrator.trackers.<name>; a resume
    # unpickles it, and finds each class where it lives now (the one that pickles today's runs, too).
    import importlib
    import pickle

    old = f"corchestrator.trackers\n{name}\n.".encode()
    found = pickle.loads(old)
    assert found is getattr(importlib.import_module(module), name)
    assert pickle.loads(pickle.dumps(found)) is found
