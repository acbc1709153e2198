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
import shutil
import tempfile
from pathlib import Path
from typing import Optional

from orchestrator.rundir.layout import (BEFORE_ANY_TRIAL, EARLIER_RESULTS, LAUNCH_WRITES, LOCK_FILE, PARAMS_FILE, PLAN_FILE,
                                        REPORT_FILES,
                                        REPORT_MANIFEST, RESULTS_FILE, SPEC_FILE, TRIAL_LOCK_FILE, TRIAL_WRITES,
                                        launch_entries, named_like, sweep_above)
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
    sweeps = sorted(p.parent.name for name in (SPEC_FILE, LOCK_FILE) for p in path.glob(f"*/{name}"))
    if sweeps:
        shown = ", ".join(sorted(set(sweeps))[:6]) + (", ..." if len(set(sweeps)) > 6 else "")
        raise RunDirError(f"--out {out} holds the sweeps {shown} (a storage folder); give this trial a directory of "
                          "its own, e.g. --out runs/my-trial")
    trials = sorted(p.parent.name for p in path.glob(f"*/{PARAMS_FILE}"))
    if trials:
        raise RunDirError(f"--out {out} holds the directories of other trials ({', '.join(trials[:3])}"
                          f"{', ...' if len(trials) > 3 else ''}); give this trial a directory of its own")
    params = path / PARAMS_FILE
    if path.is_dir() and not params.is_file() and not (path / TRIAL_LOCK_FILE).is_file():
        _refuse_foreign(path, named_like(path, TRIAL_WRITES), f"--out {out}", "no run of icr-sweep (no params.json)",
                        "give this trial another --out")
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


def _refuse_foreign(path: Path, found: list[str], what: str, because: str, instead: str) -> None:
    """RunDirError naming the files of `path` that the command would write, when the
    folder is not the tool's own (`because` says why not): they are someone's."""
    if found:
        shown = ", ".join(found[:8]) + (f", ... ({len(found)} in all)" if len(found) > 8 else "")
        raise RunDirError(f"{what} holds {shown}, named like files icr-sweep writes, but is {because}: they are not "
                          f"this tool's, and nothing of them is touched. Move them elsewhere, or {instead}")


class Footprint:
    """What a local run directory held before a launch wrote anything, so that a
    launch that ends before any trial started (a Ray start that failed, a refusal,
    a stop seconds in) removes exactly what it created: the new entries with the
    names a launch writes, the new folders named as a launch names its own (its
    trackers', trials' and arrays': `launch_folder`), then the run directory and
    the folders above it that it made, each only when that leaves it empty. What
    was there before is never touched, and a new file or folder of any other name
    (a user's, made meanwhile) is kept. Taken before `check_storage`, which makes
    the folders."""

    def __init__(self, run_dir: str, trackers: tuple[str, ...] = ()):
        self.trackers = trackers  # the trackers whose folders the launch makes there (orchestrator/trackers/)
        self.path = None if is_remote(run_dir) else Path(run_dir.removeprefix("file://"))
        self.made: Optional[Path] = None  # the highest folder the launch creates (None: all were there)
        self.before: set[str] = set()
        if self.path is None:
            return
        try:
            folder = self.path
            while not folder.exists() and folder != folder.parent:
                self.made, folder = folder, folder.parent
            self.before = set(os.listdir(self.path)) if self.path.is_dir() else set()
        except OSError:  # a path too long to look into: check_storage refuses it next, and nothing is removed
            self.path, self.made = None, None

    def discard(self) -> Optional[list[str]]:
        """Removes what the launch created, if no trial started; returns the new
        entries it kept (not a launch's), or None where it removed nothing (a remote
        run directory, or a trial that started: its run is kept for resume)."""
        path = self.path
        if path is None or not path.is_dir() or any(path.glob(f"*/{PARAMS_FILE}")):
            return None
        kept, launchs = [], set(named_like(path, BEFORE_ANY_TRIAL))
        for name in sorted(set(os.listdir(path)) - self.before):
            entry = path / name
            if entry.is_dir() and not entry.is_symlink():
                own = launch_entries(entry, self.trackers)
                for inside in (entry / e for e in own or ()):  # a started trial's holds params.json
                    if inside.is_dir() and not inside.is_symlink():
                        shutil.rmtree(inside, ignore_errors=True)
                    else:
                        inside.unlink(missing_ok=True)
                if own is not None:
                    with contextlib.suppress(OSError):
                        entry.rmdir()  # only when empty: what another hand put there stays
                if entry.exists():
                    kept.append(f"{name}/")
            elif name in launchs:
                entry.unlink(missing_ok=True)
            else:
                kept.append(name)
        folder = path
        while self.made is not None and folder.is_relative_to(self.made):
            with contextlib.suppress(OSError):
                folder.rmdir()  # only when empty
            folder = folder.parent
        return kept


def check_launch_dir(run_dir: str) -> None:
    """Refuses (RunDirError) a local sweep run directory that is a trial of `train`,
    lies inside another sweep's run directory, or holds files named like those a
    launch writes without being a run of this tool (a user's mlflow.db, say: the
    launch would write into it, and remove it if stopped before any trial)."""
    if is_remote(run_dir):
        return
    path = Path(run_dir.removeprefix("file://")).resolve()
    if (path / PARAMS_FILE).is_file():
        raise RunDirError(f"{path} is the directory of one trial (`icr-sweep train --out`); choose another "
                          "name or --storage for the sweep")
    sweep = sweep_above(path.parent)
    if sweep is not None:
        raise RunDirError(f"{path} lies inside the sweep run directory {sweep}; choose another --storage")
    if path.is_dir() and sweep_above(path) is None:
        trials = [f"{p.parent.name}/" for name in (PARAMS_FILE, RESULTS_FILE) for p in path.glob(f"*/{name}")]
        _refuse_foreign(path, named_like(path, LAUNCH_WRITES) + sorted(set(trials)), str(path),
                        f"no run of icr-sweep (no {SPEC_FILE})", "choose another name or --storage for the sweep")


def report_owned(out_dir: Path) -> Optional[set[str]]:
    """The report files in `out_dir` that an earlier report wrote, and may be replaced
    or removed: every one in a sweep's or a trial's directory (a launch or `train`
    refuses a folder that held such names), else those REPORT_MANIFEST lists. None
    means all."""
    out_dir = Path(out_dir)
    if (out_dir / SPEC_FILE).is_file() or (out_dir / PARAMS_FILE).is_file():
        return None
    try:
        names = json.loads((out_dir / REPORT_MANIFEST).read_text())["files"]
        return {n for n in names if isinstance(n, str)}
    except (OSError, ValueError, KeyError, TypeError):
        return set()


def check_report_dir(out_dir: Path, flag: str = "the run directory") -> Optional[set[str]]:
    """Refuses (RunDirError) to write a report into a folder holding report files that
    no report of this tool wrote (a user's report.md or best.csv), naming them;
    returns the report files it may replace (`report_owned`)."""
    owned = report_owned(out_dir)
    if owned is not None and Path(out_dir).is_dir():
        found = [name for name in named_like(out_dir, REPORT_FILES) if name not in owned]
        _refuse_foreign(Path(out_dir), found, str(out_dir), "not a run of icr-sweep, and no report of it wrote them",
                        f"choose another {flag}")
    return owned


def record_report(out_dir: Path, names: list[str]) -> None:
    """Notes the files a report wrote into `out_dir` (REPORT_MANIFEST), with those
    noted before: only these are ever replaced or removed by a later report."""
    earlier = report_owned(out_dir) or set()
    (Path(out_dir) / REPORT_MANIFEST).write_text(json.dumps({"files": sorted(earlier | set(names))}, indent=1))


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
    try:  # a real write: permission bits say nothing of root, read-only mounts or quotas
        path.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".icr-sweep-probe-", dir=path)  # a new name: no file of the user's is met
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise RunDirError(f"{path} cannot be written ({e.strerror or e}); choose another {flag}") from None


class RunLock:
    """Holds the run directory's lock; `RunDirError` if another process holds it."""

    def __init__(self, run_dir: str, file: str = LOCK_FILE):
        self.path = Path(run_dir) / file
        self._fd: Optional[int] = None

    def __enter__(self) -> "RunLock":
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as e:  # a directory of that name, say: one line, not a traceback
            what = "a directory, not" if e.errno == errno.EISDIR else f"unusable ({e.strerror}) as"
            raise RunDirError(f"{self.path} is {what} the lock file icr-sweep keeps there; move it away, then run "
                              "the same command again") from None
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


def blocked_files(run_dir: str | Path) -> list[str]:
    """The files of a local run directory that icr-sweep writes into but that are not
    files (a directory, a socket): a driver stopped at the first write there, and
    every resume again (issue 65, class 6). Each with what it holds."""
    run_dir = Path(run_dir)
    kept = {RESULTS_FILE: "results", PARAMS_FILE: "config", EARLIER_RESULTS: "earlier results"}
    found = [(run_dir / name, f"the sweep's {what}") for name, what in ((SPEC_FILE, "spec record"),
                                                                         (PLAN_FILE, "plan"))]
    for trial in sorted(p for p in run_dir.iterdir() if p.is_dir() and not p.is_symlink()):
        found += [(trial / name, f"the trial's {what}") for name, what in kept.items()]
    return [f"{path} is not a file (it holds {what})" for path, what in found
            if (path.exists() or path.is_symlink()) and not path.is_file()]


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
