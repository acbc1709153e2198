"""A sweep's run directory: checked before anything starts, locked while a driver
works on it, and read for what Ray Tune recorded of each trial. No Ray import.

The lock is an OS lock (flock) on a file in the run directory, held for the
whole launch or resume: a second driver on the same sweep is refused, and a
driver that dies, even by SIGKILL, releases it with its process.
"""

import errno
import fcntl
import json
import os
from pathlib import Path
from typing import Optional

from orchestrator.storage import RunDirError, check_remote, is_remote  # noqa: F401  (RunDirError: callers import it here)

LOCK_FILE = ".icr-sweep.lock"
NAME_MAX, PATH_MAX = 255, 4096


def check_storage(run_dir: str, flag: str = "--storage") -> None:
    """Creates a local directory and proves it writable, or refuses it (RunDirError)
    before anything starts; `flag` is the option the user would change."""
    if is_remote(run_dir):
        check_remote(run_dir, flag)
        return
    run_dir = run_dir.removeprefix("file://")
    path = Path(run_dir)
    if len(os.fsencode(path)) > PATH_MAX:
        raise RunDirError(f"storage path is {len(os.fsencode(path))} bytes long, over the {PATH_MAX}-byte limit: {path}")
    for part in path.parts:
        if len(os.fsencode(part)) > NAME_MAX:
            raise RunDirError(f"storage path component {part[:40]}... is {len(os.fsencode(part))} bytes, "
                              f"over the {NAME_MAX}-byte limit of a file name")
    existing = path
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise RunDirError(f"{existing} is a file, so {path} cannot be created there; choose another {flag}")
    probe = path / ".icr-sweep-probe"
    try:  # a real write: permission bits say nothing of root, read-only mounts or quotas
        path.mkdir(parents=True, exist_ok=True)
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as e:
        raise RunDirError(f"{path} cannot be written ({e.strerror or e}); choose another {flag}") from None


class RunLock:
    """Holds the run directory's lock; `RunDirError` if another process holds it."""

    def __init__(self, run_dir: str):
        self.path = Path(run_dir) / LOCK_FILE
        self._fd: Optional[int] = None

    def __enter__(self) -> "RunLock":
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            os.close(fd)
            if e.errno not in (errno.EWOULDBLOCK, errno.EACCES):
                raise
            holder = self.path.read_text().strip() or "unknown"
            raise RunDirError(f"{self.path.parent} is in use by another icr-sweep (pid {holder}); "
                              "wait for it to end, or stop it, then resume") from None
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        self._fd = fd
        return self

    def __exit__(self, *exc) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing releases the flock
            self._fd = None


def driver_is_live(run_dir: str | Path) -> bool:
    """Whether a launch or resume is working on the run directory right now."""
    path = Path(run_dir) / LOCK_FILE
    if not path.exists():
        return False
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(fd)  # releases the probe's own lock too
    return False


def tune_statuses(run_dir: str | Path) -> tuple[dict[str, str], str]:
    """Ray Tune's status of each trial (PENDING, RUNNING, PAUSED, TERMINATED, ERROR)
    by directory name, from its newest experiment state; and a problem, if that
    file could not be read ("" when fine or absent)."""
    files = sorted(Path(run_dir).glob("experiment_state-*.json"))
    if not files:
        return {}, ""
    try:
        state = json.loads(files[-1].read_text())
        statuses = {}
        for trial_json, _ in state["trial_data"]:
            trial = json.loads(trial_json)
            statuses[trial["relative_logdir"]] = trial["status"]
        return statuses, ""
    except (OSError, ValueError, KeyError, TypeError) as e:
        return {}, f"{files[-1].name}: unreadable ({type(e).__name__}: {e}); trial states come from the trial files"
