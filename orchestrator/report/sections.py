"""The report's sections in Markdown, each from the tables, figures and findings it
shows: the headline, the models compared, the findings' summary and reasons, the
robust score, the learning-rate window, the frontier and the trials."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from orchestrator.report.figures import model_key, plot_frontier, plot_lr_window
from orchestrator.report.tables import (by_base_size, cell_shapes, frontier, lr_window, measured_metrics, num,
                                        setup_key, size_key, window_text)
from orchestrator.rundir import Run
from orchestrator.secrets import command
from workloads.metrics import HEADLINE, PLOTTED
from workloads.tasks import DEFAULT_TASK, TASKS
from workloads.tasks.verdicts import UNEQUAL, Findings


def lr_window_section(df: pd.DataFrame, out_dir: Path, solved: float, task: str) -> list[str]:
    """The report's section on the learning-rate window: its figures and, per base
    size, each model's window per setup and n."""
    window = lr_window(df, solved)
    if window.empty:
        return []
    lines = ["", "## The learning-rate window", "",
             "Held-out exact match against the learning rate, per cell tried at two or more rates: each seed a "
             f"point, the mean over seeds a line, and shaded the rates where that mean reaches {solved:g} (the "
             "model's window). A model that solves inside a narrow window only is a question of training as much "
             "as of capacity (docs/specs.md).", ""]
    for path in plot_lr_window(window, out_dir, solved, task):
        lines += [f"![{path.stem}]({path.name})", ""]
    for size, part in by_base_size(window):
        ns = sorted(part["n"].unique())
        lines += [f"### {size} models: the rates whose held-out exact match reaches {solved:g}", "",
                  "| setup | model | " + " | ".join(f"n={n}" for n in ns) + " |", "|---|---|" + "---|" * len(ns)]
        for (setup, model), rows in sorted(part.groupby(["setup", "model"]),
                                           key=lambda g: (setup_key(g[0][0]), model_key(g[0][1]))):
            cells = {n: window_text(r) for n, r in rows.groupby("n")}
            lines.append(f"| {setup} | {model} | " + " | ".join(cells.get(n, "-") for n in ns) + " |")
        lines.append("")
    return lines


def partial_note(run: Run, unfinished: pd.DataFrame, location: str) -> str:
    """What a report of a partial run says first: how many trials are not finished,
    that the findings read the finished ones, and the command that continues it."""
    counts = unfinished["state"].value_counts()
    left = ", ".join(f"{k} {state}" for state, k in sorted(counts.items()))
    go_on = (f"continue it with `{command('icr-sweep', 'resume', location)}`" if run.spec is not None else
             "re-run each trial's `icr-sweep train` with its --out to continue it")
    return (f"this run is partial: {left} of {len(run.trials)} trials. The findings read the finished trials; each "
            f"line names the trials it would read that have not run yet. To finish it, {go_on}.")


def models_section(best: pd.DataFrame) -> list[str]:
    """The models the run compares: parameters and recurrent state, which the findings read."""
    if best.empty or best["params"].isna().all():
        return []
    lines = ["## Models", "", "Trainable parameters (the frozen embedding aside) and the recurrent state a sequence "
             "carries; the findings compare models whose parameters are within 1.2x of each other.", "",
             "| arch | size | params | state floats |", "|---|---|---|---|"]
    models = best.drop_duplicates(["arch", "size"])
    # A state that grows with the length (log-linear Mamba-2's) differs by n: its range.
    span = best.groupby(["arch", "size"])["state_floats"].agg(["min", "max"])
    order = {label: i for i, label in enumerate(sorted(models["size"].unique(), key=size_key))}
    for _, r in models.sort_values(["size", "arch"], key=lambda c: c.map(order) if c.name == "size" else c).iterrows():
        lo, hi = span.loc[(r["arch"], r["size"])]
        state = num(lo, "{:,.0f}") if lo == hi or hi != hi else f"{lo:,.0f} to {hi:,.0f} (grows with n)"
        lines.append(f"| {r['arch']} | {r['size']} | {num(r['params'], '{:,.0f}')} | {state} |")
    return lines + [""]


def robust_section(robust: str, solved: float) -> list[str]:
    if not robust:
        return []
    return ["", "## Robust to the learning rate", "",
            "Per cell, each seed's learning rate is the one its validation picks (as above), and the score is "
            "teacher-forced exact match on a held-out set (as many samples, a stream of their own) at that rate, "
            f"mean ± std over seeds; beside it, how many of the rates tried reach exact match >= {solved:g} "
            "on validation (mean over their seeds). A cell solved at one lucky rate shows 1/k.", "", robust]


LEGEND = ("*shown* / *refuted*: a comparison whose statistic, on the mean over its seeds, lies beyond its threshold "
          "by more than its margin, for or against the claim (the margin: Student's t on the seeds times the mean's "
          "standard error, never below the counts' sampling error; on one seed, two standard errors of sampling and "
          "the task's training-noise floor); *within noise*: neither; *seed s alone*: a seed on the other side of the "
          "threshold, with the margin a run of it alone would have, which holds the comparison *undecided* only where "
          "it contradicts the mean beyond that margin; *holds*: a check at an n between the end points, which can only "
          "refute; *left out*: its cells can show the claim neither way (every cell at guessing level or at the "
          "ceiling, or outside the cells the claim speaks of), with their numbers; *above guessing*: exact match above "
          "what guessing scores (the answer alone 0.5, a trace 0), as a share of what guessing leaves, (exact match - "
          "chance) / (1 - chance), so that setups with different chance compare. Rules: docs/findings.md.")


def findings_summary(found: Findings) -> list[str]:
    """The report's table of verdicts, each with the number of the comparison that
    decided it (a refuted one for Not reproduced, the weakest shown one for
    Reproduced, the open one else; what a line lacks where none did), after what the
    findings read; each comparison in words under "Why each verdict"."""
    if not found.lines:
        return []
    return ["## What this run shows of the paper's findings", "",
            "Decided by the rules of docs/findings.md (teacher-forced exact match; models compared at equal size, on "
            "counts of samples, on the mean over seeds with a margin of Student's t on them (one seed: the task's "
            "training-noise floor), a seed alone holding a line open only beyond its own margin; a line reads "
            "Reproduced only where every model it names has a comparison shown and none is refuted; each row gives "
            "the statistic of the comparison that decided it, against what is claimed and its margin). Each line's "
            "every comparison, in words: "
            "[Why each verdict](#why-each-verdict).", "", *found.read, "",
            "| verdict | finding | the deciding number |", "|---|---|---|",
            *[f"| {f.verdict}{' ' + f.seeds if f.seeds else ''} | {f.finding} | {f.number} |"
              for f in found.lines if not f.beyond_spec],
            *_beyond_spec(found), "", LEGEND, ""]


def what_it_shows(found: Findings) -> str:
    """The report's opening sentence: how the paper's findings fared on this run."""
    lines = found.lines
    if not lines:
        return ""
    counts = {"reproduced": sum(f.verdict == "Reproduced" for f in lines),
              "not reproduced": sum(f.verdict == "Not reproduced" for f in lines),
              "not decided": sum(f.verdict.lower().endswith(("not decided", "cannot tell")) for f in lines),
              "not testable at equal size": sum(f.verdict == UNEQUAL for f in lines),
              "not testable with this spec": sum(f.beyond_spec for f in lines)}
    counts["answered"] = len(lines) - sum(counts.values())  # the questions' lines (capacity or training)
    said = ", ".join(f"{n} {what}" for what, n in counts.items() if n)
    return f"**What this run shows:** of its task's {len(lines)} findings, {said} (the table below says which)."


def _beyond_spec(found: Findings) -> list[str]:
    """One row for the findings the spec cannot test (each named, with what it needs, below)."""
    beyond = [f for f in found.lines if f.beyond_spec]
    if not beyond:
        return []
    return [f"| Not testable with this spec | {len(beyond)} of the {len(found.lines)} findings | each, and what it "
            "needs: [Why each verdict](#why-each-verdict) |"]


def findings_reasons(found: Findings) -> list[str]:
    lines = [text for text in found.markdown() if text.startswith("- ")]
    return ["", "## Why each verdict", "", *lines] if lines else []


def frontier_section(best: pd.DataFrame, run: Run, out_dir: Path, solved: float, robust: bool) -> list[str]:
    """frontier.csv and .png (and their robust twins), and the report's tables of them."""
    model_of, longest = cell_shapes(run)
    table = frontier(best, solved, model_of, sample_length=longest)
    table.to_csv(out_dir / "frontier.csv", index=False)
    plot_frontier(table, out_dir, solved, longest)
    lines = ["", f"## Frontier: the largest n each model solves (exact match >= {solved:g})", "",
             "Each model's state and size: the models table above; all of it in frontier.csv.", "",
             "| setup | model | largest n solved | of n up to |", "|---|---|---|---|"]
    for _, r in table.iterrows():
        lines.append(f"| {r['setup']} | {r['arch']} {r['size']} | {_solved_upto(r)} | {r['largest_tried']} |")
    lines += ["", "![frontier](frontier.png)"]
    if not robust:
        return lines
    robust_table = frontier(best, solved, model_of, "robust_exact_match", sample_length=longest)
    robust_table.to_csv(out_dir / "frontier_robust.csv", index=False)
    plot_frontier(robust_table, out_dir, solved, longest, robust=True)
    lines += ["", f"By the robust score (held-out exact match at each seed's rate >= {solved:g}):", "",
              "| setup | model | largest n solved | of n up to |", "|---|---|---|---|"]
    for _, r in robust_table.iterrows():
        lines.append(f"| {r['setup']} | {r['arch']} {r['size']} | {_solved_upto(r)} | {r['largest_tried']} |")
    return lines + ["", "![frontier, robust](frontier_robust.png)"]


def _solved_upto(row) -> str:
    """A frontier row's largest n solved, 'none', and '(all)' where it solves every n tried."""
    got = "none" if row["largest_solved"] != row["largest_solved"] else f"{int(row['largest_solved'])}"
    return got + (" (all)" if row["solves_all"] else "")


def trials_section(df: pd.DataFrame) -> list[str]:
    """Each trial, a line each (a table of eight columns overflowed a phone's screen):
    its state, samples and every metric measured; results.csv holds the same."""
    shown = [m for m in PLOTTED if m in df and df[m].notna().any()] or [HEADLINE]
    lines = ["", "## Every trial", "", f"Each trial's state, samples and last evaluation ({', '.join(shown)}, "
             "val_loss), as results.csv holds them:", ""]
    for _, r in df.sort_values("trial").iterrows():
        figures = ", ".join(f"{m} {num(r[m])}" for m in [*shown, "val_loss"])
        error = f"; error: {r['error']}" if isinstance(r["error"], str) and r["error"] else ""
        lines.append(f"- `{r['trial']}` {r['state']}, {num(r['samples'], '{:,.0f}')} samples: {figures}{error}")
    return lines


def headline(best: pd.DataFrame, task: str = DEFAULT_TASK) -> str:
    """What the tables show: the paper's metric, then those of ours some cell measured."""
    text = ("Headline: teacher-forced exact match on the validation set at the last evaluation, the metric the "
            "paper reports.")
    measured = {m for m, _ in measured_metrics(best)} if not best.empty else set()
    if "gen_accuracy" in measured:
        guess = TASKS[task][1].generation_chance
        text += (" Beside it: generation accuracy, greedy decoding with the real retriever filling every ENDSEARCH "
                 "(this project's addition" + (f"; a model that fails still scores about {guess:g} by guessing the "
                                               "answer)." if guess is not None else ")."))
    if "val_token_accuracy" in measured:
        text += " Also: teacher-forced accuracy per supervised token" + (
            " (zoology's accuracy per query)." if task == "mqar" else ".")
    return text
