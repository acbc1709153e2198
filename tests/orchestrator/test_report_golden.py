"""What a user reads stays what it was when results became typed objects: the stored
run's console, report.md and best.csv, and the findings sections and console summary
of the stored laptop and capacity runs, byte for byte (tests/fixtures/README.md,
`report_golden/`)."""

import shutil
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

ROOT = Path(__file__).parents[2]
GOLDEN = ROOT / "tests" / "fixtures" / "report_golden"


def test_the_stored_runs_report_console_and_best_table_are_unchanged(tmp_path):
    from orchestrator.cli import app

    run = Path(shutil.copytree(ROOT / "tests/fixtures/stored_run/istree_micro", tmp_path / "istree_micro"))
    result = CliRunner().invoke(app, ["report", str(run)])
    assert result.exit_code == 0, result.output
    # The one addition: findings.json, the findings as data, among the files beside the report.
    console = (GOLDEN / "stored_run_console.txt").read_text().replace("(results.csv,", "(findings.json, results.csv,")
    assert result.output.replace(str(run), "<RUN>") == console
    assert (run / "report.md").read_text().replace(str(run), "<RUN>") == (GOLDEN / "stored_run_report.md").read_text()
    assert (run / "best.csv").read_text() == (GOLDEN / "stored_run_best.csv").read_text()


@pytest.mark.parametrize("name", ["istree_laptop_run8", "istree_laptop_run9", "capacity_or_training_cpu"])
def test_a_stored_runs_findings_sections_and_console_summary_are_unchanged(name):
    from orchestrator import report
    from workloads.tasks.istree import IsTreeTask

    best = pd.read_csv(ROOT / "sweeps" / "calibration" / name / "best.csv")
    pending = pd.DataFrame({"trial": ["x"], "arch": ["mamba"], "setup": ["cot"], "size": ["tiny"], "n": [6],
                            "state": ["pending"]})
    found = IsTreeTask.findings(best, pending)
    sections = "\n".join(report.findings_summary(found) + report.findings_reasons(found)) + "\n"
    assert sections == (GOLDEN / f"{name}_findings.md").read_text()
    written = report.Written("", best, found, "Sweep report: x", "1 trials: 1 finished.", ())
    assert report.console_summary(written) + "\n" == (GOLDEN / f"{name}_console.txt").read_text()


def test_the_legend_names_only_what_the_engines_lines_say():
    # The legend described outcomes of an earlier rule ("seeds disagree", "by the mean only", two standard
    # errors) that no line of the engine says: each outcome it names is one the lines print.
    from orchestrator.report.sections import LEGEND
    from workloads.tasks.findings import HOLDS, NOISE, OUT, REFUTED, SHOWN

    for words in ("seeds disagree", "by the mean only", "within the spread between seeds", "two standard errors:"):
        assert words not in LEGEND, words
    for outcome in (SHOWN, REFUTED, NOISE, HOLDS, OUT, "undecided", "alone", "Student's t"):
        assert outcome in LEGEND, outcome
