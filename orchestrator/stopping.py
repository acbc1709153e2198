"""How a trial stops, in a sweep and in `train` alike: Ctrl-C or SIGTERM writes a
stop file (the run directory's, or `train --out`'s), and the trial, reading it
after its current step (`StopRequests`, its `Hooks.stop`), checkpoints that step.
`train`'s trial then ends; a sweep's trains on until Tune, told by the driver once
every running trial has reported its checkpoint (StopAtStep in tune.py), stops it.
Nothing here imports Ray: `train` runs without it."""

import contextlib
import os
import signal
import sys
from pathlib import Path
from typing import Callable, Optional



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
    """Within it, a Ctrl-C is remembered (EARLY_STOP) as well as raised, and SIGTERM
    is a Ctrl-C (`sigterm_after_ray_start` keeps it one once Ray has started)."""
    EARLY_STOP.requested = False
    previous = {signal.SIGINT: signal.signal(signal.SIGINT, EARLY_STOP.handler),
                signal.SIGTERM: signal.signal(signal.SIGTERM, _as_ctrl_c)}
    unraisable = sys.unraisablehook

    def quiet(info):  # the Ctrl-C raised inside a finalizer: remembered, not printed as "Exception ignored"
        if not (issubclass(info.exc_type, KeyboardInterrupt) and EARLY_STOP.requested):
            unraisable(info)

    sys.unraisablehook = quiet
    try:
        yield
    finally:
        sys.unraisablehook = unraisable
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def sigterm_after_ray_start() -> None:
    """SIGTERM a Ctrl-C again once ray.init has returned: Ray's own handler, which it
    installs as it starts, ended the driver with a stack dump and SIGABRT (exit -6),
    its run directory left half made (issue 64: a SIGTERM at start-up)."""
    if signal.getsignal(signal.SIGINT) == EARLY_STOP.handler:  # within ctrl_c_remembered (a bound method: ==)
        signal.signal(signal.SIGTERM, _as_ctrl_c)


def _as_ctrl_c(signum, frame):
    """SIGTERM handled as a Ctrl-C: by SIGINT's handler of the moment (ours, Tune's),
    or as Python's own would where SIGINT is ignored (a driver a shell without job
    control started in the background, `nohup icr-sweep launch ... &`: the SIGINT
    sent on would be dropped, and the SIGTERM with it)."""
    if callable(signal.getsignal(signal.SIGINT)):
        os.kill(os.getpid(), signal.SIGINT)
    else:
        raise KeyboardInterrupt


def stop_if_asked_early() -> None:
    """KeyboardInterrupt where a Ctrl-C came before Tune's loop and was swallowed."""
    if EARLY_STOP.requested:
        raise KeyboardInterrupt


class StopRequests:
    """True once for each stop request written to `path` (by its modification time).
    A request already written when the trial starts counts: the driver (StopAtStep)
    and `train` (StopOnSignals) remove a stale one before any trial starts, so a
    file there is a stop asked while this trial was being started (issue 83: a
    trial ignored a stop sent in its first second and trained to its end)."""

    def __init__(self, path: Path):
        self.path = path
        self.seen = None

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


class StopOnSignals:
    """Within it, SIGINT or SIGTERM (Ctrl-C, a cluster's or a spot instance's stop)
    writes `stop_file`, which the trial reads (`StopRequests`); a second signal stops
    at once (KeyboardInterrupt). `name` is the first signal's."""

    def __init__(self, stop_file: Path, say: Callable[[str], None]):
        self.stop_file, self.say = Path(stop_file), say
        self.name: Optional[str] = None
        self.previous = {}

    def handle(self, signum, frame):
        if self.name is not None:
            raise KeyboardInterrupt
        self.name = signal.Signals(signum).name
        self.stop_file.write_bytes(b"")
        self.say(f"{self.name}: stopping after this step with a checkpoint (again to stop at once)")

    def __enter__(self):
        self.stop_file.unlink(missing_ok=True)  # a stale request of a `train` that was killed
        for sig in (signal.SIGINT, signal.SIGTERM):
            self.previous[sig] = signal.signal(sig, self.handle)
        return self

    def __exit__(self, *exc):
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)
        self.stop_file.unlink(missing_ok=True)


@contextlib.contextmanager
def sigterm_as_ctrl_c():
    """SIGTERM (what a cluster, a scheduler or a spot instance sends) stops the sweep
    as Ctrl-C does: Tune saves its state, the trials keep their checkpoints, and
    the command ends with the report and the resume command. Installed after Ray
    starts, whose own handler would end the driver with a stack dump. A SIGINT the
    driver was started ignoring (in the background) stops it too, as in Tune's loop."""
    previous = signal.signal(signal.SIGTERM, _as_ctrl_c)
    ignored = signal.getsignal(signal.SIGINT) == signal.SIG_IGN
    if ignored:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
        if ignored:
            signal.signal(signal.SIGINT, signal.SIG_IGN)
