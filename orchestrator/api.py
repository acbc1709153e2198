"""A run's results as pandas DataFrames, for notebooks:
`from icr_sweep import load_run, best`.

The same data `status` and `report` read (the trials' configs, states and result
rows, the plan stored at launch for trials not started yet), from a local run
directory or a remote one (s3://, gs://: a copy without checkpoints is read)."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pandas as pd

from workloads.metrics import METRICS, PROGRESS
from workloads.results import EVALUATION, PER_SEED, TRIAL, per_seed

# The columns a table opens with, where it has them: who, when (the evaluation, its
# samples), then the figures (workloads/results.py names each).
FIRST = (*TRIAL, "evaluation", *PROGRESS, *METRICS, "lr_at")

def read_stored(local: Path, locked: bool = True):
    """The run in the local directory `local` as orchestrator.rundir reads it, for a
    run launched before plans were stored with the plan its spec makes today."""
    from orchestrator.rundir import read_run
    from orchestrator.spec import plan_of_record

    return read_run(local, locked, plan_of=plan_of_record)


@contextlib.contextmanager
def _opened(run_dir: str | Path):
    """The run at `run_dir` as a local directory (a remote one copied), its name,
    and whether it is the run's own (with its driver lock to ask)."""
    from orchestrator.storage import is_remote, local_view

    location = str(run_dir)
    if not location.strip():
        raise ValueError(f"load_run({run_dir!r}): name a run directory (a path such as runs/istree_micro, or a URI)")
    remote = is_remote(location)
    if not remote:
        location = str(Path(location.removeprefix("file://")).expanduser().resolve())
        if Path(location).exists() and not Path(location).is_dir():
            raise NotADirectoryError(f"{run_dir} is a file, not a run directory (a sweep's is <storage>/<name>)")
        if not Path(location).is_dir():
            raise FileNotFoundError(f"{run_dir}: no such run directory" + (f" ({location})" if location != run_dir else ""))
        if not _holds_a_run(Path(location)):
            _no_run(run_dir, [p.name for p in sorted(Path(location).iterdir()) if _holds_a_run(p, sweep=True)])
    else:
        _check_remote_run(run_dir, location)
    with local_view(location) as local:
        yield Path(local), location.rstrip("/").rsplit("/", 1)[-1], not remote


def _holds_a_run(path: Path, sweep: bool = False) -> bool:
    """A sweep's run directory, a trial's (train --out), or a folder of trials
    (`sweep`: a sweep's run directory alone)."""
    from orchestrator.rundir import PARAMS_FILE, RESULTS_FILE, SPEC_FILE, trial_names

    if sweep:
        return (path / SPEC_FILE).is_file()
    return any((path / name).is_file() for name in (SPEC_FILE, PARAMS_FILE, RESULTS_FILE)) or bool(trial_names(path))


def _no_run(run_dir, sweeps: list[str]) -> None:
    """FileNotFoundError for a folder that holds no run: where it holds sweeps' run
    directories (a storage folder), naming them and how to load one (issue 83, class
    9: a storage folder was said to hold no run, and on S3 read as an empty run)."""
    if sweeps:
        shown = ", ".join(sweeps[:5]) + (f", ... ({len(sweeps)} in all)" if len(sweeps) > 5 else "")
        raise FileNotFoundError(f"{run_dir} is a storage folder holding the run directories of the sweeps {shown}: "
                                f"load one of them, load_run({str(run_dir).rstrip('/') + '/' + sweeps[0]!r})")
    raise FileNotFoundError(f"{run_dir} holds no run of icr-sweep (no icr-sweep.json, no trial's params.json or "
                            "result.json); a sweep's run directory is <storage>/<name>")


REMOTE_FOLDERS_LOOKED_INTO = 50  # a remote folder's subfolders asked whether each is a run (one request each)


def _check_remote_run(run_dir, location: str) -> None:
    """A remote folder is a run (a sweep's, a trial's or one of trials), asking the
    store what it holds at its top and, where that says nothing, its subfolders."""
    from orchestrator.rundir import PARAMS_FILE, RESULTS_FILE, SPEC_FILE
    from orchestrator.storage import names_in, read_file

    try:
        names = names_in(location)
    except FileNotFoundError:
        names = []
    if not names:
        raise FileNotFoundError(f"{run_dir}: no such run directory")
    if {SPEC_FILE, PARAMS_FILE, RESULTS_FILE} & set(names):
        return
    sweeps, trials = [], False
    for name in sorted(names)[:REMOTE_FOLDERS_LOOKED_INTO]:
        folder = f"{location.rstrip('/')}/{name}"
        if read_file(f"{folder}/{SPEC_FILE}") is not None:
            sweeps.append(name)
        elif read_file(f"{folder}/{PARAMS_FILE}") is not None:
            trials = True
    if not trials:
        _no_run(run_dir, sweeps)


def _ordered(df: pd.DataFrame, sweep: str) -> pd.DataFrame:
    """`df` with a sweep column, the ids (the model its variant: report.model_labels)
    and figures first, timestamps as datetimes."""
    from orchestrator.report import model_labels

    df.insert(0, "sweep", sweep)
    if {"arch", "size"} <= set(df) and "model" not in df:
        df["model"] = model_labels(df)
    if "task_label" in df and not df["task_label"].fillna("").astype(str).ne("").any():
        df = df.drop(columns="task_label")  # a spec without task axes labels no trial: an empty column
    if "timestamp" in df:  # Tune's: seconds since the epoch
        df["timestamp"] = pd.to_datetime(pd.to_numeric(df["timestamp"]), unit="s", utc=True)
    first = [c for c in FIRST if c in df]
    return _plain(df[first + [c for c in df.columns if c not in first]])


def _plain(df: pd.DataFrame) -> pd.DataFrame:
    """`df` as a plain table (issue 64): every value hashable (a list, as
    `model.attn_layer_idx`, becomes a tuple), and the fields a model has no layer for
    empty (a Transformer's mixer fields, an attention-free model's attention fields),
    so that `nunique`, `drop_duplicates` and a `groupby` over them say what varies."""
    from workloads.models.config import ATTENTION_FIELDS

    for column in df.columns[df.dtypes == object]:
        if df[column].map(lambda v: isinstance(v, list)).any():
            df[column] = df[column].map(lambda v: tuple(v) if isinstance(v, list) else v)
    if {"model.attn_layer_idx", "model.n_layers"} <= set(df):
        attention = df["model.attn_layer_idx"].map(lambda v: len(v) if isinstance(v, tuple) else 0)
        layers = pd.to_numeric(df["model.n_layers"], errors="coerce")
        _blank(df, [f"model.{f}" for f in ATTENTION_FIELDS], attention > 0)
        _blank(df, [c for c in df.columns if c.startswith("model.mixer.")], attention < layers)
    return df


def _blank(df: pd.DataFrame, columns: list[str], has: pd.Series) -> None:
    """Empties `columns` where a row's model has no layer that uses them (`has` False);
    whole numbers stay whole (Int64)."""
    for column in (c for c in columns if c in df):
        whole = pd.api.types.is_integer_dtype(df[column])
        df[column] = df[column].where(has)
        if whole:
            df[column] = df[column].astype("Int64")


def load_run(run_dir: str | Path, evaluations: bool = True) -> pd.DataFrame:
    """The trials of the run at `run_dir` (a path or a URI; or one trial's directory,
    as `icr-sweep train --out` writes it).

    With `evaluations` (the default): one row per evaluation of each trial, in order;
    without: one row per trial, its latest figures, as results.csv. Each row opens
    with the sweep's name (its run directory's, as the report's title: concatenated
    runs stay apart), the
    trial's name, state (finished, running, interrupted, error, pending, unreadable),
    its swept values (arch, setup, size, n, lr, seed), the evaluation's index and
    figures (samples, train_loss, exact match, ...; `lr_at` the scheduled learning
    rate then), then the error and the flattened config (model.*, task.*, train.*);
    `timestamp` is a UTC datetime. A trial with no evaluation yet has one row with
    those figures empty. `attrs["notes"]` says what could not be read."""
    from orchestrator.rundir import METRIC_KEYS

    with _opened(run_dir) as (local, name, own):
        run = read_stored(local, locked=own)
        trials, notes = run.trials, run.notes
        if evaluations and not trials.empty:
            rows = []
            for trial in trials["trial"]:
                for i, row in enumerate(r for r in run.rows.get(trial, []) if r.get("evaluated", True)):
                    rows.append({"trial": trial, "evaluation": i, "lr_at": row.get("lr"),
                                 **{k: row.get(k) for k in EVALUATION}})
            evals = pd.DataFrame(rows, columns=["trial", "evaluation", "lr_at", *EVALUATION])
            config = trials.drop(columns=[c for c in METRIC_KEYS if c in trials])
            trials = config.merge(evals, on="trial", how="left")
            for column in ("evaluation", "samples", "step"):
                trials[column] = trials[column].astype("Int64")
    trials = _ordered(trials, name)
    trials.attrs["notes"] = notes
    return trials


def best(run_dir: str | Path) -> pd.DataFrame:
    """The report's best-per-cell table (its tables and best.csv: the same columns, in
    its order, after the sweep's name) of the run at
    `run_dir`: per (arch, setup, size, n), the learning rate chosen by the sweep's
    search metric over the seeds' mean, the mean and spread over seeds of each
    metric, and the trials behind it; computed from the run as it stands now."""
    from orchestrator.report import best_table

    with _opened(run_dir) as (local, name, own):
        run = read_stored(local, locked=own)
    table = best_table(run)[0] if not run.trials.empty else pd.DataFrame()
    table.insert(0, "sweep", name)  # then best.csv's columns, in its order
    for column in (c for c in PER_SEED if c in table):  # best.csv's "0.989/1": here a tuple of numbers, by seed
        table[column] = table[column].map(lambda v, c=column: per_seed(v, c))
    table.attrs["notes"] = run.notes
    return table


def findings(run_dir: str | Path):
    """What the run at `run_dir` shows of its task's known results, decided by the
    findings engine on its best-per-cell table as it stands now (the report writes
    the same into findings.json; `Findings.from_json` reads that file back): a
    `workloads.tasks.verdicts.Findings`, whose `.lines` are each claim's `Finding`
    (verdict, seeds, the comparison that decided it, each comparison decided and left
    out) and whose `.markdown()` gives the report's lines."""
    from orchestrator.report import best_table, unfinished_trials
    from workloads.tasks import TASKS
    from workloads.tasks.verdicts import Findings

    with _opened(run_dir) as (local, _, own):
        run = read_stored(local, locked=own)
    table = best_table(run)[0] if not run.trials.empty else pd.DataFrame()
    return TASKS[run.task][1].findings(table, unfinished_trials(run)) if not table.empty else Findings()
