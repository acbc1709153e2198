"""Findings as data: what the findings engine (workloads/tasks/findings.py) decides
of a run, as typed objects. The report's Markdown, its summary table, the console's
lines and the run's findings.json are each a rendering of these; nothing reads a
verdict back out of text the tool wrote.

A `Finding` is one claim (or question) on one run: its verdict, the seeds its
comparisons read, the comparison that decided it, every comparison decided and
every one left out (with its numbers and why), each model it names that has none,
the deciding cells still training and the trials it would read that have not run.
`Findings` is a run's: per task variant, what the findings read and each finding,
then the cells at guessing level.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from pydantic import TypeAdapter

FILE = "findings.json"  # in a run directory, beside report.md
UNEQUAL = "Not testable at equal size"  # the verdict of a claim whose models differ too much in size


@dataclass(frozen=True)
class Compared:
    """One comparison of a finding, decided on the mean over its seeds: `outcome` is
    shown, refuted, within noise, holds or left out; `text` its cells' numbers, the
    statistic and, where a seed alone lies on the other side, that seed; `why` where
    it was left out; `undecided` where a seed alone contradicted the mean beyond its
    own margin (its text says so)."""

    label: str
    outcome: str
    text: str
    why: str = ""
    undecided: bool = False
    figure: str = ""  # its statistic against the threshold and margin: "0.023 (0.2 claimed, margin 0.177)"

    @property
    def said(self) -> str:
        return self.text if self.undecided else f"{self.text} [{self.outcome}]"


@dataclass(frozen=True)
class Finding:
    """A claim decided on a run. `untestable`: why no comparison could be made (the
    run lacks what the claim needs); `decided_by`: the comparison that decided the
    verdict, in words, and its statistic against the claim (`figure`, the summary
    table's deciding number)."""

    claim: str
    verdict: str
    seeds: str = ""  # "on 4 seeds", "(1 seed)", "(the mean over seeds only)"; "" where nothing was compared
    decided_by: str = ""
    compared: tuple[Compared, ...] = ()
    left_out: tuple[Compared, ...] = ()
    not_compared: tuple[str, ...] = ()  # each model the claim names with no comparison decided, and why
    untestable: str = ""
    still_training: tuple[str, ...] = ()  # deciding cells whose loss still fell at the last evaluation
    notes: str = ""  # what else the line says of the cells it read
    unread: tuple[str, ...] = ()  # cells it would read that have no finite exact match
    not_run: str = ""  # its trials that have not finished, counted by setup and state
    figure: str = ""  # the deciding comparison's statistic, threshold and margin (the summary table's number)

    @property
    def beyond_spec(self) -> bool:
        """Untestable for what the spec's axes lack (no trial of it still to run, its
        models not merely of unequal sizes): the summary counts these in one line."""
        return bool(self.untestable) and self.verdict != UNEQUAL and not self.not_run

    @property
    def finding(self) -> str:
        """The claim without its parenthesised definition (the summary table's column)."""
        return self.claim.split(" (")[0]

    @property
    def numbers(self) -> str:
        """What decided the verdict, and the trials not run yet."""
        return f"{self.decided_by}; not run yet: {self.not_run}" if self.not_run else self.decided_by

    @property
    def number(self) -> str:
        """The summary table's deciding number (its comparison: "Why each verdict"),
        else what the line lacks; and the trials not run yet."""
        head = self.figure or (self.untestable or self.decided_by)
        return f"{head}; not run yet: {self.not_run}" if self.not_run else head

    def markdown(self, variant: str = "") -> str:
        """The report's line ("Why each verdict"), prefixed with its task variant."""
        head = f"- [{variant}] **{self.verdict}**" if variant else f"- **{self.verdict}**"
        if self.untestable:
            text = f"{head}: {self.claim} ({self.untestable})."
        else:
            text = f"{head}{' ' + self.seeds if self.seeds else ''}: {self.claim}. "
            never = (" Not shown for every model it names: " + "; ".join(self.not_compared) + "."
                     if self.not_compared else "")
            left = "; ".join(c.text for c in self.left_out)
            if self.compared:
                text += "; ".join(c.said for c in self.compared) + "." + never
                text += f" Left out, as their cells can show it neither way: {left}." if left else ""
            else:
                text += f"No comparison here can show it either way: {left}." + never
            if self.still_training:
                text += (" Still training at the last evaluation, so more samples may change this: "
                         + "; ".join(self.still_training) + ".")
            text += f" {self.notes}" if self.notes else ""
        text += f" Not read, having no finite exact match: {'; '.join(self.unread)}." if self.unread else ""
        return text + (f" Not run yet, so not read: {self.not_run}." if self.not_run else "")


@dataclass(frozen=True)
class Part:
    """The findings of one task variant ("" where the run has no task axes): what they
    read, in plain sentences, then each finding."""

    variant: str = ""
    read: tuple[str, ...] = ()
    findings: tuple[Finding, ...] = ()


@dataclass(frozen=True)
class Findings:
    """A run's findings: per task variant, then the cells at guessing level (models
    that learnt nothing: "arch setup size n=N (exact match 0.512)")."""

    parts: tuple[Part, ...] = ()
    guessing: tuple[str, ...] = ()
    version: int = field(default=1)

    @property
    def lines(self) -> tuple[Finding, ...]:
        return tuple(f for part in self.parts for f in part.findings)

    @property
    def read(self) -> list[str]:
        return [text for part in self.parts for text in part.read]

    def markdown(self) -> list[str]:
        """The report's lines: each variant's notes and findings, then who guesses."""
        out = [line for part in self.parts
               for line in (*part.read, *(f.markdown(part.variant) for f in part.findings))]
        if self.guessing:
            out.append("- **At guessing level** (a model that guesses the answer scores this): "
                       + "; ".join(self.guessing) + ".")
        return out

    def to_json(self) -> str:
        return _ADAPTER.dump_json(self, indent=1).decode() + "\n"

    @classmethod
    def from_json(cls, text: str) -> Findings:
        return _ADAPTER.validate_json(text)

    def write(self, folder: Path) -> Path:
        path = Path(folder) / FILE
        path.write_text(self.to_json())
        return path


_ADAPTER = TypeAdapter(Findings)
