"""How a sweep stops: Ctrl-C or SIGTERM asks each running trial to checkpoint the
step it is at (through a stop file in the run directory) before Tune stops it."""

import contextlib
import os
import signal
import sys
import threading
import time
from pathlib import Path

from ray import tune

from orchestrator.rundir import STOP_FILE
from orchestrator.storage import is_remote


# A driver asked to stop (Ctrl-C, SIGTERM) first writes this file into the run
# directory (local storage); each running trial, seeing it after its current step,
# checkpoints that step and reports it, and the driver then lets Tune stop.
# Elsewhere (remote storage) trials keep their time-based checkpoints.
STOP_WAIT_S = 60.0  # the longest the driver waits for those checkpoints


class _EarlyStop:
    """Ctrl-C between Ray's start and Tune's loop: raised as KeyboardInterrupt, as
    Python's own handler does, and remembered, so that one a library swallows on the
    way still stops the sweep before its first trial (Tune's loop checks it)."""

    def __init__(self):
        self.requested = False

    def handler(self, signum, frame):
        self.requested = True
        raise KeyboardInterrupt


EARLY_STOP = _EarlyStop()


@contextlib.contextmanager
def ctrl_c_remembered():
    """Within it, a Ctrl-C is remembered (EARLY_STOP) as well as raised."""
    EARLY_STOP.requested = False
    previous = signal.signal(signal.SIGINT, EARLY_STOP.handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def stop_if_asked_early() -> None:
    """KeyboardInterrupt where a Ctrl-C came before Tune's loop and was swallowed."""
    if EARLY_STOP.requested:
        raise KeyboardInterrupt


class StopRequests:
    """True once for each stop request written to `path` (by its modification time)."""

    def __init__(self, path: Path):
        self.path = path
        self.seen = self._stamp()

    def _stamp(self):
        try:
            return self.path.stat().st_mtime_ns
        except OSError:
            return None

    def __call__(self) -> bool:
        stamp = self._stamp()
        if stamp is None or stamp == self.seen:
            return False
        self.seen = stamp
        return True


class StopAtStep(tune.Callback):
    """Ctrl-C (or SIGTERM, forwarded as Ctrl-C) asks the running trials to checkpoint
    the step they are at before Tune stops them: Tune's own handler is called once
    every running trial has reported that checkpoint, after STOP_WAIT_S, or at a
    second Ctrl-C. Tune installs its handler before it sets its callbacks up."""

    def __init__(self, run_dir: str):
        self.stop_file = None if is_remote(run_dir) else Path(run_dir, STOP_FILE)
        self.asked_at, self.reported, self.tune_handler = None, set(), None

    def __getstate__(self):  # pickled with the run config: the signal handlers stay behind
        return {"stop_file": self.stop_file, "asked_at": None, "reported": set(), "tune_handler": None}

    def setup(self, **info):
        if self.stop_file is None:
            return
        self.stop_file.unlink(missing_ok=True)  # a stale request of a driver that was killed
        handler = signal.getsignal(signal.SIGINT)
        if callable(handler) and threading.current_thread() is threading.main_thread():
            self.tune_handler = handler
            signal.signal(signal.SIGINT, self._asked)
            if EARLY_STOP.requested:  # asked before Tune's loop and swallowed on the way: stop before any trial
                self._stop_now()

    def _asked(self, signum, frame):
        if self.asked_at is not None:
            return self._stop_now(signum, frame)
        self.asked_at = time.monotonic()
        self.stop_file.write_bytes(b"")
        print("Stopping: each running trial first checkpoints the step it is at (Ctrl-C again to stop at once).",
              file=sys.stderr, flush=True)

    def _stop_now(self, signum=signal.SIGINT, frame=None):
        signal.signal(signal.SIGINT, self.tune_handler)
        self.stop_file.unlink(missing_ok=True)
        self.tune_handler(signum, frame)

    def on_trial_result(self, iteration, trials, trial, result, **info):
        if self.asked_at is not None and result.get("checkpoint_reason") == "stop":
            self.reported.add(trial.trial_id)

    def on_step_begin(self, iteration, trials, **info):
        if self.asked_at is None or self.tune_handler is None:
            return
        running = {t.trial_id for t in trials if t.status == "RUNNING"}
        if running <= self.reported or time.monotonic() - self.asked_at > STOP_WAIT_S:
            self.asked_at = None
            self._stop_now()


@contextlib.contextmanager
def sigterm_as_ctrl_c():
    """SIGTERM (what a cluster, a scheduler or a spot instance sends) stops the sweep
    as Ctrl-C does: Tune saves its state, the trials keep their checkpoints, and
    the command ends with the report and the resume command. Installed after Ray
    starts, whose own handler would end the driver with a stack dump."""
    def forward(signum, frame):
        os.kill(os.getpid(), signal.SIGINT)

    previous = signal.signal(signal.SIGTERM, forward)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
