"""What a HotpotQA evaluation of pretrained models shows of the paper's thesis, as claims
of ours (the paper's HotpotQA prompt, conditions and numbers could not be read:
docs/experiment.md), declared here before any run and decided by the findings engine
(workloads/tasks/findings.py) on the paper's subset: the questions every model answers
exactly given the gold paragraphs, their count the sample size.

1. The distilled RNN lags the Transformer where the answer must be found in a long
   context: with the gold paragraphs among the distractors, Mamba's exact match is more
   than CLOSE below the Transformer's of its size.
2. The hybrid tracks the Transformer there: at most CLOSE below it.

The checkpoints are fixed and answer greedily, so the only noise is which questions
were asked: each comparison's margin is sampling alone (a noise floor of 0).
"""

from __future__ import annotations

from dataclasses import replace
from fractions import Fraction
from typing import TYPE_CHECKING, Optional

from workloads.tasks.findings import Leads, findings
from workloads.tasks.hotpotqa import CONDITION_WORDS

if TYPE_CHECKING:
    import pandas as pd

CLOSE = Fraction(1, 10)  # as IsTree's "tracks" and "lags" (workloads/tasks/_istree_findings.py)
LONG_CONTEXT = ("gold_distractors",)
CLAIMS = (
    Leads(f"with {{setup}}, the distilled RNN lags the Transformer of its size (Mamba's exact match more than "
          f"{float(CLOSE):g} below the Transformer's)", "transformer", "mamba", LONG_CONTEXT, CLOSE, CONDITION_WORDS),
    Leads(f"with {{setup}}, the hybrid tracks the Transformer of its size (its exact match at most {float(CLOSE):g} "
          f"below the Transformer's)", "hybrid", "transformer", LONG_CONTEXT, -CLOSE, CONDITION_WORDS),
)
NOISE = 0.0  # fixed checkpoints, greedy answers: no training noise to add to sampling's


def decide(table: pd.DataFrame, unfinished: Optional[pd.DataFrame] = None):
    """The claims decided on `table` (one row per model and condition: arch, size,
    setup, n, params, val_exact_match, val_samples, as orchestrator/evaluations.py's
    on_subset gives it)."""
    found = findings(table, CLAIMS, {}, unfinished, NOISE)
    # The engine's notes on what it read and on seeds speak of trained models: said here
    # of fixed checkpoints instead.
    read = ("Read: exact match on the paper's subset, the questions every model answers exactly given the gold "
            "paragraphs (their count is each comparison's sample size).",)
    return replace(found, parts=tuple(
        replace(part, read=read, findings=tuple(replace(f, seeds="(fixed checkpoints)" if f.seeds else "")
                                                for f in part.findings)) for part in found.parts))


def untestable(why: str):
    """Each claim, untestable for `why` (the run has no subset to decide it on)."""
    from workloads.tasks.verdicts import Finding, Findings, Part

    lines = tuple(Finding(claim.name.format(setup=claim.words.get(setup, setup)), "Not testable here", untestable=why)
                  for claim in CLAIMS for setup in claim.setups)
    return Findings((Part("", (), lines),))
