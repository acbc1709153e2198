"""The metrics a trial reports, in one place: which way is better, how tables and
figures name each, which tasks produce it, and for a teacher-forced metric how it
is computed. The spec's `search.metric`, Tune's progress table, `status`, `train`'s
progress bar, the evaluation, the report and best.csv all read this registry; a new
metric is one entry here."""

import math
from dataclasses import dataclass
from typing import Any, Callable, Literal, Optional


@dataclass(frozen=True)
class TeacherForced:
    """What one validation batch under teacher forcing gives a metric: (B, T-1)
    tensors, position t about the prediction of token t+1."""

    losses: Any  # cross-entropy per token, 0 where not supervised
    supervised: Any  # bool: the positions the loss counts
    right: Any  # bool: the model's argmax is the next token, or the position is not supervised


# A teacher-forced metric's tally of one batch: (a sum, a count); its value is the
# sum over the validation set's batches over the count's.
Tally = Callable[[TeacherForced], tuple[Any, Any]]


@dataclass(frozen=True)
class Metric:
    name: str  # the key in every result row
    mode: Literal["max", "min"]  # which way is better
    label: str  # a column heading: Tune's progress table, `status`
    title: str  # the report's tables
    short: str  # the report's figures
    plot: Optional[str]  # the file stem of its figure per model size; None: not drawn
    tally: Optional[Tally] = None  # a teacher-forced metric's computation (evaluate.teacher_forced)
    generation: bool = False  # measured by greedy decoding, by tasks with a generation protocol (`generates`)
    held_out: bool = False  # measured once, at the end, on the held-out set: never what picks a learning rate
    upper: Optional[float] = None  # the largest value it can take (an accuracy: 1); None: unbounded


# In the report's order: the paper's metric first, ours beside it.
METRICS: dict[str, Metric] = {m.name: m for m in (
    Metric("val_exact_match", "max", "exact_match", "teacher-forced exact match (the paper's metric)",
           "teacher-forced exact match", "exact_match",
           tally=lambda t: (t.right.all(dim=1).sum(), t.right.shape[0]), upper=1.0),  # samples right at every position
    Metric("gen_accuracy", "max", "gen_acc",
           "generation accuracy (ours: greedy decoding, the real retriever in the retrieval setup)",
           "generation accuracy (ours)", "gen_accuracy", generation=True, upper=1.0),
    Metric("val_token_accuracy", "max", "token_acc",
           "teacher-forced accuracy per supervised token (for mqar, zoology's accuracy per query)",
           "accuracy per supervised token", "token_accuracy",
           tally=lambda t: ((t.right & t.supervised).sum(), t.supervised.sum()), upper=1.0),
    Metric("val_loss", "min", "val_loss", "validation loss per supervised token", "validation loss", None,
           tally=lambda t: (t.losses.sum(), t.supervised.sum())),
    Metric("test_exact_match", "max", "test_em",
           "teacher-forced exact match on the held-out set (as many samples as validation's, another stream)",
           "held-out exact match", None, held_out=True, upper=1.0),
)}
HEADLINE = "val_exact_match"  # the paper's metric: heads every table and figure
SOLVED = 0.9  # the headline at which a model solves a cell: the findings, the frontier, the rates that solve
HELD_OUT = {"test_exact_match": HEADLINE}  # a held-out metric: the validation metric it is measured as
PLOTTED = tuple(name for name, m in METRICS.items() if m.plot)  # the accuracies, drawn and tabled
# Progress, in every result row (between evaluations too), beside the metrics.
PROGRESS = ("samples", "train_loss", "samples_per_s")
# What a trial ran on, as it ran, beside what its config asked (device: auto, scan:
# auto, cuda_graphs: auto): the device's type, the scan its recurrent layers ran
# (none without any), and its step (workloads/static_step.py: graph, static or
# plain). Text in its rows; parameters in the trackers.
RESOLVED = ("device_used", "scan_used", "step_used")


def measured(row: dict, keys) -> dict:
    """The figures of `row` among `keys` that were measured: finite numbers (a
    metric never measured is None or NaN), in the order of `keys`."""
    return {k: row[k] for k in keys if isinstance(row.get(k), (int, float)) and not isinstance(row[k], bool)
            and math.isfinite(row[k])}


def learnt_nothing(val_loss, vocab_size: int) -> bool:
    """Whether a validation loss is no better than a uniform guess over the vocabulary
    (ln V, within 1%): a model whose loss never moved from where a diverged or
    collapsed one sits (train --lr 1e6 on IsTree n=5: 3.0910 = ln 22 at every evaluation)."""
    return isinstance(val_loss, (int, float)) and math.isfinite(val_loss) and val_loss >= 0.99 * math.log(vocab_size)


def learnt_nothing_note(val_loss, vocab_size: int, lr: float) -> str:
    """What `train`, status and the report say of a trial that learnt nothing ("" for
    one that did)."""
    if not learnt_nothing(val_loss, vocab_size):
        return ""
    return (f"learnt nothing: validation loss {val_loss:.4f}, no lower than a uniform guess over its {vocab_size} "
            f"tokens (its rate {lr:g} may be far too high or too low)")


def rank_key(value, mode: str) -> float:
    """`value` as a key where higher is better whatever the metric's direction (mode
    max or min); a value never measured (None, NaN) ranks below every measured one.
    The report's choice of a cell's rate and the Optuna study's record of it rank so."""
    if value is None or value != value:
        return -math.inf
    return value if mode == "max" else -value
