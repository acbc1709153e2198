"""The run directory's own records: the spec as launched, the plan of its trials,
Ray Tune's record of each trial's state, and what a rebuild of the sweep sets aside.
Written locally or to remote storage alike.
"""

import fnmatch
import json
import os
from pathlib import Path
from typing import Optional

from orchestrator.rundir.layout import (DAMAGED_RESULTS, DRIVER_FILE, EARLIER_RESULTS, ERROR_FILE, PLAN_FILE, RESULTS_FILE,
                                        SECRETS_FILE, SPEC_FILE, SYNC_PART, TUNE_STATE, free_path)
from orchestrator.secrets import split_secrets, with_secrets
from orchestrator.storage import is_remote, names_in, read_file, write_file


class RecordError(ValueError):
    """A record of the run directory that is there but cannot be read; the message names it."""


def _write(run_dir: str, name: str, data: dict, private: bool = False) -> None:
    """A record, whole or not at all; `private`: readable by its owner alone (local)."""
    blob = json.dumps(data, indent=1).encode()
    if is_remote(run_dir):
        write_file(f"{run_dir.rstrip('/')}/{name}", blob)
        return
    path = Path(run_dir.removeprefix("file://"), name)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.unlink(missing_ok=True)
    with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600 if private else 0o666), "wb") as f:
        f.write(blob)
    os.replace(tmp, path)  # whole or not at all: a reader never meets half a record


def _read(run_dir: str | Path, name: str) -> Optional[dict]:
    """A record as stored (None where the run holds none); RecordError naming the
    file where it is damaged."""
    location = f"{str(run_dir).rstrip('/')}/{name}"
    if is_remote(str(run_dir)):
        data = read_file(location)
    else:
        path = Path(location.removeprefix("file://"))
        data = path.read_bytes() if path.is_file() else None
    if data is None:
        return None
    try:
        record = json.loads(data.decode("utf-8"))
        if not isinstance(record, dict):
            raise TypeError(f"a {type(record).__name__}, not an object")
        return record
    except (ValueError, TypeError) as e:
        problem = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise RecordError(f"{location} is damaged ({type(e).__name__}: {problem})") from None


def write_spec_record(run_dir: str, spec: dict, resources: dict) -> None:
    """icr-sweep.json: the resolved spec as launched (what resume reads), and the
    resources it was launched with. A URL's secret in it (a tracking server's
    password, an Optuna storage's, a storage's key) is masked there and kept in
    SECRETS_FILE, its owner's alone: icr-sweep.json is read by status, report and
    anyone the run is shared with (issue 83, class 6)."""
    public, hidden = split_secrets(spec)
    if hidden:
        _write(run_dir, SECRETS_FILE, {"secrets": hidden}, private=True)
    _write(run_dir, SPEC_FILE, {"spec": public, "resources": resources})


def spec_location(run_dir: str | Path) -> str:
    """Where the run's spec record is (a path or a URI), for messages."""
    return f"{str(run_dir).rstrip('/')}/{SPEC_FILE}"


def spec_record(run_dir: str | Path) -> Optional[dict]:
    """The stored spec, as launched (a mapping; None where the run holds none): its
    secrets put back where SECRETS_FILE can be read, masked where not;
    RecordError where the file is damaged or holds no spec."""
    record = _read(run_dir, SPEC_FILE)
    if record is None:
        return None
    if not isinstance(record.get("spec"), dict):
        raise RecordError(f"{spec_location(run_dir)} is damaged (it holds no 'spec' object)")
    try:
        hidden = (_read(run_dir, SECRETS_FILE) or {}).get("secrets") or []
    except (RecordError, OSError):  # another user's run, or a damaged file: its secrets stay masked
        hidden = []
    return with_secrets(record["spec"], hidden)[0]


def masked_secrets(spec: dict) -> list[str]:
    """The fields of a stored spec whose URL secret is still masked (its
    SECRETS_FILE missing or unreadable here), dotted: a resume cannot use them."""
    return with_secrets(spec, [])[1]


def write_plan(run_dir: str, method: str, trial_count: int, trials: dict[str, dict], chosen_by: list[str]) -> None:
    """plan.json: the trials the spec plans, written at launch (and by a resume of a
    run launched without one): `trials` maps a grid's trial names to their configs
    (an Optuna search names its trials as it goes: none), `trial_count` counts all;
    `chosen_by`: the metric, mode and tie-break that choose each cell's rate."""
    _write(run_dir, PLAN_FILE, {"method": method, "trial_count": trial_count, "trials": trials,
                                "chosen_by": chosen_by})


def read_plan(run_dir: str | Path) -> Optional[dict]:
    """The stored plan ({"method", "trial_count", "trials", "chosen_by"}), None where the run has
    none (launched by an earlier version); RecordError where it is damaged."""
    plan = _read(run_dir, PLAN_FILE)
    if plan is not None and not (isinstance(plan.get("trials"), dict) and isinstance(plan.get("trial_count"), int)):
        raise RecordError(f"{str(run_dir).rstrip('/')}/{PLAN_FILE} is damaged (no 'trials' or 'trial_count')")
    return plan


def record_driver_end(run_dir: str) -> None:
    """A remote run's record that its driver ended (stopped, failed or done), with
    the experiment state of Tune's it left: remote storage has no driver lock, and
    Tune's last record of a stopped sweep calls its trials running."""
    names = names_in(run_dir) if is_remote(run_dir) else os.listdir(run_dir)
    states = sorted(name for name in names if fnmatch.fnmatch(name, TUNE_STATE))
    _write(run_dir, DRIVER_FILE, {"ended": True, "tune_state": states[-1] if states else None})


def driver_ended(run_dir: str | Path) -> bool:
    """Whether the run's driver ended after Tune last recorded its state (a later
    resume writes a state of its own): then no trial of it is running."""
    try:
        record = _read(run_dir, DRIVER_FILE)
    except RecordError:
        return False
    newest = _newest_state(run_dir)
    return bool(record and record.get("ended") and newest and record.get("tune_state") == newest.name)


def remove_half_written(run_dir: str) -> list[str]:
    """Removes what a killed driver (or one of an earlier version) left half written
    at the top of a local run directory and in its trials' folders: Tune's
    experiment state being saved (.experiment_state-*.json.writing) and a file Tune's
    sync was copying (.<name>.icr-sync); returns their names."""
    if is_remote(run_dir):
        return []
    root = Path(run_dir.removeprefix("file://"))
    found = [*root.glob(f".{TUNE_STATE}.writing"), *root.glob(f".*{SYNC_PART}"), *root.glob(f"*/.*{SYNC_PART}")]
    for path in found:
        path.unlink(missing_ok=True)
    return sorted(str(p.relative_to(root)) for p in found)


def set_aside_plan(run_dir: str) -> str:
    """A damaged plan moved out of the way of the one that replaces it (local runs;
    a remote one is written over); says where."""
    if is_remote(run_dir):
        return "written over"
    kept = free_path(Path(run_dir), PLAN_FILE + ".damaged")
    os.replace(Path(run_dir, PLAN_FILE), kept)
    return f"kept as {kept.name}"


def set_aside_for_rebuild(run_dir: str, unfinished: list[str]) -> None:
    """Before a sweep is rebuilt in `run_dir` (local): Tune's damaged states renamed,
    so that the new experiment's is the one read next; and each unfinished trial's
    rows moved onto its EARLIER_RESULTS, since Tune starts a rebuilt trial's
    result.json afresh (readers read both, earlier first). A state is set aside under
    a name no earlier rebuild used."""
    for state in Path(run_dir).glob(TUNE_STATE.replace("-*", "*")):
        os.replace(state, free_path(state.parent, state.name + ".damaged"))
    set_aside_results(run_dir, unfinished)


def set_aside_results(run_dir: str, unfinished: list[str]) -> None:
    """Each unfinished trial's rows moved onto its EARLIER_RESULTS, before Tune
    starts it as a new trial in its directory (a rebuild, or an Optuna trial its
    saved state lacked), which starts its result.json afresh."""
    for name in unfinished:
        results = Path(run_dir, name, RESULTS_FILE)
        if results.is_file():
            with open(results.with_name(EARLIER_RESULTS), "ab") as earlier:
                earlier.write(results.read_bytes())
            results.unlink()
        elif results.exists():  # not a file (a directory): set aside whole, so that the rebuilt trial can write its rows
            os.replace(results, free_path(results.parent, DAMAGED_RESULTS))


def tune_statuses(run_dir: str | Path) -> tuple[dict[str, str], str]:
    """Ray Tune's status of each trial (PENDING, RUNNING, PAUSED, TERMINATED, ERROR)
    by directory name, from its newest experiment state; and a problem, if that
    file could not be read ("" when fine or absent)."""
    trials, problem = tune_trials(run_dir)
    return {name: status for name, (status, _) in trials.items()}, problem


def tune_trials(run_dir: str | Path) -> tuple[dict[str, tuple[str, Optional[dict]]], str]:
    """(status, trial config) of each trial Tune recorded, by directory name: the
    config of a trial Tune created but never started (no params.json yet) is there.
    An array's Tune trial (orchestrator/arrays.py) is recorded as its members, each
    with the array's status, or ERROR where it failed alone (its error.txt)."""
    newest = _newest_state(run_dir)
    if newest is None:
        return {}, ""
    try:
        trials = {}
        for trial in _tune_state(newest):
            config = trial.get("config")
            array = config.get("array") if isinstance(config, dict) else None
            if isinstance(array, dict):
                trials.update(_members(run_dir, array, trial["status"]))
                continue
            trials[trial["relative_logdir"]] = (trial["status"], config.get("trial") if isinstance(config, dict) else None)
        return trials, ""
    except (OSError, ValueError, KeyError, TypeError) as e:
        return {}, f"{newest.name}: unreadable ({type(e).__name__}: {e}); trial states come from the trial files"


def _newest_state(run_dir: str | Path) -> Optional[Path]:
    """Tune's newest experiment state file in a local run directory (None where none)."""
    files = sorted(Path(run_dir).glob(TUNE_STATE))
    return files[-1] if files else None


def _tune_state(path: Path) -> list[dict]:
    """The trials of one experiment state file of Tune's, each as Tune wrote it."""
    return [json.loads(trial_json) for trial_json, _ in json.loads(path.read_text())["trial_data"]]


def tune_trial_ids(run_dir: str | Path, ended: bool = True) -> set[str]:
    """Tune's id of each trial (or array) in its newest experiment state (`ended`
    False: of those it has not ended, TERMINATED, which a restore never runs again);
    empty where there is no state."""
    newest = _newest_state(run_dir)
    return {trial["trial_id"] for trial in _tune_state(newest)
            if "trial_id" in trial and (ended or trial.get("status") != "TERMINATED")} if newest else set()


def tune_trial_records(run_dir: str | Path) -> list[tuple[str, str, dict]]:
    """(Tune's id, status, config) of each trial (or array) in Tune's newest
    experiment state, as Tune ordered them; empty where there is none or it cannot
    be read."""
    newest = _newest_state(run_dir)
    try:
        return [(trial["trial_id"], trial.get("status", ""), trial.get("config") or {})
                for trial in _tune_state(newest)] if newest else []
    except (OSError, ValueError, KeyError, TypeError):
        return []


def tune_trial_dirs(run_dir: str | Path) -> set[str]:
    """The directory of each trial (or array) in Tune's newest experiment state, as
    Tune names it: arrays not expanded to their members. Empty where there is no
    state; an unreadable one raises (OSError, ValueError, KeyError, TypeError)."""
    newest = _newest_state(run_dir)
    return {trial["relative_logdir"] for trial in _tune_state(newest)} if newest else set()


def _members(run_dir: str | Path, array: dict, status: str) -> dict[str, tuple[str, dict]]:
    """tune_trials' entries of an array's members."""
    from orchestrator.arrays import member_names

    return {name: ("ERROR" if Path(run_dir, name, ERROR_FILE).exists() else status, config)
            for name, config in zip(member_names(array), array["members"])}
