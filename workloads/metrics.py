"""The metrics a trial reports, in one place: which way is better, how tables and
figures name each, and which tasks produce it. The spec's `search.metric`, Tune's
progress table, `status`, `train`'s progress bar, the report and best.csv all read
this registry; a new metric is one entry here (and its computation in evaluate.py)."""

from dataclasses import dataclass
from typing import Literal, Optional


@dataclass(frozen=True)
class Metric:
    name: str  # the key in every result row
    mode: Literal["max", "min"]  # which way is better
    label: str  # a column heading: Tune's progress table, `status`
    title: str  # the report's tables
    short: str  # the report's figures
    plot: Optional[str]  # the file stem of its figure per model size; None: not drawn
    generation: bool = False  # measured only by tasks with a generation protocol (`generates`)


# In the report's order: the paper's metric first, ours beside it.
METRICS: dict[str, Metric] = {m.name: m for m in (
    Metric("val_exact_match", "max", "exact_match", "teacher-forced exact match (the paper's metric)",
           "teacher-forced exact match", "exact_match"),
    Metric("gen_accuracy", "max", "gen_acc",
           "generation accuracy (ours: greedy decoding, the real retriever in the retrieval setup)",
           "generation accuracy (ours)", "gen_accuracy", generation=True),
    Metric("val_token_accuracy", "max", "token_acc",
           "teacher-forced accuracy per supervised token (for mqar, zoology's accuracy per query)",
           "accuracy per supervised token", "token_accuracy"),
    Metric("val_loss", "min", "val_loss", "validation loss per supervised token", "validation loss", None),
)}
HEADLINE = "val_exact_match"  # the paper's metric: heads every table and figure
PLOTTED = tuple(name for name, m in METRICS.items() if m.plot)  # the accuracies, drawn and tabled
# Progress, in every result row (between evaluations too), beside the metrics.
PROGRESS = ("samples", "train_loss", "samples_per_s")
