"""Trials that share a GPU as clients of one MPS control daemon of this launch
(resources.mps).

Lone trials packed on one GPU take turns on it, time-sliced (four packed gave 1.21x
one: docs/gpu.md); under NVIDIA's Multi-Process Service their kernels run side by
side. The embedded Ray's driver starts a control daemon of its own, as this user,
in its private folder (orchestrator/privatedir.py), and its workers, which inherit
the driver's environment, find it through CUDA_MPS_PIPE_DIRECTORY; nothing needs
root, and no setting of the GPU (its compute mode) changes. `auto` starts it only on
the GPUs where it measured faster (MEASURED_FASTER):

    <private folder>/mps/<driver pid>-<start>/
        driver.json   the driver's pid, its start and the boot (as a Ray session's record)
        pipe/         CUDA_MPS_PIPE_DIRECTORY: the daemon's control pipe, the one way to reach it
        log/          CUDA_MPS_LOG_DIRECTORY: its control.log and server.log

The daemon is told `quit` through its own pipe when the driver ends (the sweep's
end, Ctrl-C, SIGTERM, a crash: after Ray's workers, its clients, are shut down). A
daemon whose driver was killed (SIGKILL) is ended by the next start, as the Ray
processes such a driver left are: told `quit` through its pipe, then, where it
lingers, this user's MPS programs that hold that folder open are killed. A daemon
of another user, or this user's own started by hand, has no folder here and is
never touched. A daemon that fails to start is named, and the sweep runs
time-sliced."""

import atexit
import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Optional

from orchestrator.privatedir import boot_id, driver_alive, processes_naming, started

CONTROL = "nvidia-cuda-mps-control"
# The GPUs (nvidia-smi's names) where trials sharing the GPU measured faster under MPS
# than time-sliced (bench/gpu_check.sh's sweep and sweep_mps steps; docs/gpu.md):
# `resources.mps: auto` starts a daemon there.
MEASURED_FASTER: tuple[str, ...] = ()
FOLDER = "mps"
RECORD = "driver.json"
START_WAIT_S = 30.0  # `-d` forks the daemon and returns at once
STOP_WAIT_S = 10.0  # `quit` waits for the daemon's clients; Ray's are gone by then


class MPSError(RuntimeError):
    """The daemon did not start: the message says what failed."""


class Daemon:
    """One driver's MPS control daemon, in `folder` (module docstring)."""

    def __init__(self, folder: Path):
        self.folder = Path(folder)
        self.pipe, self.log = self.folder / "pipe", self.folder / "log"

    @property
    def env(self) -> dict[str, str]:
        """What its clients (and the control program) need in their environment."""
        return {"CUDA_MPS_PIPE_DIRECTORY": str(self.pipe), "CUDA_MPS_LOG_DIRECTORY": str(self.log)}

    def start(self) -> None:
        """Starts the daemon (`nvidia-cuda-mps-control -d`), or MPSError saying why not."""
        program = shutil.which(CONTROL)
        if program is None:
            raise MPSError(f"{CONTROL} is not on PATH (it comes with NVIDIA's driver)")
        for folder in (self.folder, self.pipe, self.log):
            folder.mkdir(mode=0o700, exist_ok=True)
        pid = os.getpid()
        (self.folder / RECORD).write_text(json.dumps({"driver_pid": pid, "driver_start": started(pid), "boot": boot_id()}))
        try:
            done = subprocess.run([program, "-d"], env={**os.environ, **self.env}, stdin=subprocess.DEVNULL,
                                  capture_output=True, text=True, timeout=START_WAIT_S)
        except (OSError, subprocess.TimeoutExpired) as e:
            self.stop()
            raise MPSError(f"{CONTROL} -d failed ({type(e).__name__}: {e})") from None
        if done.returncode != 0:
            said = (done.stderr or done.stdout).strip().splitlines()
            self.stop()
            raise MPSError(f"{CONTROL} -d exited with {done.returncode}" + (f": {said[-1]}" if said else "")
                           + f" (its log: {self.log})")

    def stop(self) -> int:
        """Ends the daemon: `quit` through its pipe, then, after STOP_WAIT_S, a kill of
        this user's MPS programs still holding its folder; the folder removed where
        nothing holds it. Returns how many processes were killed."""
        program = shutil.which(CONTROL)
        if program is not None and self.pipe.is_dir():
            with contextlib.suppress(OSError, subprocess.TimeoutExpired):
                subprocess.run([program], input="quit\n", env={**os.environ, **self.env}, capture_output=True,
                               text=True, timeout=STOP_WAIT_S)
        deadline = time.monotonic() + STOP_WAIT_S
        while self.holders() and time.monotonic() < deadline:
            time.sleep(0.1)
        killed = 0
        for pid, _ in self.holders():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
                killed += 1
        deadline = time.monotonic() + 1.0
        while killed and self.holders() and time.monotonic() < deadline:
            time.sleep(0.05)
        if not self.holders():
            shutil.rmtree(self.folder, ignore_errors=True)
        return killed

    def holders(self) -> list[tuple[int, list[str]]]:
        """This user's MPS programs (nvidia-cuda-mps-*) whose command line or open files name the folder."""
        return [(pid, argv) for pid, argv in processes_naming(str(self.folder))
                if argv and any(Path(a).name.startswith("nvidia-cuda-mps") for a in argv[:2])]


def daemons_folder(base: Path) -> Path:
    return Path(base) / FOLDER


def start_for_this_driver(base: Path) -> Daemon:
    """Starts this driver's daemon in the private folder `base`, puts its pipe in this
    process's environment (the embedded Ray's workers inherit it), and stops it when
    the driver ends, after Ray; MPSError where it does not start."""
    pid = os.getpid()
    root = daemons_folder(base)
    root.mkdir(mode=0o700, exist_ok=True)
    daemon = Daemon(root / f"{pid}-{started(pid)}")
    daemon.start()
    os.environ.update(daemon.env)
    atexit.register(_stop_after_ray, daemon)
    return daemon


def _stop_after_ray(daemon: Daemon) -> None:
    """At the driver's end: Ray's workers (the daemon's clients) shut down first, then the daemon."""
    import sys

    ray = sys.modules.get("ray")
    if ray is not None:
        with contextlib.suppress(Exception):
            ray.shutdown()
    daemon.stop()


def end_orphan_daemons(base: Path) -> tuple[int, list[str]]:
    """Ends the daemons that drivers of this tool, now gone, started under `base`;
    returns how many it ended and a note for each it could not."""
    root = daemons_folder(base)
    ended, notes = 0, []
    for record in sorted(root.glob(f"*/{RECORD}")) if root.is_dir() else ():
        try:
            data = json.loads(record.read_text())
        except (OSError, ValueError):
            data = None
        if isinstance(data, dict) and isinstance(data.get("driver_pid"), int) and driver_alive(data):
            continue
        daemon = Daemon(record.parent)
        had = bool(daemon.holders())
        daemon.stop()
        if daemon.holders():
            notes.append(f"Left running: the MPS daemon of a killed icr-sweep in {daemon.folder} did not end.")
        elif had:
            ended += 1
    return ended, notes


def wanted(setting: str, embedded: bool, shares_a_gpu: bool, gpus: tuple[str, ...] = ()) -> tuple[bool, Optional[str]]:
    """Whether a launch starts a daemon (resources.mps: on, off, auto), and a note
    where the setting asks for one that this launch cannot have. auto: where the
    trials share one of this machine's GPUs (`gpus`, their names), each of a kind
    MPS measured faster on, and the control program is on PATH."""
    if setting == "off":
        return False, None
    if not embedded:
        return False, ("resources.mps: on starts a daemon for the embedded Ray alone; on an attached cluster, start "
                       "MPS on its GPU nodes yourself") if setting == "on" else None
    if setting == "on":
        return True, None
    measured = bool(gpus) and all(gpu in MEASURED_FASTER for gpu in gpus)
    return shares_a_gpu and measured and shutil.which(CONTROL) is not None, None
