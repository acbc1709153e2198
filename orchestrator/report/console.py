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
    lines = report.findings.lines
    beyond = [f for f in lines if f.beyond_spec]  # one line for them all, not one each
    if lines:
        out += ["What this run shows of the paper's findings (report.md says why each):",
                *[f"  {f.verdict}{' ' + f.seeds if f.seeds else ''}: {f.finding}"
                  + (f" (not run yet: {f.not_run})" if f.not_run else "") for f in lines if f not in beyond]]
    if beyond:
        out.append(f"  Not testable with this spec: {len(beyond)} of {len(lines)} (report.md says what each needs)")
    return "\n".join(out)
