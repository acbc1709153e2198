"""What the console says of a report: its title, trial counts, notes and each
finding's verdict, rendered from what write_report wrote (never from its Markdown)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from orchestrator.report import Written


def console_summary(report: Written) -> str:
    """What the console says of a report (issue 53: the report itself, raw Markdown,
    was printed): its title and trial counts, its notes, and each finding's verdict,
    with the trials it would read that have not run yet; report.md holds the rest."""
    out = [report.title, report.counts, *report.notes]
    if report.findings.lines:
        out += ["What this run shows of the paper's findings (report.md says why each):",
                *[f"  {f.verdict}{' ' + f.seeds if f.seeds else ''}: {f.finding}"
                  + (f" (not run yet: {f.not_run})" if f.not_run else "") for f in report.findings.lines]]
    return "\n".join(out)
