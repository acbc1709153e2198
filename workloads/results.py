"""The columns of a run's tables and their types, in one place: results.csv (a row
per trial: its ids, its latest figures, its flattened config) and best.csv (a row
per cell: the learning rate chosen, each seed's figures, the mean and spread of
each metric). The report writes them, the findings engine reads best.csv, and the
notebook API (`icr_sweep.load_run`, `best`) returns them; each names a column by
the constant here, never by a spelling of its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from workloads.metrics import HEADLINE, METRICS, PROGRESS

# A cell: what best.csv has one row for (a model at one setup and n; its rate is chosen).
CELL = ("arch", "setup", "size", "n")

# ---------------------------------------------------------------- results.csv

# The config fields that tell one trial of a sweep from another, flattened as pandas and
# the trackers flatten them, and the short names every table, tracker and notebook
# gives them; the rest of a trial's config keeps its flattened names (task.family).
TRIAL_IDS = {"model.arch": "arch", "task.setup": "setup", "model.size": "size", "task.n": "n", "train.lr": "lr",
             "train.seed": "seed"}
SWEPT = tuple(TRIAL_IDS.values())
# The columns a per-trial table opens with, where it has them: who (the sweep, the
# trial, its state and its swept values), then the task variant's label.
TRIAL = ("sweep", "trial", "state", *SWEPT[:SWEPT.index("size") + 1], "model", *SWEPT[SWEPT.index("size") + 1:],
         "task_label")
LATEST = (*PROGRESS, *METRICS)  # a trial's latest figures (status, the report, results.csv)
# What an evaluation row holds besides the trial's config: progress, then metrics.
EVALUATION = (*PROGRESS, "step", *METRICS, "final_eval", "tokens_per_s", "time_total_s", "timestamp")


# ---------------------------------------------------------------- best.csv


@dataclass(frozen=True)
class Column:
    """A best.csv column: its name, the type of its value (of each element where it
    holds one per seed, "/"-joined in seed order: `per_seed`), and what it holds."""

    name: str
    type: type
    doc: str
    per_seed: bool = False


BY_SEED = f"{HEADLINE}_by_seed"  # each seed's validation exact match (the findings count samples from it)
SEED_IDS = "seed_ids"
HELD_OUT_BY_SEED = "test_exact_match_by_seed"
BASELINE_BY_SEED = "baseline_exact_match_by_seed"
ROBUST = ("robust_exact_match", "robust_exact_match_std", "rates_solving", "rates")
BASELINE = ("baseline_lr", BASELINE_BY_SEED)
MODEL = ("params", "state_floats")  # the cell's model: trainable parameters and recurrent state in floats

BEST = (
    Column("arch", str, "the architecture"),
    Column("setup", str, "vanilla, cot, retrieval (a task variant's: cot-familyrandom)"),
    Column("size", str, "the size label: a preset, and the dimensions a spec changed (tiny-dstate4)"),
    Column("model", str, "the model as every table names it (workloads.naming.model_label)"),
    Column("n", int, "the task's size (IsTree: vertices)"),
    Column("lr", float, "the learning rate chosen (an Optuna cell: the seeds' rates' geometric mean)"),
    Column("lrs", float, "each seed's rate", per_seed=True),
    Column("seeds", int, "the seeds the row summarises"),
    Column("trials", str, "those trials, ';'-joined"),
    Column(BY_SEED, float, "each seed's validation exact match at the chosen rate", per_seed=True),
    Column(SEED_IDS, int, "the seeds, in the order of every per-seed column", per_seed=True),
    Column(HELD_OUT_BY_SEED, float, "each seed's held-out exact match at the chosen rate", per_seed=True),
    Column("val_samples", int, "the validation samples each seed's exact match counts (NaN where trials differ)"),
    *(Column(f"{m}{s}", float, f"{m}: {'the mean' if not s else 'the spread'} over seeds")
      for m in METRICS for s in ("", "_std")),
    Column("robust_exact_match", float, "the mean over seeds of the held-out exact match at each seed's own pick"),
    Column("robust_exact_match_std", float, "its spread over seeds"),
    Column("rates_solving", int, "the rates tried whose mean validation exact match solves the cell"),
    Column("rates", int, "the rates tried"),
    Column("baseline_lr", float, "the arch's paper rate, where it was one of several tried on every seed"),
    Column(BASELINE_BY_SEED, float, "each seed's exact match at that rate (held-out where measured), '/'-joined"),
    Column("params", int, "the model's trainable parameters"),
    Column("state_floats", int, "the model's recurrent state in floats per sequence (0: attention alone)"),
    Column("still_training", str, "the loss's fall over the last two evaluations, where still falling"),
)
BEST_COLUMNS = tuple(c.name for c in BEST)
PER_SEED = {c.name: c.type for c in BEST if c.per_seed}  # "/"-joined in best.csv; a tuple in `icr_sweep.best`


def column(name: str) -> Column:
    """best.csv's column `name` (KeyError naming the known ones)."""
    for c in BEST:
        if c.name == name:
            return c
    raise KeyError(f"best.csv has no column {name!r}; its columns: {', '.join(BEST_COLUMNS)}")


def per_seed(value, name: str) -> Optional[tuple]:
    """A per-seed cell of best.csv ("0.989/1") as a tuple of its column's type; a
    value that is not text (NaN: the cell did not measure it) as it is."""
    kind = column(name).type
    return tuple(kind(x) for x in value.split("/")) if isinstance(value, str) else value
