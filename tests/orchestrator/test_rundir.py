"""Run directories: refused before anything starts when they cannot be written,
locked for the whole run, and a second driver on the same sweep refused."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from orchestrator.cli import app
from orchestrator.rundir import RunDirError, RunLock, check_storage, driver_is_live

ROOT = Path(__file__).parents[2]
MICRO = str(ROOT / "sweeps" / "istree_micro.yaml")
runner = CliRunner()


def launch(*args):
    return runner.invoke(app, ["launch", MICRO, *args])


def test_storage_that_is_a_file_is_refused_before_ray_starts(tmp_path):
    blocker = tmp_path / "runs"
    blocker.write_text("not a directory")
    result = launch("--storage", str(blocker))
    assert result.exit_code == 2
    assert f"{blocker} is a file" in result.output and "choose another --storage" in result.output
    assert "Ray dashboard" not in result.output


def test_a_name_too_long_for_the_filesystem_is_refused(tmp_path):
    result = launch("--storage", str(tmp_path / ("r" * 300)))
    assert result.exit_code == 2 and "over the 255-byte limit of a file name" in result.output


def test_unwritable_storage_is_refused():
    # sysfs refuses new directories to every user, root included.
    result = launch("--storage", "/sys/icr-sweep-runs")
    assert result.exit_code == 2
    assert "/sys/icr-sweep-runs/istree_micro cannot be written" in result.output and "choose another --storage" in result.output


def test_check_storage_accepts_a_new_directory(tmp_path):
    check_storage(str(tmp_path / "a" / "b"))
    check_storage(f"file://{tmp_path}/c")
    assert (tmp_path / "a" / "b").is_dir() and (tmp_path / "c").is_dir()


def test_a_second_driver_on_a_running_sweep_is_refused(tmp_path):
    run_dir = tmp_path / "runs" / "istree_micro"
    with RunLock(str(run_dir)):
        assert driver_is_live(run_dir)
        result = launch("--storage", str(tmp_path / "runs"))
        assert result.exit_code == 2
        assert f"in use by another icr-sweep (pid {os.getpid()})" in result.output
        with pytest.raises(RunDirError):
            RunLock(str(run_dir)).__enter__()
    assert not driver_is_live(run_dir)


def test_a_killed_driver_leaves_no_stale_lock(tmp_path):
    run_dir = tmp_path / "run"
    code = f"from orchestrator.rundir import RunLock; import time; RunLock({str(run_dir)!r}).__enter__(); print('held', flush=True); time.sleep(60)"
    holder = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        assert driver_is_live(run_dir)
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    deadline = time.time() + 5
    while driver_is_live(run_dir) and time.time() < deadline:
        time.sleep(0.05)
    with RunLock(str(run_dir)):
        pass


def test_launch_with_an_address_where_nothing_listens_fails_fast(tmp_path):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    started = time.monotonic()
    result = subprocess.run([sys.executable, "-m", "orchestrator.cli", "launch", MICRO, "--storage", str(tmp_path),
                             "--address", f"127.0.0.1:{port}"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2, result.stderr
    assert f"nothing answers at 127.0.0.1:{port}" in result.stderr and "from --address" in result.stderr
    assert not list(tmp_path.glob("*/*/params.json"))
    assert time.monotonic() - started < 100  # it did not wait on Ray's endless retries


def test_auto_names_ray_address_as_the_source(monkeypatch):
    from orchestrator.tune import ClusterError, resolve_address

    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:9")
    with pytest.raises(ClusterError, match="from RAY_ADDRESS"):
        resolve_address("auto", timeout=1)


def test_a_taken_dashboard_port_is_replaced_by_a_free_one():
    import socket

    from orchestrator.tune import _free_port

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        taken = s.getsockname()[1]
        other = _free_port("127.0.0.1", taken)
        assert other != taken
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", other))
