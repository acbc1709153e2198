"""A sweep's run directory: checked before anything starts, locked while a driver
works on it, and read for what Ray Tune recorded of each trial. No Ray import.

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

from orchestrator.storage import RunDirError, check_remote, is_remote  # noqa: F401  (RunDirError: callers import it here)

LOCK_FILE = ".icr-sweep.lock"
SPEC_FILE = "icr-sweep.json"  # the resolved spec, written into the run directory by launch
PARAMS_FILE = "params.json"  # a trial's config, beside its result rows
NAME_MAX, PATH_MAX = 255, 4096


def _sweep_above(path: Path) -> Optional[Path]:
    """The sweep run directory that `path` is, or lies inside (it holds the spec
    record or the driver lock); None when there is none."""
    for folder in (path, *path.parents):
        if (folder / SPEC_FILE).is_file() or (folder / LOCK_FILE).is_file():
            return folder
    return None


def claim_trial_dir(out: str, config: dict, name: str) -> None:
    """Refuses (RunDirError) a `train --out` directory that another run owns: a
    sweep's run directory or anything inside it, a directory of trials, or a trial
    of another config (the same config is this trial's own: it resumes). One rule,
    so that no command can overwrite another's results."""
    if not str(out).strip():
        raise RunDirError("--out is empty; name the trial's own directory, e.g. --out runs/my-trial")
    path = Path(out).resolve()
    sweep = _sweep_above(path)
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
        from workloads.train import as_today, differences, what_trains

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


# What a launch writes into its run directory before its first trial starts: its own
# records (the lock, the spec, a stop request, Optuna's and MLflow's databases) and
# Ray Tune's (its storage marker, tuner and experiment state).
_BEFORE_ANY_TRIAL = (LOCK_FILE, SPEC_FILE, ".icr-stop", "optuna.db", "mlflow.db", ".validate_storage_marker",
                     "tuner.pkl", "experiment_state-*.json", "basic-variant-state-*.json", "searcher-state-*.pkl")


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
    for pattern in _BEFORE_ANY_TRIAL:
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
    sweep = _sweep_above(path.parent)
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
    trials, problem = tune_trials(run_dir)
    return {name: status for name, (status, _) in trials.items()}, problem


def tune_trials(run_dir: str | Path) -> tuple[dict[str, tuple[str, Optional[dict]]], str]:
    """(status, trial config) of each trial Tune recorded, by directory name: the
    config of a trial Tune created but never started (no params.json yet) is there."""
    files = sorted(Path(run_dir).glob("experiment_state-*.json"))
    if not files:
        return {}, ""
    try:
        state = json.loads(files[-1].read_text())
        trials = {}
        for trial_json, _ in state["trial_data"]:
            trial = json.loads(trial_json)
            config = trial.get("config")
            trials[trial["relative_logdir"]] = (trial["status"], config.get("trial") if isinstance(config, dict) else None)
        return trials, ""
    except (OSError, ValueError, KeyError, TypeError) as e:
        return {}, f"{files[-1].name}: unreadable ({type(e).__name__}: {e}); trial states come from the trial files"


def parse_rows(text: str) -> list[dict]:
    """The rows of a result.json's text that are JSON objects (a line cut short is not)."""
    rows = []
    for line in text.splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(row, dict):
            rows.append(row)
    return rows


def row_stored(rows: list[dict], row: dict) -> bool:
    """Whether `rows` hold `row`: one at its sample count, an evaluation or not alike."""
    evaluated = row.get("evaluated", True)
    return any(r.get("samples") == row.get("samples") and r.get("evaluated", True) == evaluated for r in rows)


def rows_unstored(stored: list[dict], rows: list[dict]) -> list[dict]:
    """The tail of `rows` (a resumed trial's, in order) from the first one `stored`
    lacks: reported again in order, it keeps the trial's timeline whole (a row
    reported twice replaces the earlier one on it)."""
    for i, row in enumerate(rows):
        if not row_stored(stored, row):
            return rows[i:]
    return []


DAMAGED_RESULTS = "result-damaged.json"  # a result.json set aside by restore_rows, as it was


def rows_to_restore(trial_dir: Path, rows: list[dict], status: Optional[str]) -> list[dict]:
    """The evaluation rows a trial's newest intact checkpoint holds that its stored
    `rows` lack, where Tune will not run the trial again to write them (it recorded
    it TERMINATED): a final row cut short, a result.json emptied. Empty otherwise."""
    if status != "TERMINATED" or (rows and rows[-1].get("final_eval")):
        return []
    history = _newest_history(trial_dir)
    done = max((r.get("samples", 0) for r in rows), default=0)
    return [r for r in history if r.get("samples", 0) > done]


def torn(text: str) -> bool:
    """Whether a result.json's text holds a row cut short (a full disk, a kill inside a
    write): a line that is not a JSON object, or a last line without its newline, onto
    which the next row Tune appends would be glued, and lost with it."""
    if text and not text.endswith("\n"):
        return True
    return len(parse_rows(text)) < sum(1 for line in text.splitlines() if line.strip())


def _newest_history(trial_dir: Path) -> list[dict]:
    """The evaluations kept in the trial's newest readable checkpoint."""
    from workloads.train import CHECKPOINT_FILE, CheckpointError, read_checkpoint

    for folder in sorted(trial_dir.glob("checkpoint_*"), reverse=True):
        try:
            return list(read_checkpoint(folder / CHECKPOINT_FILE).get("history", []))
        except CheckpointError:
            continue
    return []


def restore_rows(run_dir: str) -> dict[str, str]:
    """Runs `repair_results` on each trial of a local run before it resumes; returns
    what was done, by trial."""
    if is_remote(run_dir):
        return {}
    statuses, _ = tune_statuses(run_dir)
    names = set(statuses) | {p.parent.name for p in Path(run_dir).glob("*/result.json")}
    done = {name: repair_results(Path(run_dir) / name, statuses.get(name)) for name in sorted(names)}
    return {name: what for name, what in done.items() if what}


def repair_results(trial_dir: Path, status: Optional[str] = None) -> str:
    """Repairs a trial's result.json that `torn` finds cut short (its intact rows kept,
    so that the rows appended next are read) or that lacks the rows `rows_to_restore`
    finds (written back from the checkpoint). The file as it was is set aside first
    (DAMAGED_RESULTS, numbered if one is there). Returns what was done ('' if nothing)."""
    results = trial_dir / "result.json"
    text = results.read_text(errors="replace") if results.exists() else ""
    rows = parse_rows(text)
    missing = rows_to_restore(trial_dir, rows, status)
    cut = torn(text)
    if not missing and not cut:
        return ""
    kept = _set_aside(results) if text else None
    tmp = results.with_suffix(".tmp")
    tmp.write_text("".join(json.dumps(r) + "\n" for r in rows + missing))
    os.replace(tmp, results)
    what = []
    if cut:
        what.append("its result.json held a row cut short (a full disk or a kill mid-write); its intact rows are kept")
    if missing:
        what.append("Tune recorded it finished, but its results lacked evaluations its checkpoint holds; restored them")
    return "; ".join(what) + (f" (the file as it was is kept as {trial_dir.name}/{kept})" if kept else "")


def _set_aside(results: Path) -> str:
    """Moves a damaged result.json aside under a name no earlier repair used; returns it."""
    stem, suffix = Path(DAMAGED_RESULTS).stem, Path(DAMAGED_RESULTS).suffix
    k = 1
    while (target := results.parent / (DAMAGED_RESULTS if k == 1 else f"{stem}-{k}{suffix}")).exists():
        k += 1
    os.replace(results, target)
    return target.name
