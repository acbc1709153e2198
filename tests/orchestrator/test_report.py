"""Aggregation from stored results: states, best learning rate per cell, report files."""

import json

import pandas as pd
import pytest
from typer.testing import CliRunner

from orchestrator.cli import app
from orchestrator.report import best_by_cell, load_trials, write_report
from orchestrator.spec import SPEC_FILE, SweepSpec, expand


def fake_run(tmp_path, accuracy, unfinished=(), errored=(), search=None):
    """A run directory laid out as `launch` and Ray Tune write it, with a chosen final
    exact match per trial (a function of the trial config); generation accuracy and
    validation loss are derived from it so that each metric ranks lrs differently."""
    spec = SweepSpec(name="fake", axes=dict(archs=["transformer", "mamba"], setups=["cot"], sizes=["0.5M"],
                                            n=[16, 32], seeds=[0, 1, 2]),
                     lr=dict(transformer=[1e-3, 3e-3], mamba=3e-4), training=dict(samples=200, eval_every=100, warmup_samples=10),
                     **({"search": search} if search else {}))
    run = tmp_path / "fake"
    run.mkdir()
    (run / SPEC_FILE).write_text(json.dumps({"spec": spec.model_dump(mode="json")}))
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
            rows.append({"samples": 200, "train_loss": 0.5, "val_loss": loss(trial), "val_exact_match": acc,
                         "gen_accuracy": gen(trial), "final_eval": True})
        (d / "result.json").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return run, expand(spec)


def accuracy(trial):
    base = {"transformer": 0.9, "mamba": 0.6}[trial.model.arch] - 0.001 * trial.task.n
    bonus = 0.05 if trial.train.lr == 3e-3 else 0.0  # the transformer lr of best exact match
    return base + bonus + 0.01 * trial.train.seed


def gen(trial):
    # Generation accuracy prefers the other transformer lr, so the two choices differ.
    return 0.7 + (0.1 if trial.train.lr == 1e-3 else 0.0) + 0.01 * trial.train.seed


def loss(trial):
    # The lowest loss is at lr 1e-3 too; a higher one at 3e-3.
    return 0.2 + (0.3 if trial.train.lr == 3e-3 else 0.0) + 0.01 * trial.train.seed


def test_best_lr_is_chosen_by_mean_exact_match_over_seeds(tmp_path):
    run, trials = fake_run(tmp_path, accuracy)
    best = best_by_cell(load_trials(run))
    assert len(best) == 4  # (arch, setup, size, n) cells
    for _, row in best.iterrows():
        expected_lr = 3e-3 if row["arch"] == "transformer" else 3e-4
        assert row["lr"] == expected_lr and row["seeds"] == 3
        members = [t for t in trials if t.model.arch == row["arch"] and t.task.n == row["n"] and t.train.lr == expected_lr]
        assert row["val_exact_match"] == pytest.approx(sum(map(accuracy, members)) / 3)
        assert row["val_exact_match_std"] == pytest.approx(0.01)
        assert row["gen_accuracy"] == pytest.approx(sum(map(gen, members)) / 3)


@pytest.mark.parametrize("metric, mode, transformer_lr", [("val_exact_match", "max", 3e-3), ("gen_accuracy", "max", 1e-3),
                                                          ("val_loss", "min", 1e-3), ("val_loss", "max", 3e-3)])
def test_best_lr_follows_the_search_metric_and_mode(tmp_path, metric, mode, transformer_lr):
    run, _ = fake_run(tmp_path, accuracy)
    best = best_by_cell(load_trials(run), metric, mode)
    assert set(best.loc[best["arch"] == "transformer", "lr"]) == {transformer_lr}


def test_report_command_uses_the_specs_metric_and_mode(tmp_path):
    run, _ = fake_run(tmp_path, accuracy, search=dict(metric="val_loss", mode="min"))
    result = CliRunner().invoke(app, ["report", str(run)])
    assert result.exit_code == 0, result.output
    best = pd.read_csv(run / "best.csv")
    transformer = best[best["arch"] == "transformer"]
    assert set(transformer["lr"]) == {1e-3}
    assert transformer["val_loss"].max() == pytest.approx(0.21)  # the lowest mean loss over seeds
    assert "lr chosen by val_loss (lowest mean over seeds)" in (run / "report.md").read_text()


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
    # Exact match heads the report; generation accuracy follows, for the same cells.
    headline = text.index("0.5M models: teacher-forced exact match (the paper's metric)")
    beside = text.index("0.5M models: generation accuracy (ours")
    assert headline < beside < text.index("## Every trial")
    best = pd.read_csv(run / "best.csv")
    cell = best[(best["arch"] == "mamba") & (best["n"] == 16)].iloc[0]
    assert f"{cell['val_exact_match']:.3f} ± {cell['val_exact_match_std']:.3f} (lr 3e-04" in text[headline:beside]
    assert f"{cell['gen_accuracy']:.3f} ± {cell['gen_accuracy_std']:.3f} |" in text[beside:]
    for name in ("exact_match_0.5M.png", "gen_accuracy_0.5M.png"):
        assert (run / name).stat().st_size > 10_000
        assert f"]({name})" in text
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
