"""A run directory as this version stores it (tests/fixtures/stored_run: a real
launch of sweeps/istree_micro.yaml, its checkpoints left out) keeps loading: what
a later change to the run directory must not break."""

import shutil
from pathlib import Path

import pandas as pd

from icr_sweep import Findings, best, findings, load_run
from orchestrator.api import read_stored
from orchestrator.report import write_report
from orchestrator.rundir import PLAN_FILE, read_plan, read_run

STORED = Path(__file__).parents[1] / "fixtures" / "stored_run" / "istree_micro"


def _copy(tmp_path) -> Path:
    return Path(shutil.copytree(STORED, tmp_path / STORED.name))


def test_a_stored_run_reads_whole_and_reports_the_same_from_every_reader(tmp_path):
    run = _copy(tmp_path)
    stored = read_run(run)
    planned = read_plan(run)["trials"]
    assert sorted(stored.trials["trial"]) == sorted(planned) and set(stored.trials["state"]) == {"finished"}
    assert stored.notes == [] and stored.configs == planned  # each trial's stored config is the planned one
    assert all(rows[-1]["final_eval"] for rows in stored.rows.values())
    written = write_report(stored, run)
    text, table = written.text, written.best
    for name in planned:
        assert f"- `{name}` finished," in text
    assert pd.read_csv(run / "best.csv")["val_exact_match"].tolist() == table["val_exact_match"].tolist()
    assert best(run)["val_exact_match"].tolist() == table["val_exact_match"].tolist()
    # The findings as data: findings.json reads back to what the report rendered, and a notebook's
    # findings() decides the same on the run as it stands.
    stored_findings = Findings.from_json((run / "findings.json").read_text())
    assert stored_findings == written.findings == findings(run) and stored_findings.lines
    for line in stored_findings.markdown():
        assert line in text
    latest = load_run(run, evaluations=False).set_index("trial")
    assert latest["val_exact_match"].to_dict() == stored.trials.set_index("trial")["val_exact_match"].to_dict()


def test_a_run_launched_before_plans_were_stored_lists_its_trials_not_started_from_its_spec(tmp_path):
    run = _copy(tmp_path)
    planned = read_plan(run)["trials"]
    (run / PLAN_FILE).unlink()
    unstarted = sorted(planned)[0]
    shutil.rmtree(run / unstarted)
    for state in run.glob("experiment_state-*.json"):
        state.unlink()  # nor does Tune's record name it
    alone = read_run(run)  # the run directory's own reading: what is stored, and a note of what is not
    assert unstarted not in set(alone.trials["trial"]) and any("not started yet are not listed" in n for n in alone.notes)
    trials = read_stored(run).trials.set_index("trial")  # status, report, load_run: the plan the spec makes
    assert trials.loc[unstarted, "state"] == "pending" and len(trials) == len(planned)


def test_one_file_that_cannot_be_read_hides_only_its_own_trial(tmp_path):
    # Issue 42, class 8: a result.json (or error.txt) that is a directory made status
    # and report refuse the whole run and load_run raise IsADirectoryError.
    from typer.testing import CliRunner

    from orchestrator.cli import app

    run = _copy(tmp_path)
    broken, intact = sorted(read_plan(run)["trials"])
    (run / broken / "result.json").unlink()
    (run / broken / "result.json").mkdir()
    (run / broken / "error.txt").mkdir()
    trials = load_run(run, evaluations=False).set_index("trial")
    assert trials.loc[intact, "state"] == "finished"
    assert "result.json cannot be read" in trials.loc[broken, "error"]
    status = CliRunner().invoke(app, ["status", str(run), "--format", "json"])
    assert status.exit_code == 0, status.output
    report = CliRunner().invoke(app, ["report", str(run)])
    assert report.exit_code == 0, report.output
    assert f"- `{intact}` finished," in (run / "report.md").read_text()


def test_best_csv_has_the_columns_the_results_schema_names_in_its_order(tmp_path):
    # Issue 78: best.csv's columns are named once (workloads/results.py), and the report, the findings and
    # best() read them there: a column the report writes that the schema lacks, or one out of order, fails here.
    from workloads.results import BEST_COLUMNS, PER_SEED

    run = _copy(tmp_path)
    table = write_report(read_run(run), run).best
    assert tuple(table.columns) == BEST_COLUMNS
    assert tuple(pd.read_csv(run / "best.csv").columns) == BEST_COLUMNS
    for column, kind in PER_SEED.items():
        assert all(isinstance(x, kind) for value in best(run)[column] for x in value), column
