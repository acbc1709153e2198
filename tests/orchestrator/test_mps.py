"""The launch's MPS daemon (orchestrator/mps.py), with a stand-in for NVIDIA's
control program on PATH (tests/fixtures/fake_mps): started in the private folder,
ended at the driver's end and on Ctrl-C, a killed driver's ended by the next start,
never one that is not this tool's."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from orchestrator import mps
from orchestrator.mps import Daemon, MPSError, end_orphan_daemons, wanted

ROOT = Path(__file__).resolve().parents[2]
FAKE = ROOT / "tests" / "fixtures" / "fake_mps"


@pytest.fixture
def fake_mps(monkeypatch):
    monkeypatch.setenv("PATH", f"{FAKE}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("FAKE_MPS_FAIL", raising=False)
    monkeypatch.delenv("FAKE_MPS_DEAF", raising=False)
    return monkeypatch


def _running(daemon: Daemon) -> bool:
    return bool(daemon.holders())


def test_a_daemon_starts_in_its_private_folder_and_quit_through_its_pipe_ends_it(tmp_path, fake_mps):
    calls = tmp_path / "calls.jsonl"
    fake_mps.setenv("FAKE_MPS_CALLS", str(calls))
    daemon = Daemon(tmp_path / "mps" / "driver")
    (tmp_path / "mps").mkdir(mode=0o700)
    daemon.start()
    try:
        assert _running(daemon)
        for folder in (daemon.folder, daemon.pipe, daemon.log):
            assert folder.is_dir() and folder.stat().st_mode & 0o777 == 0o700
        assert daemon.env == {"CUDA_MPS_PIPE_DIRECTORY": str(daemon.pipe), "CUDA_MPS_LOG_DIRECTORY": str(daemon.log)}
    finally:
        killed = daemon.stop()
    assert killed == 0 and not _running(daemon) and not daemon.folder.exists()  # `quit` alone ended it
    said = calls.read_text().splitlines()
    assert len(said) == 2 and all(f'"pipe": "{daemon.pipe}"' in line for line in said)  # -d, then quit: its own pipe


def test_a_daemon_deaf_to_quit_is_killed(tmp_path, fake_mps):
    fake_mps.setenv("FAKE_MPS_DEAF", "1")
    fake_mps.setattr(mps, "STOP_WAIT_S", 0.5)
    daemon = Daemon(tmp_path / "d")
    daemon.start()
    assert _running(daemon)
    assert daemon.stop() == 1
    assert not _running(daemon) and not daemon.folder.exists()


def test_a_daemon_that_fails_to_start_is_named_with_what_it_said(tmp_path, fake_mps):
    fake_mps.setenv("FAKE_MPS_FAIL", "1")
    daemon = Daemon(tmp_path / "d")
    with pytest.raises(MPSError, match=r"nvidia-cuda-mps-control -d exited with 1: An instance of this daemon is "
                                       r"already running \(its log: .*/d/log\)"):
        daemon.start()
    assert not daemon.folder.exists()


def test_without_the_control_program_the_error_says_so(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(MPSError, match="nvidia-cuda-mps-control is not on PATH"):
        Daemon(tmp_path / "d").start()


DRIVER = """
import signal, sys, time
from pathlib import Path
from orchestrator.mps import start_for_this_driver
signal.signal(signal.SIGINT, signal.default_int_handler)  # Ctrl-C as a shell's driver hears it (xdist's ignore it)
daemon = start_for_this_driver(Path(sys.argv[1]))
print(daemon.folder, flush=True)
if sys.argv[2] == "wait":
    time.sleep(120)
"""


def _driver(base: Path, how: str) -> tuple[subprocess.Popen, Daemon]:
    proc = subprocess.Popen([sys.executable, "-c", DRIVER, str(base), how], cwd=ROOT, stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    folder = proc.stdout.readline().strip()
    assert folder, proc.communicate()
    return proc, Daemon(Path(folder))


def _ctrl_c(proc: subprocess.Popen, daemon: Daemon) -> None:
    """Ctrl-C to a driver, waited for; one that does not end is killed with its daemon
    (nothing of the test left running) and the wait's timeout raised."""
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        daemon.stop()
        raise


def test_a_drivers_daemon_ends_with_it_and_on_ctrl_c(tmp_path, fake_mps):
    proc, daemon = _driver(tmp_path, "end")
    assert proc.wait(timeout=60) == 0
    assert not _running(daemon) and not daemon.folder.exists()
    proc, daemon = _driver(tmp_path, "wait")
    assert _running(daemon) and daemon.folder.parent == tmp_path / "mps"
    _ctrl_c(proc, daemon)
    assert not _running(daemon) and not daemon.folder.exists()


def test_a_killed_drivers_daemon_is_ended_by_the_next_start_and_no_other(tmp_path, fake_mps):
    live, live_daemon = _driver(tmp_path, "wait")
    killed, orphan = _driver(tmp_path, "wait")
    by_hand = Daemon(tmp_path / "by_hand")  # started by hand, outside the tool's folder: no record
    by_hand.start()
    try:
        killed.send_signal(signal.SIGKILL)
        killed.wait(timeout=60)
        time.sleep(0.2)
        assert _running(orphan)  # a SIGKILL leaves it: the next start ends it
        assert end_orphan_daemons(tmp_path) == (1, [])
        assert not _running(orphan) and not orphan.folder.exists()
        assert _running(live_daemon) and _running(by_hand)  # a live driver's and one started by hand: left
        assert end_orphan_daemons(tmp_path) == (0, [])
    finally:
        by_hand.stop()
        _ctrl_c(live, live_daemon)
    assert not _running(live_daemon)


def test_which_launches_start_a_daemon(fake_mps):
    fake_mps.setattr(mps, "MEASURED_FASTER", ("NVIDIA H200",))
    h200, h100 = ("NVIDIA H200",), ("NVIDIA H100 80GB HBM3",)
    assert wanted("off", embedded=True, shares_a_gpu=True, gpus=h200) == (False, None)
    assert wanted("on", embedded=True, shares_a_gpu=False) == (True, None)
    assert wanted("auto", embedded=True, shares_a_gpu=True, gpus=h200) == (True, None)
    assert wanted("auto", embedded=True, shares_a_gpu=True, gpus=h100) == (False, None)  # not measured there
    assert wanted("auto", embedded=True, shares_a_gpu=True, gpus=h200 + h100) == (False, None)
    assert wanted("auto", embedded=True, shares_a_gpu=False, gpus=h200) == (False, None)
    assert wanted("auto", embedded=False, shares_a_gpu=True, gpus=h200) == (False, None)
    start, note = wanted("on", embedded=False, shares_a_gpu=True)
    assert not start and "attached cluster" in note
    fake_mps.setenv("PATH", "/nonexistent")
    assert wanted("auto", embedded=True, shares_a_gpu=True, gpus=h200) == (False, None)  # no program: time-sliced
