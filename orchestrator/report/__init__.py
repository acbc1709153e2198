"""The report of a run, as orchestrator.rundir read it: the best learning rate per
cell, the paper's findings, tables and figures. Presentation only: it opens no
file of the run (every figure comes from the `Run` it is given), so a report can
always be regenerated from the stored results.

A package by concern: `tables` (best.csv, the robust score, the frontier, the
learning-rate window), `figures`, `sections` (the Markdown of each part),
`opening` (the commands that open the run in each tool), `console` (the console's
summary); write_report puts them together.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import pandas as pd

from orchestrator.report.console import console_summary
from orchestrator.report.figures import arch_style, plot, plot_frontier, variant_numbers
from orchestrator.report.opening import open_commands
from orchestrator.report.sections import (findings_reasons, findings_summary, frontier_section, headline,
                                          lr_window_section, models_section, partial_note, robust_section,
                                          trials_section, what_it_shows)
from orchestrator.report.tables import (FALLING, best_by_cell, best_table, frontier, lr_window, markdown_tables,
                                        model_labels, robust_tables, still_falling, unfinished_trials, window_text)
from orchestrator.rundir import PLOT_FILES, REPORT_FILES, Run, check_report_dir, record_report
from orchestrator.secrets import redact
from workloads.metrics import METRICS, SOLVED
from workloads.tasks import TASKS
from workloads.tasks.verdicts import Findings


@dataclass(frozen=True)
class Written:
    """A report as write_report wrote it: its Markdown, the per-cell best table, the
    findings, and the title, trial counts and notes it opens with (the console's
    summary renders these; it never reads the Markdown back)."""

    text: str
    best: pd.DataFrame
    findings: Findings
    title: str
    counts: str
    notes: tuple[str, ...]


def write_report(run: Run, out_dir: Path, solved: float = SOLVED, location: Optional[str] = None) -> Written:
    """Writes report.md, findings.json, results.csv, best.csv and the plots of `run`
    (as orchestrator.rundir.read_run read it) into `out_dir`, with frontier.csv and
    frontier.png (a cell is solved at exact match >= `solved`). Each cell's learning
    rate is chosen by the sweep's search.metric and search.mode. `location`: the run
    directory as the user names it, for the commands that open it in each tool
    (default `out_dir`)."""
    out_dir, df = Path(out_dir), run.trials
    if df.empty:
        raise FileNotFoundError(f"{out_dir}: no trial results (no */params.json)")
    owned = check_report_dir(out_dir)  # a folder of `train` trials may hold a user's report.md: RunDirError naming it
    metric, mode, tie_break = run.chosen_by
    df.to_csv(out_dir / "results.csv", index=False)
    best, falling = best_table(run)
    best.to_csv(out_dir / "best.csv", index=False)
    for stale in (p for pattern in PLOT_FILES for p in out_dir.glob(pattern) if owned is None or p.name in owned):
        stale.unlink()  # an earlier report's: a plot of a metric no longer measured must not linger
    plots = plot(best, out_dir, run.task) if not best.empty else []
    counts = df["state"].value_counts().to_dict()
    selected_by = (f"{metric} ({'highest' if mode == 'max' else 'lowest'} mean over seeds; ties by "
                   f"{'highest' if METRICS[tie_break].mode == 'max' else 'lowest'} {tie_break})")
    unfinished = unfinished_trials(run)
    title = f"Sweep report: {out_dir.name}"
    tally = f"{len(df)} trials: " + ", ".join(f"{v} {k}" for k, v in sorted(counts.items())) + "."
    partial = [partial_note(run, unfinished, location or str(out_dir))] if len(unfinished) else []
    found = TASKS[run.task][1].findings(best, unfinished) if not best.empty else Findings()
    lines = [f"# {title}", "", tally, "", *([what_it_shows(found), ""] if found.lines else []),
             *[f"**Note:** {note}\n" for note in partial],
             "Open this run in:", "", *[f"- {line}" for line in open_commands(run, location or str(out_dir), out_dir)], "",
             *[f"**Note:** {note}\n" for note in run.notes],
             headline(best, run.task), ""]
    # What the run shows first (issue 53; in one sentence, issue 79): the findings in one
    # sentence each, then the figures, then the tables, then each verdict's full reasoning.
    lines += findings_summary(found)
    lines += ["## Figures", "", *[f"![{p.stem}]({p.name})" for p in plots], ""] if plots else []
    lines += [*models_section(best), "## Best learning rate per cell", "",
              markdown_tables(best, selected_by) if not best.empty else "No finished trial yet.\n"]
    robust = robust_tables(best) if not best.empty else ""
    lines += robust_section(robust, solved)
    lines += lr_window_section(df, out_dir, solved, run.task)
    if not best.empty:
        lines += frontier_section(best, run, out_dir, solved, robust=bool(robust))
    lines += findings_reasons(found)
    if falling:
        lines += ["", f"**Under-trained:** the training loss of these cells fell by more than {FALLING:.0%} between "
                  "their last two evaluations, so more samples may change them (cells at exact match 1.000 on every "
                  "seed are left out): " + "; ".join(f"{' '.join(map(str, key[:3]))} n={key[3]} ({drop})"
                                                     for key, drop in falling.items()) + "."]
    lines += trials_section(df)
    text = redact("\n".join(lines) + "\n")  # a URL's secret (a storage's, a tracker's) never in the report
    (out_dir / "report.md").write_text(text)
    found.write(out_dir)
    record_report(out_dir, [p.name for p in report_files(out_dir)])
    notes = tuple(redact(f"**Note:** {note}").split("\n")[0] for note in (*partial, *run.notes))
    return Written(text, best, found, title, tally, notes)


def report_files(out_dir: Path) -> list[Path]:
    """The files write_report wrote into `out_dir`."""
    return [p for pattern in REPORT_FILES for p in sorted(Path(out_dir).glob(pattern))]


__all__ = ["Written", "write_report", "report_files", "console_summary", "open_commands", "best_by_cell", "best_table",
           "frontier", "lr_window", "window_text", "markdown_tables", "robust_tables", "model_labels", "still_falling",
           "unfinished_trials", "plot", "plot_frontier", "arch_style", "variant_numbers", "findings_summary",
           "findings_reasons"]
