"""Runs a sweep spec on Ray Tune: one trial per resolved config, checkpointed at
every evaluation, retried from its checkpoint when it crashes, resumable as a whole.
The driver's side: the Ray it runs on (cluster.py), the code of a trial inside its
worker (worker.py), how it stops (stopping.py) and its Optuna search
(optuna_search.py) are modules of their own."""

import contextlib
import io
import os
import re
import signal
import sys
import threading
import time
from pathlib import Path

from ray import tune

from orchestrator.arrays import ARRAY_KEY, array_of, arrays, members_per_array
from orchestrator.cluster import ClusterError
from orchestrator.grid import (cell_budget, cells, plan, planned_costs, planned_trials, planned_work, sample_cost,
                              shape_trials)
from orchestrator.optuna_search import RESUMING, CellwiseOptuna, optuna_storage
from orchestrator.packing import gpu_share
from orchestrator.progress import SweepProgress
from orchestrator.planned_search import LimitedSearch, PlannedGrid, pending_for_grid
from orchestrator.rundir import (PARAMS_FILE, RESULTS_FILE, STOP_FILE, TUNER_FILE, RecordError, load_trials, read_plan,
                                  read_results, remove_half_written, set_aside_plan,
                                  restore_rows, set_aside_for_rebuild, set_aside_results, tune_statuses,
                                  write_plan, write_spec_record)
from orchestrator.secrets import command
from orchestrator.spec import SweepSpec
from orchestrator.stopping import EARLY_STOP, STOP_WAIT_S, sigterm_as_ctrl_c, stop_if_asked_early
from orchestrator.storage import answer_timeout, bounded_filesystem, is_remote, local_view, silent_for
from orchestrator.trackers import callbacks as tracker_callbacks
from orchestrator.unpromised import (callbacks_counted_by_name, experiment_state_written_whole, run_directory_written_whole,
                                     trial_actors_named)
from orchestrator.worker import trainable_fn
from workloads.config import TrialConfig
from workloads.metrics import METRICS, PLOTTED


class StopAtStep(tune.Callback):
    """Ctrl-C (or SIGTERM, forwarded as Ctrl-C) asks the running trials to checkpoint
    the step they are at before Tune stops them: Tune's own handler is called once
    every running trial has reported that checkpoint, after STOP_WAIT_S, or at a
    second Ctrl-C. Tune installs its handler before it sets its callbacks up."""

    def __init__(self, run_dir: str):
        self.stop_file = None if is_remote(run_dir) else Path(run_dir, STOP_FILE)
        self.asked_at, self.reported, self.tune_handler = None, set(), None

    def __getstate__(self):  # pickled with the run config: the signal handlers stay behind
        return {"stop_file": self.stop_file, "asked_at": None, "reported": set(), "tune_handler": None}

    def setup(self, **info):
        if self.stop_file is None:
            return
        self.stop_file.unlink(missing_ok=True)  # a stale request of a driver that was killed
        handler = signal.getsignal(signal.SIGINT)
        if callable(handler) and threading.current_thread() is threading.main_thread():
            self.tune_handler = handler
            signal.signal(signal.SIGINT, self.asked)
            if EARLY_STOP.requested:  # asked before Tune's loop and swallowed on the way: stop before any trial
                self.stop_now()

    def asked(self, signum, frame):
        if self.asked_at is not None:
            return self.stop_now(signum, frame)
        self.asked_at = time.monotonic()
        self.stop_file.write_bytes(b"")
        print("Stopping: each running trial first checkpoints the step it is at (Ctrl-C again to stop at once).",
              file=sys.stderr, flush=True)

    def stop_now(self, signum=signal.SIGINT, frame=None):
        signal.signal(signal.SIGINT, self.tune_handler)
        self.stop_file.unlink(missing_ok=True)
        self.tune_handler(signum, frame)

    def on_trial_result(self, iteration, trials, trial, result, **info):
        if self.asked_at is not None and result.get("checkpoint_reason") == "stop":
            self.reported.add(trial.trial_id)

    def on_step_begin(self, iteration, trials, **info):
        if self.asked_at is None or self.tune_handler is None:
            return
        running = {t.trial_id for t in trials if t.status == "RUNNING"}
        if running <= self.reported or time.monotonic() - self.asked_at > STOP_WAIT_S:
            self.asked_at = None
            self.stop_now()


class StorageWatch(tune.Callback):
    """Remote storage that stops answering mid-sweep (a store paused, a network
    gone) stops the sweep, said once, with what to do: every trial's checkpoint and
    Tune's state go there, and Tune otherwise retried them for good (issue 52, class
    5). One bounded request every PROBE_EVERY_S, in a thread of its own; a request
    unanswered after the wait (ICR_STORAGE_TIMEOUT_S), or failed, is a silent store."""

    PROBE_EVERY_S = 10.0

    def __init__(self, run_dir: str):
        self.run_dir = run_dir
        self.__setstate__({})

    def __getstate__(self):  # pickled with the run config: its thread and the handler stay behind
        return {"run_dir": self.run_dir}

    def __setstate__(self, state):
        self.__dict__.update(state, probe=None, started=0.0, outcome=[], stopped=False, tune_handler=None)

    def setup(self, **info):
        handler = signal.getsignal(signal.SIGINT)  # Tune's (remote runs: StopAtStep leaves it in place)
        self.tune_handler = handler if callable(handler) else None

    def on_step_begin(self, iteration, trials, **info):
        if self.stopped or self.tune_handler is None:
            return
        now = time.monotonic()
        if self.probe is not None and self.probe.is_alive():
            if now - self.started > answer_timeout():
                self.stop(f"no answer within {answer_timeout():g} s")
            return
        if self.outcome and self.outcome[0]:
            return self.stop(self.outcome[0])
        if self.probe is None or now - self.started >= self.PROBE_EVERY_S:
            self.outcome, self.started = [], now
            self.probe = threading.Thread(target=lambda out=self.outcome: out.append(silent_for(self.run_dir)),
                                          daemon=True)
            self.probe.start()

    def stop(self, why: str) -> None:
        self.stopped = True
        print(f"The storage of {self.run_dir} stopped answering ({why}): the sweep stops, since no checkpoint can be "
              f"stored. Once it answers again:\n  {command('icr-sweep', 'resume', self.run_dir)}", file=sys.stderr, flush=True)
        self.tune_handler(signal.SIGINT, None)


def _fit(tuner, grid: bool) -> None:
    stop_if_asked_early()
    with (sigterm_as_ctrl_c(), trial_actors_named(), callbacks_counted_by_name(), experiment_state_written_whole(),
          run_directory_written_whole(), pending_for_grid(grid)):
        tuner.fit()


@contextlib.contextmanager
def owner_only(run_dir: str):
    """Within it, the files made are readable by their owner alone, and afterwards
    the run directory's tuner.pkl (local runs): Tune pickles the run's config into
    it, the trackers' callbacks with their URIs (an MLflow password) among it
    (issue 83, class 6). copy_whole keeps Tune's other pickles likewise."""
    earlier = os.umask(0o077)
    try:
        yield
    finally:
        os.umask(earlier)
        if not is_remote(run_dir):
            with contextlib.suppress(OSError):
                os.chmod(Path(run_dir.removeprefix("file://"), TUNER_FILE), 0o600)


def _cost(config: dict) -> float:
    """A rough relative cost of a Tune config (a trial's or an array's), to start
    the longest first: a sweep whose longest trial starts last ends with one trial
    running alone."""
    trial, _ = _first_trial(config)
    return trial.train.samples * sample_cost(trial)


def _first_trial(config: dict) -> tuple[TrialConfig, int]:
    """A Tune config's trial, or its array's first member, and how many trials it runs."""
    array = array_of(config)
    if array is None:
        return TrialConfig.model_validate(config["trial"]), 1
    return TrialConfig.model_validate(array["members"][0]), len(array["members"])


def _trial_name(trial) -> str:
    name = _config_name(trial.config)
    # An Optuna trial of an earlier version: its directory is named with Tune's id.
    return name if trial.config.get("grid", True) or trial.config.get("name") else f"{name}-{trial.trial_id}"


def _config_name(config: dict) -> str:
    """The directory of a Tune config: an Optuna trial's name (CellwiseOptuna's),
    an array's, or a trial's."""
    if config.get("name"):
        return config["name"]
    array = array_of(config)
    return array["name"] if array else TrialConfig.model_validate(config["trial"]).name


def _per_trial(spec: SweepSpec, resources: dict):
    """The resources argument of tune.with_resources: the dict itself, or, for
    gpus_per_trial: auto, each trial's share by its estimated peak memory."""
    if resources["gpu"] != "auto":
        return resources
    def per_trial(config: dict):
        share, _ = gpu_share(spec.resources, *_first_trial(config))
        return tune.PlacementGroupFactory([{"CPU": resources["cpu"], "GPU": share}])

    return per_trial


class _Progress(tune.CLIReporter):
    """Tune's progress table (`--verbose`), its `Result logdir` line (Ray's temporary copy of the
    run, which vanishes with the session) naming the run directory instead, where
    status, report and every tracker find the run."""

    def report(self, trials, done: bool, *sys_info: str) -> None:
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            super().report(trials, done, *sys_info)
        runs = sorted({_where(t.storage) for t in trials})
        text = re.sub(r"^Result logdir: .*\n", "".join(f"Run directory: {run}\n" for run in runs), printed.getvalue(),
                      count=1, flags=re.M)
        text = re.sub(r"^Result logdir: .*\n", "", text, flags=re.M)
        print(text, end="", flush=True)


def _where(storage) -> str:
    """The run directory a trial's storage context names: a local path, else a URI."""
    kind = storage.storage_filesystem.type_name
    return storage.experiment_fs_path if kind == "local" else f"{kind}://{storage.experiment_fs_path}"


def _tuner_parts(spec: SweepSpec, resources: dict, run_dir: str):
    """Tune's trainable and run config for the sweep in `run_dir`: where the spec
    says at launch; where the run is now on resume (moved, copied or renamed since:
    Tune's experiment, the stop file and MLflow's default store go there, never
    back to where it was launched)."""
    trainable = tune.with_resources(trainable_fn, _per_trial(spec, resources))
    # A checkpoint between evaluations (time or stop) is reported with its progress
    # row, which holds no evaluation metric; Tune's check would end the sweep at the
    # first one. The searchers here read only evaluated rows (CellwiseOptuna), and no
    # scheduler is used, so the check is switched off (Tune's documented switch).
    os.environ["TUNE_DISABLE_STRICT_METRIC_CHECKING"] = "1"
    # Every checkpoint forces a snapshot of Tune's experiment state (num_to_keep), so
    # that a driver killed at any moment loses no reported row: by design, not the
    # bottleneck Tune warns of with short trials. Tune's documented switch: 0.
    os.environ.setdefault("TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S", "0")
    # Tune's newer console output prints every config key (here: the whole nested
    # trial config) as a column; the classic reporter lets us pick the metrics.
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
    table = _Progress(
        metric_columns={"samples": "samples", "train_loss": "train_loss",
                        **{name: METRICS[name].label for name in PLOTTED}, "samples_per_s": "samples/s"},
        parameter_columns={"trial/train/lr": "lr"}, max_report_frequency=30,
    )
    reporter = SweepProgress(*planned_work(spec), table=table, costs=planned_costs(spec))
    storage_path, name = run_dir.rstrip("/").rsplit("/", 1)
    remote = {}
    if is_remote(run_dir):  # every request bounded, and a store that falls silent stops the sweep
        fs, storage_path = bounded_filesystem(storage_path)
        remote = dict(storage_filesystem=fs, sync_config=tune.SyncConfig(sync_timeout=3 * answer_timeout()))
    run_config = tune.RunConfig(
        progress_reporter=reporter,
        name=name,
        storage_path=storage_path,
        failure_config=tune.FailureConfig(max_failures=spec.resources.max_failures),
        checkpoint_config=tune.CheckpointConfig(num_to_keep=2),
        callbacks=[StopAtStep(run_dir), *([StorageWatch(run_dir)] if remote else []),
                   *tracker_callbacks(spec, run_dir)],
        verbose=1,
        **remote,
    )
    return trainable, run_config


def launch(spec: SweepSpec, resources: dict) -> str:
    """Runs every trial of `spec`; returns the run directory. Ray must be initialised.
    A grid's trials are built once, stored in plan.json, and handed to Tune from there.
    What the console shows of it: orchestrator.progress.console."""
    run_dir = spec.run_dir()
    write_spec_record(run_dir, spec.model_dump(mode="json"), resources)
    stored = plan(spec)
    write_plan(run_dir, **stored)
    trainable, run_config = _tuner_parts(spec, resources, run_dir)
    if spec.search.method == "grid":
        tuner = _grid_tuner(spec, run_dir, list(stored["trials"].values()), trainable, run_config, _fuse(spec, resources))
    else:
        tune_config = tune.TuneConfig(
            search_alg=LimitedSearch(CellwiseOptuna(spec, optuna_storage(spec, run_dir), _fuse(spec, resources)),
                                     spec.resources.max_concurrent),
            num_samples=sum(cell_budget(spec, cell) for cell in cells(spec)),
            trial_name_creator=_trial_name, trial_dirname_creator=_trial_name,
        )
        with owner_only(run_dir):
            tuner = tune.Tuner(trainable, param_space={}, tune_config=tune_config, run_config=run_config)
    _fit(tuner, spec.search.method == "grid")
    return run_dir


def _fuse(spec: SweepSpec, resources: dict) -> int:
    """The most members an array of this sweep holds (resources.fuse, `auto` resolved
    by its trials' shapes: a grid's trials, an Optuna spec's cells)."""
    return members_per_array(spec.resources, bool(resources["gpu"]), shape_trials(spec))


def _grid_tuner(spec: SweepSpec, run_dir: str, trials: list[dict], trainable, run_config, fuse: int):
    """Tune's experiment over `trials` (stored trial configs), those equal but for
    rate and seed in arrays of at most `fuse` (orchestrator/arrays.py), longest
    first: a sweep whose longest trial starts last ends with one trial running
    alone. Launch and rebuild alike."""
    key, points = ("trial", trials) if fuse <= 1 else (ARRAY_KEY, arrays(trials, fuse))
    ordered = sorted(points, key=lambda point: _cost({key: point}), reverse=True)
    names = [_config_name({key: point}) for point in ordered]
    tune_config = tune.TuneConfig(search_alg=PlannedGrid(key, ordered, names, spec.resources.max_concurrent),
                                  num_samples=max(1, len(ordered)),
                                  trial_name_creator=_trial_name, trial_dirname_creator=_trial_name)
    with owner_only(run_dir):
        return tune.Tuner(trainable, param_space={}, tune_config=tune_config, run_config=run_config)


def resume(run_dir: str, spec: SweepSpec, resources: dict, say=print) -> str:
    """Continues an interrupted sweep: finished trials stay, interrupted ones continue
    from their last intact checkpoint, errored ones are retried from theirs. Where
    Tune's own state cannot be read (a full disk cut it short), the sweep is rebuilt
    from the spec and the trial directories instead (`rebuild`)."""
    trainable, run_config = _tuner_parts(spec, resources, run_dir)
    RESUMING["run_dir"] = run_dir
    try:
        stored = read_plan(run_dir)
    except RecordError as e:
        stored = None
        say(f"{e}: {set_aside_plan(run_dir)}; the plan is made anew from the stored spec")
    if stored is None:  # damaged, or a run launched before plans were stored: status and report read it
        write_plan(run_dir, **plan(spec))
    remove_half_written(run_dir)  # a killed driver's half copies: never read, and named like the tool's own files
    for name, what in restore_rows(run_dir).items():
        say(f"{name}: {what}")
    problem, lacked = _tune_state(run_dir)
    if lacked and spec.search.method == "optuna":  # CellwiseOptuna.adopt takes them back
        if not is_remote(run_dir):  # Tune starts their result.json afresh: the rows so far become earlier rows
            set_aside_results(run_dir, [name for name in lacked if not any(
                row.get("final_eval") for row in read_results(Path(run_dir) / name)[-1:])])
        problem = ""
        say(f"Tune's state lacks {len(lacked)} trial(s) started after it was last saved ({', '.join(lacked[:3])}): "
            "they continue as the trials their Optuna studies hold")
    tuner = None
    if not problem:
        try:
            fs = run_config.storage_filesystem  # a remote run's, bounded: then the path is without its scheme
            where = f"{run_config.storage_path}/{run_config.name}" if fs else run_dir
            with owner_only(run_dir):
                tuner = tune.Tuner.restore(where, trainable=trainable, resume_unfinished=True, resume_errored=True,
                                           storage_filesystem=fs)
        except Exception as e:  # a damaged tuner.pkl or state fails in many ways
            problem = f"Tune cannot restore it ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})"
    if problem:
        tuner = rebuild(run_dir, spec, trainable, run_config, problem, resources, say)
    _fit(tuner, spec.search.method == "grid")
    return run_dir


def tune_state_problem(run_dir: str) -> str:
    """Why Tune's record of the run cannot be trusted ('' when it can): its newest
    experiment state unreadable, missing a trial whose directory holds results, or
    recording finished a trial whose final row is gone and could not be restored
    (its directory deleted, its result.json a directory): Tune would never run such
    a trial again, and every resume would leave it interrupted (issue 52, class 6)."""
    return _tune_state(run_dir)[0]


def _tune_state(run_dir: str) -> tuple[str, list[str]]:
    """`tune_state_problem`, and where its one problem is trials the state lacks
    that have results (a readable state saved before they started: the driver
    killed in between), those trials; else none."""
    with local_view(run_dir) as local:
        statuses, problem = tune_statuses(local)
        if problem:
            return problem, []
        started = {p.parent.name for p in Path(local).glob(f"*/{RESULTS_FILE}")}
        missing = sorted(started - set(statuses))
        lost = sorted(name for name, status in statuses.items() if status == "TERMINATED"
                      and not any(row.get("final_eval") for row in read_results(Path(local) / name)[-1:]))
    if missing and not statuses:  # deleted, or a driver killed before Tune first saved it
        return (f"Tune's experiment state is missing, and {len(missing)} trial(s) have results "
                f"({', '.join(missing[:3])})"), []
    if missing:
        return (f"Tune's experiment state lacks {len(missing)} trial(s) that have results ({', '.join(missing[:3])})",
                [] if lost else missing)
    if lost:
        return (f"Tune recorded {len(lost)} trial(s) finished whose final results are gone and cannot be restored "
                f"from a checkpoint ({', '.join(lost[:3])}): Tune would not run them again"), []
    return "", []


def rebuild(run_dir: str, spec: SweepSpec, trainable, run_config, problem: str, resources: dict, say=print):
    """A new Tune experiment in the same run directory over the spec's trials that
    have not finished, by our own record: the spec stored at launch, and each
    trial's directory (its result.json says whether it finished; its checkpoints,
    which the trainable looks for there, where it continues), over the trials the
    stored plan holds (the spec's, for a run launched before plans were stored).
    Grid specs only: an
    Optuna study's trials are not known by name in advance."""
    if spec.search.method != "grid":
        raise ClusterError(f"{run_dir}: {problem}; an Optuna sweep cannot be rebuilt without it. Its finished trials "
                           "stay readable (status, report); launch the spec into a new directory for the rest")
    stored = read_plan(run_dir)
    planned = stored["trials"] if stored else planned_trials(spec)  # the trials the launch handed to Tune
    with local_view(run_dir) as local:
        trials = load_trials(local, planned, locked=False)
        finished = set(trials.loc[trials["state"] == "finished", "trial"]) if len(trials) else set()
    left = [config for name, config in planned.items() if name not in finished]
    kept = int(trials.loc[trials["trial"].isin(finished), "samples"].fillna(0).sum()) if finished else 0
    run_config.progress_reporter.kept = (len(finished), kept)  # the finished trials, not handed to Tune again
    if not is_remote(run_dir):
        set_aside_for_rebuild(run_dir, [name for name in planned if name not in finished])
    say(f"Tune's state of {run_dir} cannot be used ({problem}); the sweep is rebuilt from the spec and the trial "
        f"directories: {len(finished)} finished trial(s) kept, {len(left)} to run, each from its newest intact checkpoint")
    return _grid_tuner(spec, run_dir, left, trainable, run_config, _fuse(spec, resources))


def can_resume(run_dir: str) -> bool:
    return tune.Tuner.can_restore(run_dir)


def holds_sweep(run_dir: str) -> bool:
    """Whether trials were already started in `run_dir` (local or remote)."""
    if is_remote(run_dir):
        return can_resume(run_dir)
    return any(Path(run_dir).glob(f"*/{PARAMS_FILE}"))
