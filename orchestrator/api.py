"""A run's results as a pandas DataFrame, for notebooks: `from icr_sweep import load_run`.

The same data `status` and `report` read (the trials' configs, states and result
rows, the run's spec for trials not started yet), from a local run directory or a
remote one (s3://, gs://: a copy without checkpoints is read)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from workloads.metrics import METRICS, PROGRESS

# What an evaluation row holds besides the trial's config: progress, then metrics.
EVALUATION_KEYS = (*PROGRESS, "step", *METRICS, "final_eval", "tokens_per_s", "time_total_s", "timestamp")


def load_run(run_dir: str | Path, evaluations: bool = True) -> pd.DataFrame:
    """The trials of the run at `run_dir` (a path or a URI; or one trial's directory,
    as `icr-sweep train --out` writes it).

    With `evaluations` (the default): one row per evaluation of each trial, in order,
    with the trial's name, state (finished, running, interrupted, error, pending,
    unreadable), error, its flattened config (arch, setup, size, n, lr, seed, then
    model.*, task.*, train.*) and that evaluation's figures (samples, train_loss,
    exact match, ...; `lr_at` the scheduled learning rate then); a trial with no
    evaluation yet has one row with those figures empty. Without: one row per trial,
    its latest figures, as results.csv. `attrs["notes"]` says what could not be read."""
    from orchestrator.report import METRIC_KEYS, read_results, read_run, trials_home
    from orchestrator.storage import is_remote, local_view

    location = str(run_dir)
    remote = is_remote(location)
    if not remote:
        location = str(Path(location.removeprefix("file://")).resolve())
        if not Path(location).is_dir():
            raise FileNotFoundError(f"{run_dir}: no such run directory")
    with local_view(location) as local:
        trials, _, notes = read_run(local, locked=not remote)
        if evaluations and not trials.empty:
            rows = []
            for name in trials["trial"]:
                for i, row in enumerate(r for r in read_results(trials_home(local) / name) if r.get("evaluated", True)):
                    rows.append({"trial": name, "evaluation": i, "lr_at": row.get("lr"),
                                 **{k: row.get(k) for k in EVALUATION_KEYS}})
            evals = pd.DataFrame(rows, columns=["trial", "evaluation", "lr_at", *EVALUATION_KEYS])
            config = trials.drop(columns=[c for c in METRIC_KEYS if c in trials])
            trials = config.merge(evals, on="trial", how="left")
            for column in ("evaluation", "samples", "step"):
                trials[column] = trials[column].astype("Int64")
    trials.attrs["notes"] = notes
    return trials
