"""A run directory read whole: one row per trial (planned or found) with its
config, state and latest figures, each trial's rows, the spec as stored, and notes
on what could not be read. Built from the stored files alone: the plan and the
trials' configs as launch and the trials wrote them, never the spec re-expanded.
"""

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

import pandas as pd

from orchestrator.rundir.guard import driver_is_live
from orchestrator.rundir.layout import (ERROR_FILE, PARAMS_FILE, PLAN_FILE, SPEC_FILE, is_trial_dir, one_line, small_text,
                                        trial_names)
from orchestrator.rundir.records import RecordError, driver_ended, read_plan, spec_record, tune_trials
from orchestrator.rundir.rows import METRIC_KEYS, trial_rows
from workloads.results import TRIAL_IDS
from workloads.metrics import HEADLINE, METRICS, PROGRESS
from workloads.tasks import DEFAULT_TASK

COLUMNS = TRIAL_IDS  # the rest keep their flattened names (task.family), as the trackers show them


@dataclass
class Run:
    """What a run directory holds. `trials`: a row per trial (see load_trials);
    `spec`: the spec as stored at launch (a mapping, None where absent or damaged);
    `plan`: the plan stored beside it (or made from it), None where there is none;
    `rows`: each trial's result rows on its timeline; `configs`: each trial's config;
    `notes`: what could not be read."""

    trials: pd.DataFrame
    spec: Optional[dict] = None
    notes: list[str] = field(default_factory=list)
    rows: dict[str, list[dict]] = field(default_factory=dict)
    configs: dict[str, dict] = field(default_factory=dict)
    plan: Optional[dict] = None

    @property
    def task(self) -> str:
        return (self.spec or {}).get("task", DEFAULT_TASK)

    @property
    def not_started(self) -> int:
        """The trials of an Optuna plan's budget with no directory yet (a grid's
        planned trials are rows of their own, pending)."""
        if self.plan is None or self.plan.get("method") == "grid" or self.trials.empty:
            return 0
        return max(0, self.plan["trial_count"] - int((self.trials["state"] != "unplanned").sum()))

    @property
    def chosen_by(self) -> tuple[str, str, str]:
        """The metric, its mode and the tie-break that choose each cell's learning
        rate: the sweep's search as its plan stored it (the headline and validation
        loss where there is no plan)."""
        metric, mode, ties = (self.plan or {}).get("chosen_by") or (HEADLINE, METRICS[HEADLINE].mode, "val_loss")
        return metric, mode, ties


def _read_config(trial_dir: Path) -> tuple[dict | None, str]:
    from pydantic import ValidationError

    from workloads.config import TrialConfig

    path = trial_dir / PARAMS_FILE
    try:
        config = json.loads(path.read_bytes().decode("utf-8"))["trial"]
        if not isinstance(config, dict):
            raise TypeError(f"'trial' is a {type(config).__name__}")
        try:
            TrialConfig.model_validate(config)
        except ValidationError as e:
            first = e.errors()[0]
            where = ".".join(map(str, first["loc"]))
            return None, (f"{path.name} does not hold a trial's config ({where}: "
                          f"{first['msg'].removeprefix('Value error, ')}, got {json.dumps(first.get('input'))[:60]})")
        return config, ""
    except FileNotFoundError:
        return None, f"{path.name} is missing"
    except (OSError, ValueError, KeyError, TypeError) as e:
        return None, f"{path.name} is unreadable ({type(e).__name__}: {e})"


def _learnt_nothing(config: dict, val_loss) -> str:
    """A finished trial whose validation loss is no better than a uniform guess over
    its vocabulary, said in words ("" otherwise)."""
    from pydantic import ValidationError

    from workloads.config import TrialConfig
    from workloads.metrics import learnt_nothing_note

    try:
        trial = TrialConfig.model_validate(config)
    except (ValidationError, ValueError, TypeError):
        return ""
    return learnt_nothing_note(val_loss, trial.task.vocab_size, trial.train.lr)


def _state(status: str | None, results: list[dict], trial_dir: Path, live: bool) -> tuple[str, str]:
    """A trial's state from what Tune recorded (`status`), its results, and whether
    a driver is working on the trial now."""
    error_file = trial_dir / ERROR_FILE
    if status == "ERROR" or (status is None and not live and error_file.exists() and not results[-1:]):
        lines = [ln for ln in small_text(error_file).splitlines() if ln.strip()]
        return "error", one_line(lines[-1]) if lines else "failed (no error file)"
    if results and results[-1].get("final_eval"):
        return "finished", ""
    if live:
        return ("running" if results or status == "RUNNING" else "pending"), ""
    return ("interrupted" if results or status in ("RUNNING", "PAUSED") else "pending"), ""


def load_trials(run_dir: Path, planned: dict[str, dict] | None = None, locked: bool = True,
                only: str | None = None) -> pd.DataFrame:
    """One row per trial, planned or found: its flattened config, state and latest
    metrics. `planned` maps the names of the trials a sweep will run to their
    configs (those not started are `pending`). A trial whose files cannot be read
    is listed as `unreadable`, with the file and the problem in `error`. Without a
    run lock to ask (`locked` False: a copy of a remote run), a trial is running
    when Tune last recorded it so."""
    return _trials(run_dir, planned, locked, only)[0]


def _trials(run_dir: Path, planned: dict[str, dict] | None, locked: bool,
            only: str | None = None) -> tuple[pd.DataFrame, dict[str, list[dict]], dict[str, dict]]:
    """load_trials' table, with each trial's rows and config by name (what read_run keeps)."""
    run_dir = Path(run_dir)
    planned = planned or {}
    recorded, problem = tune_trials(run_dir)
    statuses = {name: status for name, (status, _) in recorded.items()}
    live = driver_is_live(run_dir) if locked else (False if driver_ended(run_dir) else None)
    names = {only} if only is not None else trial_names(run_dir) | set(statuses) | set(planned)
    kept_rows, configs, rows = {}, {}, []
    for name in sorted(names):
        trial_dir = run_dir / name
        config, config_problem = _read_config(trial_dir) if trial_dir.is_dir() else (None, "")
        results, problems = trial_rows(trial_dir)
        status = statuses.get(name)
        state, error = _state(status, results, trial_dir, status == "RUNNING" if live is None else live)
        if status == "TERMINATED" and state != "finished" and not live:
            state = "interrupted"  # finished by Tune's record, its last rows lost: resume restores them
            problems.append("Tune recorded it finished, but its final row is missing or damaged"
                            + (" (result.json holds no rows)" if not results else "")
                            + "; `icr-sweep resume` restores it from the trial's checkpoint")
        if config is None:
            config = planned.get(name) or (recorded.get(name, (None, None))[1] if not results else None)
            if config_problem and config is None:
                state, error = "unreadable", config_problem
            elif config_problem and (results or (trial_dir / PARAMS_FILE).exists()):
                # (Tune makes a pending trial's directory before it writes params.json: nothing amiss)
                problems.append(config_problem + "; config taken from the plan")
        kept_rows[name] = results
        if config:
            configs[name] = config
        last = results[-1] if results else {}
        # Rows between evaluations (time-based checkpoints) carry progress only: the
        # metrics are the last evaluation's, the progress the latest row's.
        evaluated = [r for r in results if r.get("evaluated", True)]
        last_eval = evaluated[-1] if evaluated else {}
        metrics = {k: (last if k in PROGRESS else last_eval).get(k) for k in METRIC_KEYS}
        if state == "finished" and config:
            problems.append(_learnt_nothing(config, metrics.get("val_loss")))
        flat = pd.json_normalize(config, sep=".").iloc[0].to_dict() if config else {}
        said = one_line("; ".join(filter(None, [error, *problems])), 2000)
        rows.append({"trial": name, "state": state, **metrics, "error": said, **flat})
    table = _as_table(rows, problem)
    table.attrs["recorded"] = sorted(statuses)  # the trials Tune recorded: an Optuna run's own (_mark_unplanned)
    return table, kept_rows, configs


def _as_table(rows: list[dict], problem: str) -> pd.DataFrame:
    df = pd.DataFrame(rows)
    if df.empty:
        return df
    df.attrs["problem"] = problem
    df = df.rename(columns=COLUMNS)
    if "task_label" in df and "setup" in df:  # a spec's task axes: vanilla-seqlen64, as trial names say
        label = df["task_label"].fillna("").astype(str)
        df["setup"] = df["setup"].where(label == "", df["setup"].astype(str) + "-" + label)
    for column in (*METRICS, "samples"):
        df[column] = pd.to_numeric(df[column], errors="coerce")
    return df


def read_run(run_dir: Path, locked: bool = True, plan_of: Optional[Callable[[dict], Optional[dict]]] = None) -> Run:
    """The trials of a run directory (planned ones included), the spec it was
    launched with (None if absent or damaged), and notes on what could not be read.
    `locked`: whether the directory is the run's own, with its driver lock (not a
    copy of a remote run). The planned trials are the stored plan's; for a run
    launched before plans were stored, `plan_of(spec)` may make one from its spec."""
    notes = [] if locked or driver_ended(run_dir) else [
        "a remote run has no driver lock: 'running' is Tune's last record, which a driver killed mid-sweep leaves "
        "behind (`icr-sweep resume` continues it then); a driver that stopped says so, and its trials read interrupted"]
    run_dir = Path(run_dir)
    if is_trial_dir(run_dir):  # `icr-sweep train --out`: the same files as one trial of a sweep
        df, rows, configs = _trials(run_dir.parent, None, locked, only=run_dir.name)
        return Run(df, None, notes, rows, configs)
    spec, plan = _records(run_dir, notes, plan_of)
    df, rows, configs = _trials(run_dir, (plan or {}).get("trials"), locked)
    run = Run(df, spec, notes, rows, configs, plan)
    if df.empty:
        return run
    if df.attrs.get("problem"):
        notes.append(df.attrs["problem"])
    _mark_unplanned(run)
    if run.not_started:
        notes.append(f"{run.not_started} of the {plan['trial_count']} planned Optuna trials have not started")
    unreadable = df.loc[df["state"] == "unreadable", "trial"].tolist()
    if unreadable:
        notes.append(f"{len(unreadable)} trial(s) could not be read (see their error): {', '.join(unreadable)}")
    return run


def _mark_unplanned(run: Run) -> None:
    """Marks `unplanned` (listed, never pooled into a cell) each folder of trial files
    that is not a trial of the run: not in a grid's plan, or, in an Optuna run, not
    in Tune's record and named otherwise than its config (a copy, `<trial>.bak`)."""
    from pydantic import ValidationError

    from workloads.config import TrialConfig

    if run.plan is None:
        return
    planned = set(run.plan["trials"]) if run.plan.get("method") == "grid" else set(run.trials.attrs.get("recorded", ()))

    def own_name(name: str) -> bool:
        try:
            return name in run.configs and TrialConfig.model_validate(run.configs[name]).name == name
        except (ValidationError, ValueError, TypeError):
            return False

    df = run.trials
    stray = [name for name in df["trial"] if name not in planned and (run.plan.get("method") == "grid" or not own_name(name))]
    if not stray:
        return
    at = df["trial"].isin(stray)
    df.loc[at, "state"] = "unplanned"
    df.loc[at, "error"] = "not a trial of this run's plan (a copy or a folder put here?): listed, left out of every cell"
    run.notes.append(f"{len(stray)} folder(s) hold trial files but are not trials of this run's plan, and are left out "
                     f"of every cell: {', '.join(stray)}")


def _records(run_dir: Path, notes: list[str], plan_of) -> tuple[Optional[dict], Optional[dict]]:
    """The stored spec and plan (or one `plan_of` makes from the spec), each None
    where absent or damaged, with a note saying what that leaves out."""
    spec_problem = plan_problem = ""
    try:
        spec = spec_record(run_dir)
    except RecordError as e:
        spec, spec_problem = None, str(e)
    try:
        plan = read_plan(run_dir)
    except RecordError as e:
        plan, plan_problem = None, str(e)
    if plan is None and spec is not None and plan_of is not None:
        plan = plan_of(spec)  # None where today's schema cannot read the spec
    if spec_problem:
        notes.append(spec_problem + ("" if plan else f": lrs are chosen by {HEADLINE} (max)"))
    if plan is None and (plan_problem or spec is not None):
        missing = plan_problem or f"no {PLAN_FILE} beside {SPEC_FILE} (a run of an earlier version)"
        notes.append(f"{missing}: trials not started yet are not listed")
    elif plan_problem:  # a plan made anew from the stored spec stands in for it
        notes.append(f"{plan_problem}: the trials are those the stored spec plans today (`icr-sweep resume` "
                     "sets the damaged file aside and stores that plan)")
    return spec, plan
