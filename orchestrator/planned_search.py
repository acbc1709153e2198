"""Hands Ray Tune a grid's planned trials one at a time, as it asks for them.

Tune's own grid (`tune.grid_search` over the plan's configs) resolves every
variant before the first trial starts and deep-copies the whole grid for each:
its cost grows with the square of the trials (1,280 tiny trials: 48 s before the
first started; 10,000: most of an hour, Ctrl-C unheard meanwhile; issue 52, class
11). A searcher is asked for one trial at a time, only when Tune is about to start
it, so a launch's cost before its first trial is the plan's alone (linear), and
each step of Tune's loop, where Ctrl-C is heard, stays short.
"""

import os
import pickle
from contextlib import contextmanager

import ray
from ray.tune.search import ConcurrencyLimiter, SearchGenerator, Searcher

from orchestrator.rundir import tune_trial_dirs, tune_trial_ids
from orchestrator.unpromised import trials_made

PENDING_ENV = "TUNE_MAX_PENDING_TRIALS_PG"


class PlannedTrials(Searcher):
    """The Tune configs `points` ({key: point}, in the order given), each once.
    `names` are their Tune directories (a trial's name, an array's). On restore,
    every point whose directory Tune's restored experiment state holds is passed
    over, whatever this searcher's own saved position: the two files are written
    one after the other, and a driver killed between them must neither lose a
    trial nor run one twice."""

    def __init__(self, key: str, points: list[dict], names: list[str]):
        super().__init__()
        self.key, self.points, self.names = key, points, names
        self.handed: set[str] = set()
        self.next = 0  # every point before it is handed out

    def suggest(self, trial_id: str):
        while self.next < len(self.points) and self.names[self.next] in self.handed:
            self.next += 1
        if self.next == len(self.points):
            return Searcher.FINISHED
        self.handed.add(self.names[self.next])
        return {self.key: self.points[self.next]}

    def on_trial_complete(self, trial_id: str, result=None, error: bool = False) -> None:
        pass  # a grid: nothing to learn

    def save(self, checkpoint_path: str) -> None:
        with open(checkpoint_path, "wb") as f:
            pickle.dump({"handed": self.handed}, f)

    def restore(self, checkpoint_path: str) -> None:
        with open(checkpoint_path, "rb") as f:
            self.handed, self.next = set(pickle.load(f)["handed"]), 0

    def restore_from_dir(self, checkpoint_dir: str) -> None:
        """What was handed out is what Tune's experiment state, restored beside
        this, holds: those Tune restores itself; every other point is handed out."""
        self.handed, self.next = tune_trial_dirs(checkpoint_dir), 0


class LimitedSearch(SearchGenerator):
    """Tune's search algorithm over `searcher`, limited to `max_concurrent` trials
    running at once where given: what Tune makes of a bare Searcher and
    max_concurrent_trials, but for its restore. The limiter's live trials are
    restored from a file Tune writes after its experiment state; a driver killed, or
    a store fallen silent, between the two writes (or uploads) leaves them out of
    step, and a live trial that Tune's state lacks (made after it was saved) or holds
    as ended (ended after the searcher's file was written) is never run again, so
    never completes, and held its place for good: a resume waited forever."""

    def __init__(self, searcher: Searcher, max_concurrent: int | None = None):
        super().__init__(ConcurrencyLimiter(searcher, max_concurrent) if max_concurrent else searcher)

    def restore_from_dir(self, dirpath: str) -> None:
        super().restore_from_dir(dirpath)
        if isinstance(self.searcher, ConcurrencyLimiter):
            limiter = self.searcher
            limiter.live_trials &= tune_trial_ids(dirpath, ended=False)
            limiter.num_unfinished_live_trials = len(limiter.live_trials)
        # Its count of trials made, which ends the search at num_samples, as Tune's
        # restored state holds them: the count saved beside it may be of a later save
        # (a resume ended short: a trial never asked, issue 83, class 1). The searcher
        # says when its budgets are spent.
        trials_made(self, len(tune_trial_ids(dirpath)))


class PlannedGrid(LimitedSearch):
    """LimitedSearch over PlannedTrials. Its count of trials made, which ends the
    search at the plan's length, is restored as the trials Tune's restored state
    holds, not as saved beside it."""

    def __init__(self, key: str, points: list[dict], names: list[str], max_concurrent: int | None = None):
        self.planned = PlannedTrials(key, points, names)
        super().__init__(self.planned, max_concurrent)

    def restore_from_dir(self, dirpath: str) -> None:
        super().restore_from_dir(dirpath)
        trials_made(self, len(self.planned.handed & set(self.planned.names)))  # the searcher says when all are made


def pending_trials() -> int:
    """How many trials Tune keeps created but not yet started: what Tune gives its
    own grid (at least 200, for an autoscaling cluster to see the demand; more on a
    cluster with more CPUs). Tune gives a searcher 1, which would start a big
    machine's trials one loop step at a time."""
    return max(200, int(ray.cluster_resources().get("CPU", 1.0) * 1.1))


@contextmanager
def pending_for_grid(grid: bool):
    """Tune's pending-trial allowance for a grid's run (`pending_trials`), unless
    the user set TUNE_MAX_PENDING_TRIALS_PG; an Optuna sweep keeps Tune's 1 (or
    max_concurrent): a suggestion asked before results are in is a worse one."""
    if not grid or PENDING_ENV in os.environ:
        yield
        return
    os.environ[PENDING_ENV] = str(pending_trials())
    try:
        yield
    finally:
        os.environ.pop(PENDING_ENV, None)
