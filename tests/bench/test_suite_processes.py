"""bench/suite_processes.py tells a command's CPU time by kind of process, from the
kernel's process accounting (root only: skipped elsewhere, saying so)."""

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.bench.test_suite_cpu import UNWAITED_CHILD

ROOT = Path(__file__).parents[2]
sys.path.insert(0, str(ROOT / "bench"))
from suite_processes import kind  # noqa: E402


def test_processes_are_told_apart_by_their_names_and_command_lines():
    assert kind("ray::ImplicitFu", "ray::ImplicitFunc.train") == "trial worker"
    assert kind("ray::transforme", "ray::transformer-cot-tiny-n5-s0.train") == "trial worker"
    assert kind("ray::_QueueActo", "ray::_QueueActor.get") == "Ray queue actor"
    assert kind("python", "/venv/bin/python -m orchestrator.cli launch x.yaml") == "icr-sweep driver"
    assert kind("ray::IDLE", "ray::IDLE") == "Ray: ray::IDLE"
    assert kind("python", "/venv/bin/python -u .../ray/_private/log_monitor.py --x") == "Ray: log_monitor.py"


def test_the_cpu_time_of_a_child_no_one_waits_for_is_counted_under_its_name(tmp_path):
    out = tmp_path / "kinds.json"
    elsewhere = Path(tempfile.mkdtemp(prefix="icr-acct-test-"))  # not under pytest's folder, which names it "pytest"
    try:
        result = subprocess.run([sys.executable, "bench/suite_processes.py", "--out", str(out), "--", sys.executable,
                                 "-c", UNWAITED_CHILD, str(elsewhere / "done")], cwd=ROOT, capture_output=True,
                                text=True, timeout=120)
    finally:
        shutil.rmtree(elsewhere)
    if result.returncode == 2 and "process accounting could not be turned on" in result.stderr:
        pytest.skip(result.stderr.strip())  # not root, or a container without CAP_SYS_PACCT
    assert result.returncode == 0, result.stderr
    record = json.loads(out.read_text())
    assert record["exit_status"] == 0 and record["cpu_s"] >= 0.5, record
    python = [k for name, k in record["kinds"].items() if name.startswith("other: python")]
    assert sum(k["cpu_s"] for k in python) >= 0.5 and sum(k["processes"] for k in python) >= 2, record
