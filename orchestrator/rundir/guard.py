"""A run directory's guards: checked before anything starts, locked while a driver
works on it, claimed by one trial of `train` at most.

The lock is an OS lock (flock) on a file in the run directory, held for the
whole launch or resume: a second driver on the same sweep is refused, and a
driver that dies, even by SIGKILL, releases it with its process.
"""

import contextlib
import errno
import fcntl
import json
import os
from pathlib import Path
from typing import Optional

from orchestrator.rundir.layout import BEFORE_ANY_TRIAL, LOCK_FILE, PARAMS_FILE, TRIAL_LOCK_FILE, sweep_above
from orchestrator.storage import RunDirError, check_remote, is_remote

NAME_MAX, PATH_MAX = 255, 4096


def claim_trial_dir(out: str, config: dict, name: str) -> None:
    """Refuses (RunDirError) a `train --out` directory that another run owns: a
    sweep's run directory or anything inside it, a directory of trials, or a trial
    of another config (the same config is this trial's own: it resumes). One rule,
    so that no command can overwrite another's results."""
    if not str(out).strip():
        raise RunDirError("--out is empty; name the trial's own directory, e.g. --out runs/my-trial")
    path = Path(out).resolve()
    sweep = sweep_above(path)
    if sweep is not None:
        where = "is" if sweep == path else f"lies inside {sweep}, which is"
        raise RunDirError(f"--out {out} {where} a sweep's run directory (launched by `icr-sweep launch`); a trial "
                          "of `train` needs a directory of its own outside any sweep")
    trials = sorted(p.parent.name for p in path.glob(f"*/{PARAMS_FILE}"))
    if trials:
        raise RunDirError(f"--out {out} holds the directories of other trials ({', '.join(trials[:3])}"
                          f"{', ...' if len(trials) > 3 else ''}); give this trial a directory of its own")
    params = path / PARAMS_FILE
    if params.is_file():
        try:
            stored = json.loads(params.read_text())["trial"]
        except (OSError, ValueError, KeyError, TypeError):
            raise RunDirError(f"--out {out} holds a {PARAMS_FILE} that cannot be read; it is not this trial's "
                              "directory: choose another --out, or delete it to start over") from None
        from workloads.checkpoint import as_today, differences, what_trains

        held = what_trains(as_today(stored)) if isinstance(stored, dict) else {}
        if held != what_trains(config):
            differ = "; ".join(differences(held, what_trains(config), held="stored"))
            raise RunDirError(f"--out {out} holds the trial {_name_of(stored)}, of another config ({differ}), not "
                              f"{name}; its results stay: give this trial another --out")


def _name_of(config) -> str:
    from pydantic import ValidationError

    from workloads.config import TrialConfig

    try:
        return TrialConfig.model_validate(config).name
    except ValidationError:
        return "of another config"


def discard_unstarted(run_dir: str) -> bool:
    """Removes what a launch wrote into a local run directory that no trial ever
    started in (a Ray start that failed, a stop seconds after launch), and the
    directory itself when that leaves it empty: the next launch of the spec then
    starts afresh instead of finding a half-made run. Returns whether it did."""
    if is_remote(run_dir):
        return False
    path = Path(run_dir)
    if not path.is_dir() or any(path.glob(f"*/{PARAMS_FILE}")):
        return False
    for pattern in BEFORE_ANY_TRIAL:
        for file in path.glob(pattern):
            file.unlink(missing_ok=True)
    with contextlib.suppress(OSError):
        path.rmdir()  # only when empty: a directory that held files of the user's keeps them
    return True


def check_launch_dir(run_dir: str) -> None:
    """Refuses (RunDirError) a local sweep run directory that is a trial of `train`,
    or lies inside another sweep's run directory."""
    if is_remote(run_dir):
        return
    path = Path(run_dir.removeprefix("file://")).resolve()
    if (path / PARAMS_FILE).is_file():
        raise RunDirError(f"{path} is the directory of one trial (`icr-sweep train --out`); choose another "
                          "name or --storage for the sweep")
    sweep = sweep_above(path.parent)
    if sweep is not None:
        raise RunDirError(f"{path} lies inside the sweep run directory {sweep}; choose another --storage")


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

    def __init__(self, run_dir: str, file: str = LOCK_FILE):
        self.path = Path(run_dir) / file
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
            if self.path.name == TRIAL_LOCK_FILE:
                raise RunDirError(f"{self.path.parent} is in use by another `icr-sweep train` (pid {holder}); wait "
                                  "for it to end, or stop it, then run the same command to continue") from None
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
