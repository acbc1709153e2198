"""`from icr_sweep import load_run`: a run's trials and every evaluation as a DataFrame."""

import json
from pathlib import Path

import pandas as pd
import pytest

from icr_sweep import best, load_run
from orchestrator.report import write_report
from orchestrator.rundir import read_run
from tests.orchestrator.test_report import accuracy, fake_run

STORED = Path(__file__).parents[2] / "tests" / "fixtures" / "stored_run" / "istree_micro"


def test_load_run_gives_every_evaluation_of_finished_interrupted_and_failed_trials(tmp_path):
    run, planned = fake_run(tmp_path, accuracy, unfinished={"mamba-cot-0.5M-n16-lr3e-4-s0"},
                          errored={"mamba-cot-0.5M-n32-lr3e-4-s1"})
    # A row between evaluations (a time checkpoint) is progress, not an evaluation.
    interrupted = run / "mamba-cot-0.5M-n16-lr3e-4-s0" / "result.json"
    interrupted.write_text(interrupted.read_text() + json.dumps({"samples": 150, "train_loss": 0.9, "evaluated": False}) + "\n")
    df = load_run(run)
    assert set(df["trial"]) == {t.name for t in planned}
    by_trial = {name: rows for name, rows in df.groupby("trial")}
    finished = by_trial["transformer-cot-0.5M-n16-lr3e-3-s2"]
    config = next(t for t in planned if t.name == "transformer-cot-0.5M-n16-lr3e-3-s2")
    assert finished["evaluation"].tolist() == [0, 1] and finished["samples"].tolist() == [100, 200]
    assert finished["val_exact_match"].tolist() == [0.1, pytest.approx(accuracy(config))]
    assert (finished["state"] == "finished").all() and (finished["lr"] == 3e-3).all() and (finished["seed"] == 2).all()
    assert (finished["arch"] == "transformer").all() and (finished["n"] == 16).all() and (finished["model.d_model"] == 64).all()
    stopped = by_trial["mamba-cot-0.5M-n16-lr3e-4-s0"]
    assert stopped["state"].tolist() == ["interrupted"] and stopped["samples"].tolist() == [100]
    failed = by_trial["mamba-cot-0.5M-n32-lr3e-4-s1"]
    assert failed["state"].tolist() == ["error"] and "CUDA out of memory" in failed["error"].iloc[0]
    assert failed["evaluation"].isna().all() and failed["val_exact_match"].isna().all()
    # One row per trial, as results.csv, without evaluations.
    latest = load_run(run, evaluations=False)
    assert len(latest) == len(planned) and "evaluation" not in latest
    pd.testing.assert_series_equal(latest.set_index("trial")["val_exact_match"].sort_index(),
                                   df.groupby("trial")["val_exact_match"].last().sort_index(), check_names=False)


def test_load_run_of_a_path_that_is_not_a_run_says_so(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such run directory"):
        load_run(tmp_path / "nothing")
    (tmp_path / "a-file").write_text("x")
    with pytest.raises(NotADirectoryError, match="a-file is a file, not a run directory"):
        load_run(tmp_path / "a-file")


def test_a_run_opens_with_its_sweep_ids_and_figures_and_its_times_are_datetimes(tmp_path):
    run, _ = fake_run(tmp_path, accuracy)
    trial = run / "transformer-cot-0.5M-n16-lr3e-3-s0" / "result.json"
    rows = [json.loads(line) for line in trial.read_text().splitlines()]
    trial.write_text("".join(json.dumps(dict(r, timestamp=1_790_000_000 + 60 * i)) + "\n" for i, r in enumerate(rows)))
    (tmp_path / "again").mkdir()
    other, _ = fake_run(tmp_path / "again", accuracy)
    other = other.rename(other.parent / "fake-2")  # the same spec run twice
    both = pd.concat([load_run(run), load_run(other)])
    # Concatenated, the two runs stay apart by their run directories' names.
    assert both.groupby("sweep")["trial"].nunique().to_dict() == {"fake": 18, "fake-2": 18}
    df = load_run(run)
    # (Issue 44: no empty task_label column where no trial has one; the task's fields
    # under the names the trackers give them.)
    assert list(df.columns[:16]) == ["sweep", "trial", "state", "arch", "setup", "size", "model", "n", "lr", "seed",
                                     "evaluation", "samples", "train_loss", "samples_per_s", "val_exact_match",
                                     "gen_accuracy"]
    assert "task.family" in df and "family" not in df
    assert df.columns.get_loc("error") > df.columns.get_loc("val_loss")  # the figures before the config
    stamps = df[df["trial"] == "transformer-cot-0.5M-n16-lr3e-3-s0"]["timestamp"]
    assert isinstance(stamps.dtype, pd.DatetimeTZDtype) and str(stamps.dtype.tz) == "UTC"
    assert stamps.tolist() == [pd.Timestamp(1_790_000_000, unit="s", tz="UTC"), pd.Timestamp(1_790_000_060, unit="s", tz="UTC")]
    latest = load_run(run, evaluations=False)
    assert list(latest.columns[:3]) == ["sweep", "trial", "state"] and (latest["sweep"] == "fake").all()


def test_best_is_the_reports_table_per_cell(tmp_path):
    run, _ = fake_run(tmp_path, accuracy)
    table = best(run)
    write_report(read_run(run), run)
    written = pd.read_csv(run / "best.csv")
    assert (table["sweep"] == "fake").all() and len(table) == len(written) == 4
    # Issue 53: exactly best.csv's columns (params, state floats, still training, the model named), in its order.
    assert list(table.columns) == ["sweep", *written.columns]
    assert {"params", "state_floats", "still_training", "model"} <= set(written.columns)
    key = ["arch", "setup", "size", "n"]
    ours = table.drop(columns="sweep").sort_values(key).reset_index(drop=True)
    theirs = written.sort_values(key).reset_index(drop=True)
    for column in ("lr", "seeds", "val_exact_match", "val_exact_match_std", "val_loss"):
        assert ours[column].tolist() == pytest.approx(theirs[column].tolist()), column
    # The transformer's cells: lr 3e-3 has the best mean exact match over seeds.
    assert set(table[table["arch"] == "transformer"]["lr"]) == {3e-3}


def test_best_of_a_run_with_no_trial_results_is_an_empty_table(tmp_path):
    """A run launched whose trials have not reported yet: its spec record alone."""
    import shutil

    (tmp_path / "empty").mkdir()
    shutil.copy(STORED / "icr-sweep.json", tmp_path / "empty")
    assert best(tmp_path / "empty").empty
    (tmp_path / "notes").mkdir()
    with pytest.raises(FileNotFoundError, match="holds no run of icr-sweep"):  # a folder that is no run (issue 65)
        best(tmp_path / "notes")


def test_a_storage_folder_is_named_as_such_with_the_runs_it_holds(tmp_path):
    """Issue 83, class 9: `load_run('runs')`, the storage folder above the sweeps'
    run directories, said it "holds no run"."""
    import shutil

    for name in ("istree_micro", "laptop"):
        shutil.copytree(STORED, tmp_path / "runs" / name)
    with pytest.raises(FileNotFoundError, match=r"runs is a storage folder holding the run directories of the sweeps "
                                                r"istree_micro, laptop: load one of them, load_run\('.*/runs/istree_micro'\)"):
        load_run(tmp_path / "runs")


def test_the_variants_of_an_arch_are_told_apart_by_their_model(tmp_path):
    """Issue 53: `groupby(["arch", "setup", "n"])` folded the laptop run's small-state
    Mamba into `mamba`; every table names the variant in its `model` column."""
    from orchestrator.report import model_labels

    table = pd.DataFrame({"arch": ["mamba", "mamba", "transformer"], "size": ["tiny", "tiny-dstate1-nlayers4", "0.5M"]})
    assert model_labels(table).tolist() == ["mamba", "mamba (tiny-dstate1-nlayers4)", "transformer"]
    run, _ = fake_run(tmp_path, accuracy)
    df = load_run(run)
    assert list(df.columns[:8]) == ["sweep", "trial", "state", "arch", "setup", "size", "model", "n"]
    assert (df["model"] == df["arch"]).all()  # the presets themselves: their arch


def test_the_notebook_example_of_the_docs_gives_the_reports_numbers(tmp_path):
    """Issue 53: docs/trackers.md's example, run on a run, gave numbers the report never shows."""
    import re
    from pathlib import Path

    run, _ = fake_run(tmp_path, accuracy)
    write_report(read_run(run), run)
    docs = (Path(__file__).parents[2] / "docs" / "trackers.md").read_text()
    block = re.search(r"```python\n(from icr_sweep import.*?)```", docs, re.S).group(1)
    scope = {}
    exec(block.replace('"runs/istree_laptop"', repr(str(run))), scope)
    written = pd.read_csv(run / "best.csv")
    for _, r in written.iterrows():
        assert scope["cells"].loc[(r["setup"], r["model"]), r["n"]] == pytest.approx(r["val_exact_match"])
        assert scope["per_rate"].loc[(r["model"], r["setup"], r["n"], r["lr"])] == pytest.approx(r["val_exact_match"])


def test_a_run_is_a_plain_table_every_column_hashable_and_no_model_carries_fields_it_lacks(tmp_path):
    """Issue 64: `nunique()` and `drop_duplicates()` raised TypeError on `model.attn_layer_idx`, a
    Transformer's row carried Mamba's mixer fields, and best()'s per-seed values were strings."""
    run, planned = fake_run(tmp_path, accuracy)
    for df in (load_run(run), load_run(run, evaluations=False)):
        counts = df.nunique()  # raised TypeError: unhashable type: 'list'
        assert counts["trial"] == len(planned) and len(df.drop_duplicates()) == len(df)
        transformer, mamba = df[df["arch"] == "transformer"], df[df["arch"] == "mamba"]
        assert transformer["model.mixer.d_state"].isna().all() and transformer["model.mixer.name"].isna().all()
        assert transformer["model.n_heads"].notna().all() and transformer["model.attn_layer_idx"].map(len).gt(0).all()
        assert mamba["model.n_heads"].isna().all() and mamba["model.attn_init"].isna().all()
        assert (mamba["model.mixer.d_state"] == 16).all() and (mamba["model.attn_layer_idx"] == ()).all()
        assert df.groupby("model")["trial"].nunique().to_dict() == {
            m: sum(t.model.arch == m for t in planned) for m in ("mamba", "transformer")}
    table = best(run)
    row = table.iloc[0]
    assert row["seed_ids"] == (0, 1, 2) and len(row["val_exact_match_by_seed"]) == 3
    assert all(isinstance(v, float) for v in row["val_exact_match_by_seed"] + row["lrs"])
    assert table.nunique()["seed_ids"] == 1
