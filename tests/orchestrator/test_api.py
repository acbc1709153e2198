"""`from icr_sweep import load_run`: a run's trials and every evaluation as a DataFrame."""

import json

import pandas as pd
import pytest

from icr_sweep import load_run
from tests.orchestrator.test_report import accuracy, fake_run


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
