"""Aggregation from stored results: states, best learning rate per cell, report files."""

import json

import pytest
from typer.testing import CliRunner

from orchestrator.cli import app
from orchestrator.report import best_by_cell, load_trials, write_report
from orchestrator.spec import SweepSpec, expand


def fake_run(tmp_path, accuracy, unfinished=(), errored=()):
    """A run directory laid out as Ray Tune writes it, with a chosen final accuracy
    per trial (a function of the trial config)."""
    spec = SweepSpec(name="fake", axes=dict(archs=["transformer", "mamba"], setups=["cot"], sizes=["0.5M"],
                                            n=[16, 32], seeds=[0, 1, 2]),
                     lr=dict(transformer=[1e-3, 3e-3], mamba=3e-4), training=dict(samples=200, eval_every=100, warmup_samples=10))
    run = tmp_path / "fake"
    for trial in expand(spec):
        d = run / trial.name
        d.mkdir(parents=True)
        (d / "params.json").write_text(json.dumps({"trial": trial.model_dump(mode="json")}))
        if trial.name in errored:
            (d / "error.txt").write_text("Traceback ...\nRuntimeError: CUDA out of memory\n")
            continue
        rows = [{"samples": 100, "train_loss": 1.0, "val_loss": 1.0, "val_exact_match": 0.1, "gen_accuracy": float("nan"), "final_eval": False}]
        if trial.name not in unfinished:
            acc = accuracy(trial)
            rows.append({"samples": 200, "train_loss": 0.5, "val_loss": 0.4, "val_exact_match": acc / 2, "gen_accuracy": acc, "final_eval": True})
        (d / "result.json").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return run, expand(spec)


def accuracy(trial):
    base = {"transformer": 0.9, "mamba": 0.6}[trial.model.arch] - 0.001 * trial.task.n
    bonus = 0.05 if trial.train.lr == 3e-3 else 0.0  # the best transformer lr
    return base + bonus + 0.01 * trial.train.seed


def test_best_lr_is_chosen_by_mean_accuracy_over_seeds(tmp_path):
    run, trials = fake_run(tmp_path, accuracy)
    best = best_by_cell(load_trials(run))
    assert len(best) == 4  # (arch, setup, size, n) cells
    for _, row in best.iterrows():
        expected_lr = 3e-3 if row["arch"] == "transformer" else 3e-4
        assert row["lr"] == expected_lr and row["seeds"] == 3
        members = [accuracy(t) for t in trials if t.model.arch == row["arch"] and t.task.n == row["n"] and t.train.lr == expected_lr]
        assert row["mean"] == pytest.approx(sum(members) / 3)
        assert row["std"] == pytest.approx(0.01)


def test_states_and_errors_come_from_the_trial_files(tmp_path):
    run, trials = fake_run(tmp_path, accuracy, unfinished={trials_name(0)}, errored={trials_name(1)})
    df = load_trials(run).set_index("trial")
    assert df.loc[trials_name(0), "state"] == "running"
    assert df.loc[trials_name(1), "state"] == "error"
    assert "CUDA out of memory" in df.loc[trials_name(1), "error"]
    assert (df["state"] == "finished").sum() == len(trials) - 2


def trials_name(i):
    names = ["transformer-cot-0.5M-n16-lr1e-3-s0", "mamba-cot-0.5M-n32-lr3e-4-s2"]
    return names[i]


def test_report_writes_every_trial_tables_csv_and_plots(tmp_path):
    run, trials = fake_run(tmp_path, accuracy, errored={trials_name(1)})
    result = CliRunner().invoke(app, ["report", str(run)])
    assert result.exit_code == 0, result.output
    text = (run / "report.md").read_text()
    for t in trials:
        assert t.name in text
    assert "CUDA out of memory" in text and "| cot | transformer |" in text
    assert (run / "accuracy_0.5M.png").stat().st_size > 10_000
    assert len((run / "results.csv").read_text().splitlines()) == len(trials) + 1
    status = CliRunner().invoke(app, ["status", str(run)])
    assert status.exit_code == 0 and "1 error" in status.output


def test_report_of_an_empty_directory_is_a_clear_error(tmp_path):
    result = CliRunner().invoke(app, ["report", str(tmp_path)])
    assert result.exit_code != 0 and "no trial results" in result.output


def test_write_report_is_a_function_of_the_files_alone(tmp_path):
    run, _ = fake_run(tmp_path, accuracy)
    first, _, _ = write_report(run)
    second, _, _ = write_report(run)
    assert first == second
