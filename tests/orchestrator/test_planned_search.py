"""A grid's trials handed to Tune one at a time (orchestrator/planned_search.py):
each once, in the plan's order, none lost or repeated across a restore."""

import json
import os

import pytest
from ray.tune.experiment import Experiment

from orchestrator import planned_search
from orchestrator.planned_search import PENDING_ENV, LimitedSearch, PlannedGrid, pending_for_grid


def _generator(names, max_concurrent=None):
    points = [{"trial": name, "weights": [i] * 3} for i, name in enumerate(names)]
    search = PlannedGrid("trial", points, list(names), max_concurrent)
    search.add_configurations([Experiment("grid", lambda c: None, config={}, num_samples=len(names))])
    return search


def _created(search) -> list[str]:
    out = []
    while (trial := search.next_trial()) is not None:
        out.append(trial.config["trial"]["trial"])
    return out


def test_a_grid_is_handed_to_tune_one_trial_at_a_time_each_once_in_order():
    search = _generator(["c", "a", "b"])
    first = search.next_trial()
    # Only the trial asked for exists, holding its own config and no other's.
    assert first.config == {"trial": {"trial": "c", "weights": [0, 0, 0]}}
    assert _created(search) == ["a", "b"]
    assert search.is_finished()


def test_a_grid_with_max_concurrent_holds_back_trials_until_one_completes():
    search = _generator(["a", "b", "c"], max_concurrent=2)
    first, second = search.next_trial(), search.next_trial()
    assert second.config["trial"]["trial"] == "b"
    assert search.next_trial() is None and not search.is_finished()
    search.on_trial_complete(first.trial_id, result={})
    assert search.next_trial().config["trial"]["trial"] == "c"


def _experiment_state(folder, names, ids=None, statuses=None):
    trial_data = [[json.dumps({"relative_logdir": name, "status": status, "trial_id": trial_id}), "{}"]
                  for name, trial_id, status in zip(names, ids or [f"id-{name}" for name in names],
                                                    statuses or ["TERMINATED"] * len(names))]
    (folder / "experiment_state-2026-11-27_00-00-00.json").write_text(json.dumps({"trial_data": trial_data}))


@pytest.mark.parametrize("saved", [["a", "b", "c"], ["a"], []])
def test_a_restored_grid_hands_out_exactly_the_trials_tunes_state_lacks(tmp_path, saved):
    """Whatever the searcher's own file says (written after Tune's state: a driver
    killed between the two leaves it older or newer), what Tune restored is not
    handed out again and everything else is."""
    names = ["a", "b", "c", "d", "e"]
    before = _generator(names)
    for _ in saved:
        before.next_trial()
    before.save_to_dir(str(tmp_path), session_str="s")
    _experiment_state(tmp_path, ["a", "c"])

    after = _generator(names)
    after.restore_from_dir(str(tmp_path))
    assert _created(after) == ["b", "d", "e"]


@pytest.mark.parametrize("tune_kept_it", [None, "RUNNING", "ERROR", "TERMINATED"],
                         ids=["tune-state-lacks-it", "running", "failed", "ended-after-the-searchers-file"])
def test_a_restored_grid_with_max_concurrent_is_held_only_by_a_trial_tune_runs_again(tmp_path, tune_kept_it):
    """A CI run's resume after an S3 store fell silent waited for good: Tune's
    ConcurrencyLimiter restored as live a trial made after Tune last saved its state,
    which therefore never completed and held the one place of max_concurrent 1. So
    does one Tune's state holds as ended (TERMINATED) where the searcher's file is the
    older: written after Tune's state, it is the one a kill or a silent store between
    the two leaves behind; Tune never runs that trial again. A trial Tune resumes
    (running, or failed: resume retries it) keeps its place until it completes."""
    names = ["s0", "s1", "s2"]
    before = _generator(names, max_concurrent=1)
    first = before.next_trial()
    before.on_trial_complete(first.trial_id, result={})
    live = before.next_trial()  # s1, running when the searcher's file was written
    before.save_to_dir(str(tmp_path), session_str="s")
    kept = [("s0", first.trial_id, "TERMINATED")] + ([("s1", live.trial_id, tune_kept_it)] if tune_kept_it else [])
    _experiment_state(tmp_path, *map(list, zip(*kept)))

    after = _generator(names, max_concurrent=1)
    after.restore_from_dir(str(tmp_path))
    if tune_kept_it in ("RUNNING", "ERROR"):
        assert after.next_trial() is None  # s1 is Tune's to resume, and holds the place
        after.on_trial_complete(live.trial_id, result={})
        assert after.next_trial().config["trial"]["trial"] == "s2"
    elif tune_kept_it == "TERMINATED":
        assert after.next_trial().config["trial"]["trial"] == "s2"  # s1 is done: its place is free
    else:
        assert after.next_trial().config["trial"]["trial"] == "s1"  # made again, not lost


def test_a_grid_gets_tunes_own_pending_allowance_and_optuna_and_a_users_setting_keep_theirs(monkeypatch):
    monkeypatch.delenv(PENDING_ENV, raising=False)
    monkeypatch.setattr(planned_search, "pending_trials", lambda: 217)
    with pending_for_grid(grid=True):
        assert os.environ[PENDING_ENV] == "217"
    assert PENDING_ENV not in os.environ
    with pending_for_grid(grid=False):
        assert PENDING_ENV not in os.environ
    monkeypatch.setenv(PENDING_ENV, "8")
    with pending_for_grid(grid=True):
        assert os.environ[PENDING_ENV] == "8"
    assert os.environ[PENDING_ENV] == "8"


@pytest.mark.parametrize("status", ["RUNNING", "TERMINATED"])
def test_an_optuna_sweeps_limiter_is_restored_as_a_grids_is(tmp_path, status):
    """An Optuna sweep with max_concurrent had Tune's own wrapping, restored as saved:
    a trial ended after the searcher's file was written held the one place for good.
    Its search is a LimitedSearch like the grid's, the place freed alike."""
    from orchestrator.optuna_search import CellwiseOptuna
    from tests.orchestrator.test_tune import optuna_spec

    def search():
        limited = LimitedSearch(CellwiseOptuna(optuna_spec(num_samples=3), f"sqlite:///{tmp_path / 'optuna.db'}"), 1)
        limited.set_search_properties("val_exact_match", "max", {})
        limited.add_configurations([Experiment("o", lambda c: None, config={}, num_samples=6)])
        return limited

    before = search()
    first = before.next_trial()
    assert before.next_trial() is None  # max_concurrent 1: the second waits for the first
    before.save_to_dir(str(tmp_path), session_str="s")
    _experiment_state(tmp_path, [first.config["name"]], ids=[first.trial_id], statuses=[status])

    after = search()
    after.restore_from_dir(str(tmp_path))
    assert (after.next_trial() is None) == (status == "RUNNING")
