"""The per-cell Optuna searcher: budgets, configs it proposes, and save/restore for
resume; the trials' actors named after their trials."""

from pathlib import Path

import pytest

from orchestrator.grid import cells
from orchestrator.spec import SweepSpec
from orchestrator.optuna_search import CellwiseOptuna
from workloads.config import TrialConfig


def optuna_spec(**search):
    return SweepSpec(
        name="o", axes=dict(archs=["transformer", "mamba"], setups=["cot"], sizes=["tiny"], n=[5], seeds=[0]),
        lr=dict(transformer=dict(distribution="loguniform", low=1e-4, high=1e-2),
                mamba=dict(distribution="uniform", low=1e-3, high=2e-3)),
        search=dict(method="optuna", **search), training=dict(samples=100, warmup_samples=10, eval_every=100),
    )


def test_each_cell_gets_its_budget_of_trials_within_its_distribution():
    spec = optuna_spec(num_samples=3)
    searcher = CellwiseOptuna(spec)
    proposals = [searcher.suggest(f"t{i}") for i in range(6)]
    assert searcher.suggest("t6") == CellwiseOptuna.FINISHED
    configs = [TrialConfig.model_validate(p["trial"]) for p in proposals]
    for arch, (low, high) in {"transformer": (1e-4, 1e-2), "mamba": (1e-3, 2e-3)}.items():
        lrs = [c.train.lr for c in configs if c.model.arch == arch]
        assert len(lrs) == 3 and all(low <= lr <= high for lr in lrs)
    assert len(cells(spec)) == 2


def test_a_restored_searcher_continues_where_it_stopped(tmp_path):
    spec = optuna_spec(num_samples=2)
    first = CellwiseOptuna(spec)
    done = [first.suggest("a"), first.suggest("b")]
    first.on_trial_complete("a", {"val_exact_match": 0.5, "training_iteration": 1})
    first.save(str(tmp_path / "searcher.pkl"))
    restored = CellwiseOptuna(spec)
    restored.restore(str(tmp_path / "searcher.pkl"))
    rest = [restored.suggest("c"), restored.suggest("d")]
    assert restored.suggest("e") == CellwiseOptuna.FINISHED
    archs = sorted(TrialConfig.model_validate(p["trial"]).model.arch for p in done + rest)
    assert archs == ["mamba", "mamba", "transformer", "transformer"]
    restored.on_trial_complete("b", {"val_exact_match": 0.7, "training_iteration": 1})  # known after restore


def test_studies_kept_in_a_storage_hold_each_cells_trials_and_values_and_survive_a_restore(tmp_path):
    import optuna

    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    spec = optuna_spec(num_samples=2)
    first = CellwiseOptuna(spec, storage)
    proposals = {tid: first.suggest(tid) for tid in ("a", "b")}
    first.on_trial_complete("a", {"val_exact_match": 0.25, "training_iteration": 1})
    first.save(str(tmp_path / "searcher.pkl"))
    restored = CellwiseOptuna(spec, storage)
    restored.restore(str(tmp_path / "searcher.pkl"))
    restored.on_trial_complete("b", {"val_exact_match": 0.75, "training_iteration": 1})
    names = sorted(optuna.get_all_study_names(storage))
    assert names == ["o/mamba-cot-tiny-n5-s0", "o/transformer-cot-tiny-n5-s0"]
    for tid, value in (("a", 0.25), ("b", 0.75)):
        config = TrialConfig.model_validate(proposals[tid]["trial"])
        study = optuna.load_study(study_name=f"o/{config.model.arch}-cot-tiny-n5-s0", storage=storage)
        (trial,) = study.trials
        assert trial.state == optuna.trial.TrialState.COMPLETE and trial.value == value
        assert trial.params["lr"] == config.train.lr


def test_rows_between_evaluations_are_not_told_and_a_trial_ends_with_its_last_evaluation(tmp_path):
    """A time or stop checkpoint's row holds no metric: Optuna hears only
    evaluations, and a trial whose last row was such a checkpoint ends with the
    value of its last evaluation (issue 28, class 1)."""
    import optuna

    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    searcher = CellwiseOptuna(optuna_spec(num_samples=1), storage)
    proposal = searcher.suggest("a")
    searcher.on_trial_result("a", {"val_exact_match": 0.4, "training_iteration": 1, "evaluated": True})
    between = {"samples": 50, "train_loss": 1.0, "training_iteration": 2, "evaluated": False, "checkpoint_reason": "time"}
    searcher.on_trial_result("a", between)
    searcher.on_trial_complete("a", between)
    arch = TrialConfig.model_validate(proposal["trial"]).model.arch
    (trial,) = optuna.load_study(study_name=f"o/{arch}-cot-tiny-n5-s0", storage=storage).trials
    assert trial.state == optuna.trial.TrialState.COMPLETE and trial.value == 0.4


def test_a_trial_optuna_finished_before_the_driver_was_killed_is_not_told_again(tmp_path):
    """SIGKILL between Optuna storing a trial's end and Tune storing its state: the
    restored searcher still holds the trial as running, and Tune re-runs it. Its
    rows and end are then skipped, not refused by Optuna (issue 28, class 2)."""
    import optuna

    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    spec = optuna_spec(num_samples=1)
    first = CellwiseOptuna(spec, storage)
    proposal = first.suggest("a")
    first.save(str(tmp_path / "searcher.pkl"))  # Tune's last saved state: "a" running
    first.on_trial_result("a", {"val_exact_match": 0.6, "training_iteration": 1})
    first.on_trial_complete("a", {"val_exact_match": 0.6, "training_iteration": 1})  # stored, then the kill
    restored = CellwiseOptuna(spec, storage)
    restored.restore(str(tmp_path / "searcher.pkl"))
    restored.on_trial_result("a", {"val_exact_match": 0.3, "training_iteration": 1})  # the re-run's rows
    restored.on_trial_complete("a", {"val_exact_match": 0.3, "training_iteration": 1})
    arch = TrialConfig.model_validate(proposal["trial"]).model.arch
    (trial,) = optuna.load_study(study_name=f"o/{arch}-cot-tiny-n5-s0", storage=storage).trials
    assert trial.state == optuna.trial.TrialState.COMPLETE and trial.value == 0.6


@pytest.mark.parametrize("saved_after_first_evaluation", [False, True], ids=["saved-before-any", "saved-after-one"])
@pytest.mark.parametrize("tunes_last", ["checkpoint", "first-evaluation"])
def test_a_trial_whose_last_evaluation_came_after_tunes_last_save_ends_with_that_evaluation(
        tmp_path, saved_after_first_evaluation, tunes_last):
    """A driver killed after a trial's last evaluation and before its end: resumed,
    the trial restores its last checkpoint, trains nothing and reports nothing, and
    Tune ends it with the last result its restored state holds, older than that
    evaluation. Optuna is told the last evaluation all the same: it was stored as it
    came (CI: the study held the trial unfinished or pruned, or told its first value)."""
    import optuna

    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    spec = optuna_spec(num_samples=1)
    first = CellwiseOptuna(spec, storage)
    proposal = first.suggest("a")
    evaluations = [{"samples": 50, "val_exact_match": 0.2, "val_loss": 2.0, "training_iteration": 1, "evaluated": True},
                   {"samples": 100, "val_exact_match": 0.6, "val_loss": 1.0, "training_iteration": 3, "evaluated": True,
                    "final_eval": True}]
    checkpoint = {"samples": 75, "train_loss": 1.5, "training_iteration": 2, "evaluated": False,
                  "checkpoint_reason": "time"}
    if not saved_after_first_evaluation:
        first.save(str(tmp_path / "searcher.pkl"))
    first.on_trial_result("a", evaluations[0])
    if saved_after_first_evaluation:
        first.save(str(tmp_path / "searcher.pkl"))
    first.on_trial_result("a", checkpoint)
    first.on_trial_result("a", evaluations[1])  # then the kill
    restored = CellwiseOptuna(spec, storage)
    restored.restore(str(tmp_path / "searcher.pkl"))
    restored.on_trial_complete("a", checkpoint if tunes_last == "checkpoint" else evaluations[0])
    arch = TrialConfig.model_validate(proposal["trial"]).model.arch
    (trial,) = optuna.load_study(study_name=f"o/{arch}-cot-tiny-n5-s0", storage=storage).trials
    assert trial.state == optuna.trial.TrialState.COMPLETE and trial.value == 0.6
    assert trial.user_attrs["val_loss"] == 1.0  # the figures beside it are that evaluation's


def test_a_moved_run_resumes_against_its_own_optuna_db(tmp_path, monkeypatch):
    """The searcher's saved state names the optuna.db where the run was launched; a
    run copied elsewhere resumes against the copy's (issue 28, class 2)."""
    import shutil

    import optuna

    from orchestrator import optuna_search

    spec = optuna_spec(num_samples=2)
    old, new = tmp_path / "old", tmp_path / "new"
    old.mkdir()
    first = CellwiseOptuna(spec, f"sqlite:///{old / 'optuna.db'}")
    proposal = first.suggest("a")
    first.save(str(old / "searcher.pkl"))
    shutil.move(old, new)
    monkeypatch.setitem(optuna_search.RESUMING, "run_dir", str(new))
    restored = CellwiseOptuna(spec, f"sqlite:///{new / 'optuna.db'}")
    restored.restore(str(new / "searcher.pkl"))
    restored.on_trial_complete("a", {"val_exact_match": 0.5, "training_iteration": 1})
    assert not old.exists()
    arch = TrialConfig.model_validate(proposal["trial"]).model.arch
    (trial,) = optuna.load_study(study_name=f"o/{arch}-cot-tiny-n5-s0", storage=f"sqlite:///{new / 'optuna.db'}").trials
    assert trial.value == 0.5


def test_an_arch_at_a_fixed_rate_runs_each_rate_once_beside_a_searched_one():
    """An Optuna spec may search one arch's rate and hold another's fixed: the fixed
    arch's cells run each of its rates once, unsearched (issue 28, class 4)."""
    spec = SweepSpec(
        name="o", axes=dict(archs=["transformer", "mamba"], setups=["cot"], sizes=["tiny"], n=[5], seeds=[0]),
        lr=dict(transformer=[1e-3, 3e-3], mamba=dict(distribution="loguniform", low=1e-3, high=1e-2)),
        search=dict(method="optuna", num_samples=3), training=dict(samples=100, warmup_samples=10, eval_every=100),
    )
    assert spec.trial_count() == 2 + 3
    searcher = CellwiseOptuna(spec)
    configs = [TrialConfig.model_validate(searcher.suggest(f"t{i}")["trial"]) for i in range(5)]
    assert searcher.suggest("t5") == CellwiseOptuna.FINISHED
    assert sorted(c.train.lr for c in configs if c.model.arch == "transformer") == [1e-3, 3e-3]
    assert all(1e-3 <= c.train.lr <= 1e-2 for c in configs if c.model.arch == "mamba")
    searcher.on_trial_complete("t0", {"val_exact_match": 0.5, "training_iteration": 1})  # fixed or searched alike


def test_a_deleted_checkpoint_that_tune_hands_over_falls_back_to_an_older_one(tmp_path, monkeypatch):
    """Issue 28, class 6: the directory Tune restores was deleted (older and newer
    ones present): the trial failed for good on every resume; a truncated one fell
    back. Now both fall back alike, saying which was passed over."""
    import pyarrow.fs
    import torch
    from ray import tune

    from orchestrator import worker
    from workloads.checkpoint import first_intact

    config = TrialConfig.model_validate(CellwiseOptuna(optuna_spec(num_samples=1)).suggest("a")["trial"])
    trial_dir = tmp_path / "trial"
    for name, samples in (("checkpoint_000000", 10), ("checkpoint_000002", 30)):
        (trial_dir / name).mkdir(parents=True)
        torch.save({"config": config.model_dump(mode="json"), "model": {}, "optimizer": {}, "samples": samples},
                   trial_dir / name / "checkpoint.pt")
    monkeypatch.setattr(tune, "get_checkpoint", lambda: tune.Checkpoint(str(trial_dir / "checkpoint_000001")))
    said = []
    storage = (pyarrow.fs.LocalFileSystem(), str(trial_dir))
    chosen = first_intact(worker._checkpoints(str(tmp_path / "work"), storage), config, said.append)
    assert chosen is not None and torch.load(chosen / "checkpoint.pt", weights_only=True)["samples"] == 30
    assert "checkpoint_000001 cannot be fetched" in said[0] and "continuing from the older checkpoint" in said[1], said


def test_a_checkpoint_newer_than_the_one_tune_hands_over_is_the_one_restored(tmp_path, monkeypatch):
    """Tune hands over the newest checkpoint its saved state knows; a driver killed
    within seconds of a trial's next one (its last, say) leaves a state that does
    not know it: the trial continued from the older one, trained its last stretch
    again and reported its last evaluation twice (the Optuna stop/kill/resume test,
    on a fresh clone). The newest intact one in the trial's directory wins."""
    import os

    import pyarrow.fs
    import torch
    from ray import tune

    from orchestrator import worker
    from workloads.checkpoint import first_intact

    config = TrialConfig.model_validate(CellwiseOptuna(optuna_spec(num_samples=1)).suggest("a")["trial"])
    trial_dir = tmp_path / "trial"
    for name, samples, mtime in (("checkpoint_000005", 4896, 1_000), ("checkpoint_000006", 6144, 2_000)):
        (trial_dir / name).mkdir(parents=True)
        torch.save({"config": config.model_dump(mode="json"), "model": {}, "optimizer": {}, "samples": samples},
                   trial_dir / name / "checkpoint.pt")
        os.utime(trial_dir / name, (mtime, mtime))
    monkeypatch.setattr(tune, "get_checkpoint", lambda: tune.Checkpoint(str(trial_dir / "checkpoint_000005")))
    storage = (pyarrow.fs.LocalFileSystem(), str(trial_dir))
    chosen = first_intact(worker._checkpoints(str(tmp_path / "work"), storage), config, print)
    assert torch.load(chosen / "checkpoint.pt", weights_only=True)["samples"] == 6144


def test_an_optuna_study_names_its_objective_and_ties_each_trial_to_its_run(tmp_path):
    """optuna-dashboard shows the metric's name, and each Optuna trial leads to its
    Tune trial, its directory and the figures beside the objective (issue 30, item 2)."""
    import optuna

    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    spec = optuna_spec(num_samples=1)
    searcher = CellwiseOptuna(spec, storage)
    proposal = searcher.suggest("a")
    searcher.on_trial_result("a", {"val_exact_match": 0.4, "val_loss": 0.8, "gen_accuracy": float("nan"),
                                   "samples": 100, "training_iteration": 1, "evaluated": True})
    searcher.on_trial_complete("a", {"val_exact_match": 0.5, "val_loss": 0.6, "samples": 200, "training_iteration": 2})
    arch = TrialConfig.model_validate(proposal["trial"]).model.arch
    study = optuna.load_study(study_name=f"o/{arch}-cot-tiny-n5-s0", storage=storage)
    assert study.metric_names == ["val_exact_match"]
    (trial,) = study.trials
    assert trial.user_attrs["trial"] == proposal["name"]
    # Relative to the run directory (issue 44: an absolute path went stale once a run moved).
    assert trial.user_attrs["trial_dir"] == proposal["name"]
    # Intermediate values at the trial's training samples (issue 44: Tune's iteration, 1, 2, 3).
    assert trial.intermediate_values == {100: 0.4}
    assert trial.user_attrs["val_loss"] == 0.6 and trial.user_attrs["samples"] == 200
    assert "gen_accuracy" not in trial.user_attrs and "val_exact_match" not in trial.user_attrs  # never measured; the objective


@pytest.mark.parametrize("metric, mode, values, told", [
    # the case: every rate at exact match 0.5, validation loss decides (lowest)
    ("val_exact_match", "max", [(0.5, 2.06), (0.5, 1.55), (0.5, 1.80), (0.4, 0.10)], 1),
    # the metric is validation loss, ties decided by the highest exact match
    ("val_loss", "min", [(0.7, 0.2), (0.7, 0.9), (0.9, 1.0), (0.7, 0.5)], 1),
])
def test_each_study_names_the_reports_choice_where_the_metric_ties(tmp_path, metric, mode, values, told):
    import optuna
    import pandas as pd

    from orchestrator.report import best_by_cell

    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    spec = optuna_spec(num_samples=len(values), metric=metric, mode=mode)
    searcher = CellwiseOptuna(spec, storage)
    other = "val_loss" if metric == "val_exact_match" else "val_exact_match"
    rows = []
    for i, (value, tie) in enumerate(values):
        proposal = searcher.suggest(f"t{i}")
        while TrialConfig.model_validate(proposal["trial"]).model.arch != "transformer":
            searcher.on_trial_complete(f"t{i}", None, error=True)  # the other arch's cell: not this test's
            proposal = searcher.suggest(f"t{i}")
        searcher.on_trial_complete(f"t{i}", {metric: value, other: tie, "training_iteration": 1})
        trial = TrialConfig.model_validate(proposal["trial"])
        rows.append(dict(arch="transformer", setup="cot", size="tiny", n=5, lr=trial.train.lr, seed=0,
                         state="finished", trial=proposal["name"], **{metric: value, other: tie}))
    study = optuna.load_study(study_name="o/transformer-cot-tiny-n5-s0", storage=storage)
    chosen = best_by_cell(pd.DataFrame(rows), metric, mode, other).iloc[0]
    assert study.user_attrs["chosen_by_report"] == chosen["trials"] == rows[told]["trial"]
    assert study.user_attrs["chosen_by"] == f"{metric} ({mode}), ties by {other} ({'min' if other == 'val_loss' else 'max'})"
    assert study.best_trial.user_attrs["trial"] == rows[0]["trial"]  # Optuna's own: the earliest of equal values


def test_an_optuna_trial_is_named_by_its_rate_to_three_digits_and_more_only_where_names_would_collide(monkeypatch):
    spec = optuna_spec(num_samples=3)
    searcher = CellwiseOptuna(spec)
    study = searcher.studies[next(c for c in searcher.studies if c.arch == "transformer")]
    rates = iter([3.538453590906551e-3, 3.5412e-3, 3.5384e-3])
    monkeypatch.setattr(study, "suggest", lambda trial_id: {"lr": next(rates)})
    proposals = [searcher.suggest(f"t{i}") for i in range(6)]
    transformer = [p for p in proposals if TrialConfig.model_validate(p["trial"]).model.arch == "transformer"]
    assert [p["name"] for p in transformer] == ["transformer-cot-tiny-n5-lr3.54e-3-s0",
                                                "transformer-cot-tiny-n5-lr3.541e-3-s0",  # 3.54e-3 is taken
                                                "transformer-cot-tiny-n5-lr3.538e-3-s0"]
    assert [TrialConfig.model_validate(p["trial"]).train.lr for p in transformer] == \
        [3.538453590906551e-3, 3.5412e-3, 3.5384e-3]  # the name rounds; the rate trained does not
    assert len({p["name"] for p in proposals}) == 6


def _report_actor_name(config):
    import ray
    from ray import tune

    marker = Path(config["marker"])
    if config["x"] == 1 and not marker.exists():  # trial x1 fails once, then is retried
        marker.write_text("failed once")
        raise RuntimeError("a first failure")
    tune.report({"actor": ray.get_runtime_context().get_actor_name()})


@pytest.mark.slow
def test_each_trials_actor_is_named_after_its_trial_and_a_retry_apart(tmp_path, ray_temp):
    import ray
    from ray import tune

    from orchestrator.unpromised import trial_actors_named

    def name(trial):
        return f"trial-x{trial.config['x']}"

    ray.init(num_cpus=2, include_dashboard=False, _temp_dir=ray_temp)
    try:
        tuner = tune.Tuner(
            _report_actor_name,
            param_space={"x": tune.grid_search([1, 2]), "marker": str(tmp_path / "failed")},
            tune_config=tune.TuneConfig(trial_name_creator=name, trial_dirname_creator=name),
            run_config=tune.RunConfig(storage_path=str(tmp_path / "runs"), verbose=0,
                                      failure_config=tune.FailureConfig(max_failures=1)),
        )
        with trial_actors_named():
            results = tuner.fit()
    finally:
        ray.shutdown()
    assert sorted(r.metrics["actor"] for r in results) == ["trial-x1 (2)", "trial-x2"]
    from ray.tune.execution import tune_controller
    from ray.tune.execution.class_cache import _ActorClassCache

    assert tune_controller._ActorClassCache is _ActorClassCache  # the patch is Tune's again afterwards


def test_a_ctrl_c_swallowed_before_tunes_loop_still_stops_the_sweep():
    # CI saw a Ctrl-C sent as Ray came up leave the sweep running to its end: one raised
    # while a library swallowed it is now remembered, and checked before Tune's loop.
    import os
    import signal
    import time

    from orchestrator.stopping import EARLY_STOP, ctrl_c_remembered, stop_if_asked_early

    with ctrl_c_remembered():
        stop_if_asked_early()  # nothing asked yet
        try:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(1)  # the handler runs in the main thread before this returns
        except KeyboardInterrupt:
            pass  # as a library that catches it would
        with pytest.raises(KeyboardInterrupt):
            stop_if_asked_early()
    assert signal.getsignal(signal.SIGINT) is not EARLY_STOP.handler  # the previous handler is back


def test_a_sigterm_at_start_up_is_a_ctrl_c_even_after_ray_installs_its_own_handler(monkeypatch):
    """Issue 64: SIGTERM between Ray's start and Tune's loop met Ray's own handler,
    which ended the driver with a stack dump and SIGABRT (exit -6), its run
    directory left half made. And a Ctrl-C raised inside a finalizer is remembered,
    not printed as "Exception ignored ... KeyboardInterrupt"."""
    import gc
    import os
    import signal
    import sys
    import time

    from orchestrator.stopping import ctrl_c_remembered, sigterm_after_ray_start, stop_if_asked_early

    printed = []
    monkeypatch.setattr(sys, "unraisablehook", lambda info: printed.append(info.exc_type))

    class Finalized:
        def __init__(self, error):
            self.error = error

        def __del__(self):  # as the handler's KeyboardInterrupt does when it lands in a finalizer
            raise self.error

    with ctrl_c_remembered():
        def rays(signum, frame):  # as ray.init replaces it (Ray's dumps the stack and aborts)
            raise RuntimeError("Ray's SIGTERM handler")

        signal.signal(signal.SIGTERM, rays)
        sigterm_after_ray_start()
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(1)
        with pytest.raises(KeyboardInterrupt):  # remembered: checked before Tune's loop
            stop_if_asked_early()
        Finalized(KeyboardInterrupt())
        Finalized(ValueError("a finalizer's own failure"))
        gc.collect()
    assert printed == [ValueError]  # the Ctrl-C's not printed; anything else still is

    def mine(signum, frame):
        pass

    previous = signal.signal(signal.SIGTERM, mine)
    try:
        sigterm_after_ray_start()  # outside a launch's start: SIGTERM is left alone
        assert signal.getsignal(signal.SIGTERM) is mine
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_a_driver_started_ignoring_sigint_is_still_stopped_by_sigterm_or_sigint_after_tunes_loop():
    """Found by a suite run from a background shell job (which starts with SIGINT
    ignored, as `nohup icr-sweep launch ... &` does): after Tune's loop, while the
    report is written, SIGTERM was sent on as a SIGINT the process ignored, so
    neither stopped it. Within `sigterm_as_ctrl_c` both are a Ctrl-C; after it,
    SIGINT is ignored again, as the driver was started."""
    import signal
    import subprocess
    import sys

    from orchestrator.stopping import sigterm_as_ctrl_c

    script = """
import os, signal, time
from orchestrator.stopping import sigterm_as_ctrl_c
signal.signal(signal.SIGINT, signal.SIG_IGN)
for sig in (signal.SIGTERM, signal.SIGINT):
    try:
        with sigterm_as_ctrl_c():
            os.kill(os.getpid(), sig)
            time.sleep(5)
        print(sig.name, "not stopped")
    except KeyboardInterrupt:
        print(sig.name, "stopped")
print("after:", signal.getsignal(signal.SIGINT) == signal.SIG_IGN)
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
                          cwd=Path(__file__).resolve().parents[2])
    said = done.stdout.split("\n")[:3]
    assert said == ["SIGTERM stopped", "SIGINT stopped", "after: True"], done.stdout + done.stderr
    # A driver started as usual keeps Python's handler (set here: a Tuner.fit run
    # earlier in this process leaves Tune's handler in place, as Tune does).
    earlier = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with sigterm_as_ctrl_c():
            assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, earlier)


def test_a_run_resumed_where_it_was_moved_writes_there_and_never_where_it_was_launched(tmp_path):
    """Issue 52 (found while checking its messages): a copy of a run whose resume
    rebuilt the sweep wrote Tune's new state into the original run directory (the
    stored spec's storage), and a moved run's stop file and MLflow store went there too."""
    from orchestrator.tune import StopAtStep, _tuner_parts

    spec = SweepSpec(name="first", storage=str(tmp_path / "launched"), tracking=dict(mlflow={}))
    now = str(tmp_path / "elsewhere" / "copy")
    _, run_config = _tuner_parts(spec, {"cpu": 1, "gpu": 0}, now)
    assert (run_config.storage_path, run_config.name) == (str(tmp_path / "elsewhere"), "copy")
    stop = next(c for c in run_config.callbacks if isinstance(c, StopAtStep))
    assert str(stop.stop_file).startswith(now + "/")
    mlflow = next(c for c in run_config.callbacks if type(c).__name__ == "MLflow")
    assert mlflow.tracking_uri == f"sqlite:///{now}/mlflow.db", mlflow.tracking_uri
    _, at_launch = _tuner_parts(spec, {"cpu": 1, "gpu": 0}, spec.run_dir())
    assert (at_launch.storage_path, at_launch.name) == (str(tmp_path / "launched"), "first")


def test_a_driver_failure_is_told_by_its_cause_not_by_the_first_line_of_a_traceback():
    """Issue 52's messages: "The sweep's driver stopped: TuneError: Traceback (most
    recent call last):" named nothing."""
    from ray.tune.error import TuneError

    from orchestrator.cli.sweep import _cause

    wrapped = TuneError("Traceback (most recent call last):\n  File \"x.py\", line 1, in f\n    g()\n"
                        "KeyError: 'Record does not exist.'\n")
    assert _cause(wrapped) == "KeyError: 'Record does not exist.'"
    assert _cause(OSError(28, "No space left on device")) == "OSError: [Errno 28] No space left on device"
    assert _cause(RuntimeError()) == "RuntimeError"


def _optuna_search(storage: str, num_samples: int = 4, fuse: int = 1):
    """Tune's search of an Optuna sweep of one cell, as launch builds it."""
    from ray.tune.experiment import Experiment

    from orchestrator.planned_search import LimitedSearch

    spec = SweepSpec(name="o", axes=dict(archs=["transformer"], setups=["cot"], sizes=["tiny"], n=[5], seeds=[0, 1]),
                     lr=dict(transformer=dict(distribution="loguniform", low=1e-4, high=1e-2)),
                     search=dict(method="optuna", num_samples=num_samples),
                     training=dict(samples=100, warmup_samples=10, eval_every=100))
    search = LimitedSearch(CellwiseOptuna(spec, storage, fuse))
    search.set_search_properties("val_exact_match", "max", {})
    search.add_configurations([Experiment("o", lambda c: None, config={}, num_samples=spec.trial_count())])
    return search


def _tunes_state(folder: Path, trials, session: str) -> None:
    """Tune's experiment state holding `trials` (Tune's Trial objects), as saved."""
    import json

    data = [[json.dumps({"relative_logdir": t.config["name"], "status": "PENDING", "trial_id": t.trial_id,
                         "config": t.config}), "{}"] for t in trials]
    (folder / f"experiment_state-{session}.json").write_text(json.dumps({"trial_data": data}))


@pytest.mark.parametrize("newer", ["searcher", "tune"])
def test_an_optuna_sweep_restored_from_states_of_two_saves_trains_each_suggestion_once(tmp_path, newer):
    """Issue 83, class 1: Tune writes its experiment state, then the searcher's and its
    search's counter, and a resume may find them from different saves (a driver
    killed between two, a sync that carried one). Whichever is newer, every trial the
    studies asked is trained once, as itself, the budget is spent exactly, and no
    rate is asked twice: a trial Tune's state lacked was never run again and the
    sweep ended short (searcher newer), or ran twice, and the next ask drew its rate
    again (Tune newer)."""
    import optuna

    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    before = _optuna_search(storage)
    first = [before.next_trial()]
    if newer == "searcher":  # Tune's state saved with the first trial, the searcher's after the second was asked
        _tunes_state(tmp_path, first, "2026-12-03_00-00-00")
        first.append(before.next_trial())
        before.save_to_dir(str(tmp_path), session_str="2026-12-03_00-00-01")
        restored = first[:1]
    else:  # the searcher's saved with the first trial, Tune's after the second was asked
        before.save_to_dir(str(tmp_path), session_str="2026-12-03_00-00-00")
        first.append(before.next_trial())
        _tunes_state(tmp_path, first, "2026-12-03_00-00-01")
        restored = first
    after = _optuna_search(storage)
    after.restore_from_dir(str(tmp_path))
    trained = [t.config["name"] for t in restored]  # Tune runs what its state holds, the rest the searcher hands out
    for t in restored:
        after.on_trial_complete(t.trial_id, {"val_exact_match": 0.5, "training_iteration": 1})
    while (trial := after.next_trial()) is not None:
        trained.append(trial.config["name"])
        after.on_trial_complete(trial.trial_id, {"val_exact_match": 0.5, "training_iteration": 1})
    assert after.is_finished()
    assert sorted(trained) == sorted(set(trained)) and len(trained) == 8, trained  # two cells of 4
    assert {t.config["name"] for t in first} <= set(trained)
    for seed in (0, 1):
        study = optuna.load_study(study_name=f"o/transformer-cot-tiny-n5-s{seed}", storage=storage)
        assert [t.state for t in study.trials] == [optuna.trial.TrialState.COMPLETE] * 4, seed
        rates = [t.params["lr"] for t in study.trials]
        assert len(set(rates)) == 4, rates  # no rate asked twice
        assert sorted(t.user_attrs["trial"] for t in study.trials) == sorted(n for n in trained if n.endswith(f"-s{seed}"))


def test_an_optuna_sweep_asks_the_rates_of_one_uninterrupted_run_whatever_its_restores(tmp_path):
    """The sampler goes on from the study's latest ask (kept in the study), so a sweep
    restored from an older state asks the rates an uninterrupted one asks: every
    launch of a spec draws the same rates, as it did."""
    import optuna

    def rates(storage):
        study = optuna.load_study(study_name="o/transformer-cot-tiny-n5-s0", storage=storage)
        return [t.params["lr"] for t in study.trials]

    straight = _optuna_search(f"sqlite:///{tmp_path / 'a.db'}")
    for _ in range(8):
        straight.next_trial()
    storage = f"sqlite:///{tmp_path / 'b.db'}"
    before = _optuna_search(storage)
    (tmp_path / "b").mkdir()
    before.save_to_dir(str(tmp_path / "b"), session_str="2026-12-03_00-00-00")
    _tunes_state(tmp_path / "b", [], "2026-12-03_00-00-00")
    asked = [before.next_trial() for _ in range(3)]  # asked after both were saved, then the kill
    after = _optuna_search(storage)
    after.restore_from_dir(str(tmp_path / "b"))
    while after.next_trial() is not None:
        pass
    assert rates(storage) == rates(f"sqlite:///{tmp_path / 'a.db'}") and len(asked) == 3
