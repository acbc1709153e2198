"""Runs a sweep spec on Ray Tune: one trial per resolved config, checkpointed at
every evaluation, retried from its checkpoint when it crashes, resumable as a whole."""

import contextlib
import math
import os
import pickle
import signal
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Optional

import pyarrow.fs
import ray
from optuna.distributions import FloatDistribution
from ray import tune
from ray.tune.search import Searcher
from ray.tune.search.optuna import OptunaSearch

from orchestrator.grid import cell_budget, cell_name, cell_rates, cells, expand, plan, planned_trials, trial_for
from orchestrator.packing import gpu_share, gpu_shares
from orchestrator.rundir import (MLFLOW_FILE, OPTUNA_FILE, PARAMS_FILE, RESULTS_FILE, STOP_FILE, load_trials, read_plan,
                                  restore_rows, rows_unstored, set_aside_for_rebuild, stored_rows, tune_statuses,
                                  write_plan, write_spec_record)
from orchestrator.spec import SweepSpec
from orchestrator.storage import is_remote, local_view
from orchestrator.trackers import trackers
from workloads.config import TrialConfig
from workloads.metrics import METRICS, PLOTTED, PROGRESS, measured
from workloads.naming import significant
from workloads.threads import bound_threads, thread_env
from workloads.train import CheckpointError, first_intact, run_trial


def _trainable(config: dict) -> None:
    """One trial inside a Ray worker: resumes from Tune's checkpoint when there is one."""
    given = tune.get_context().get_trial_resources().required_resources
    gpus = given.get("GPU", 0)
    if not gpus:
        # Ray leaves CUDA_VISIBLE_DEVICES alone for a task given no GPU, so it would
        # see every GPU of its node and pile onto cuda:0 beside the GPU trials.
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
    bound_threads(max(1, int(given.get("CPU", 1))))
    trial = TrialConfig.model_validate(config["trial"])
    with tempfile.TemporaryDirectory(prefix="icr-trial-") as work:
        resume = first_intact(_checkpoints(work), trial, say=lambda line: print(line, file=sys.stderr, flush=True))

        def report(metrics: dict, checkpoint_dir: Optional[Path]) -> None:
            # Tune stores the trial config beside every result (params.json, result.json).
            flat = {k: (math.nan if v is None else v) for k, v in metrics.items() if k != "config"}
            flat.update(gpu_share=gpus, cuda_devices=os.environ.get("CUDA_VISIBLE_DEVICES", "all"))
            tune.report(flat, checkpoint=tune.Checkpoint.from_directory(str(checkpoint_dir)) if checkpoint_dir else None)

        def on_resume(rows: list[dict]) -> None:
            # The checkpoint this trial continues from was reported with these rows; a
            # worker killed between the two (or a checkpoint taken at a stop and found
            # on disk, or a row cut short by a full disk) left some out of the trial's
            # results: report them again first, in order.
            for row in rows_unstored(_stored_rows(), rows):
                print(f"icr-sweep: {trial.name}: its results lack a row of the checkpoint it continues from "
                      f"({row.get('samples', 0):,} samples); reporting it", file=sys.stderr, flush=True)
                report(row, None)

        storage = _trial_storage()
        local = storage is not None and isinstance(storage[0], pyarrow.fs.LocalFileSystem)
        room = (Path(storage[1]),) if local else ()  # local storage: a checkpoint needs room on its disk too
        asked = _StopRequests(Path(storage[1]).parent / STOP_FILE) if local else None
        run_trial(trial, report=report, checkpoint_dir=Path(work) / "checkpoint", resume_from=resume, room_in=room,
                  checkpoint_now=asked, on_resume=on_resume)


def _stored_rows() -> list[dict]:
    """The result rows stored so far in the trial's directory (those kept from before
    a rebuild too): what Tune's driver wrote, read where the sweep keeps it."""
    storage = _trial_storage()
    if storage is None:
        return []
    fs, path = storage

    def read_text(name: str) -> Optional[str]:
        try:
            with fs.open_input_stream(f"{path}/{name}") as f:
                return f.read().decode("utf-8", errors="replace")
        except (OSError, FileNotFoundError):
            return None

    return stored_rows(read_text)


class _NamedActor:
    """Mixed into the class Tune makes of `_trainable` (its `__mixins__` hook): a
    trial's actor is named after its trial. The Ray dashboard lists an actor by its
    repr, which Ray reads once its constructor returns; Tune's is the function's name,
    `_trainable`, the same for every trial."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._name = self.trial_name or self._name


_trainable.__mixins__ = (_NamedActor,)


@contextlib.contextmanager
def _trial_actors_named():
    """Names each trial's actor after its trial, so that the Ray dashboard's Actors
    page finds a trial by its Name column and search (the repr, `_NamedActor`, is
    only shown once the actor runs). Tune creates the actors unnamed and has no
    option for a name (ray-project/ray#32763), so while this is open its controller
    gets a cache of actor classes whose `_remote` adds the trial's name (Ray 2.60's
    `_ActorClassCache`; Ray is pinned; another Ray keeps Tune's unnamed actors). A
    trial started again in the same driver (a retry after a failure) is named
    `<name> (2)`, ...: the name of the actor that failed may not be free yet."""
    from ray.tune.execution import tune_controller

    real = getattr(tune_controller, "_ActorClassCache", None)
    if real is None:
        yield
        return
    starts: dict[str, int] = {}

    def named(make):
        def _remote(args=None, kwargs=None, **options):
            storage = (kwargs or {}).get("storage")
            trial = getattr(storage, "trial_dir_name", None)
            if trial and "name" not in options:
                starts[trial] = starts.get(trial, 0) + 1
                options["name"] = trial if starts[trial] == 1 else f"{trial} ({starts[trial]})"
            return make(args=args, kwargs=kwargs, **options)
        return _remote

    class Named(real):
        def get(self, trainable_cls):
            actor_cls = super().get(trainable_cls)
            if "_remote" not in vars(actor_cls):  # the cache hands out one class per trainable
                actor_cls._remote = named(actor_cls._remote)
            return actor_cls

    tune_controller._ActorClassCache = Named
    try:
        yield
    finally:
        tune_controller._ActorClassCache = real


def _fit(tuner) -> None:
    with _sigterm_as_ctrl_c(), _trial_actors_named():
        tuner.fit()


# A driver asked to stop (Ctrl-C, SIGTERM) first writes this file into the run
# directory (local storage); each running trial, seeing it after its current step,
# checkpoints that step and reports it, and the driver then lets Tune stop.
# Elsewhere (remote storage) trials keep their time-based checkpoints.
STOP_WAIT_S = 60.0  # the longest the driver waits for those checkpoints


class _StopRequests:
    """True once for each stop request written to `path` (by its modification time)."""

    def __init__(self, path: Path):
        self.path = path
        self.seen = self._stamp()

    def _stamp(self):
        try:
            return self.path.stat().st_mtime_ns
        except OSError:
            return None

    def __call__(self) -> bool:
        stamp = self._stamp()
        if stamp is None or stamp == self.seen:
            return False
        self.seen = stamp
        return True


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
            signal.signal(signal.SIGINT, self._asked)

    def _asked(self, signum, frame):
        if self.asked_at is not None:
            return self._stop_now(signum, frame)
        self.asked_at = time.monotonic()
        self.stop_file.write_bytes(b"")
        print("Stopping: each running trial first checkpoints the step it is at (Ctrl-C again to stop at once).",
              file=sys.stderr, flush=True)

    def _stop_now(self, signum=signal.SIGINT, frame=None):
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
            self._stop_now()


def _trial_storage():
    """(pyarrow filesystem, path) of the trial's directory in the sweep's storage.
    Ray 2.60's session holds it (private API; Ray is pinned in pyproject.toml)."""
    try:
        from ray.train._internal.session import get_session

        storage = get_session().storage
        return storage.storage_filesystem, storage.trial_fs_path
    except Exception:  # another Ray: Tune's own checkpoint alone
        return None


def _checkpoints(work: str):
    """The trial's checkpoints, to restore from in this order, each fetched into
    `work` when asked for: the one Tune hands over, then every other one in the
    trial's directory, newest first (one that cannot be fetched, say deleted, as a
    CheckpointError, which first_intact passes over as it does a damaged one). A damaged newest one then costs one
    checkpoint's interval, not the trial; and a sweep whose Tune state was rebuilt
    (Tune hands nothing over) finds its trials' checkpoints here."""
    given = tune.get_checkpoint()
    if given is not None:
        try:
            yield Path(given.to_directory(os.path.join(work, "restored-0")))
        except (OSError, RuntimeError) as e:  # deleted or unreadable: passed over as a damaged one is
            yield CheckpointError(f"{given.path} cannot be fetched ({type(e).__name__}: {str(e).splitlines()[0][:200]})")
    storage = _trial_storage()
    if storage is None:
        return
    fs, trial_path = storage
    try:
        found = [info for info in fs.get_file_info(pyarrow.fs.FileSelector(trial_path, allow_not_found=True))
                 if info.type == pyarrow.fs.FileType.Directory and info.base_name.startswith("checkpoint_")]
    except OSError:
        return
    found.sort(key=lambda info: info.mtime or 0, reverse=True)
    for i, info in enumerate(found, 1):
        if given is not None and info.path.rstrip("/") == given.path.rstrip("/"):
            continue
        try:
            yield Path(tune.Checkpoint(info.path, filesystem=fs).to_directory(os.path.join(work, f"restored-{i}")))
        except (OSError, RuntimeError) as e:
            yield CheckpointError(f"{info.path} cannot be fetched ({type(e).__name__}: {str(e).splitlines()[0][:200]})")


def _cost(trial: TrialConfig) -> float:
    """A rough relative cost, to start the longest trials first: a sweep whose
    longest trial starts last ends with one trial running alone."""
    m = trial.model
    factor = m.mixer.cpu_cost if m.n_recurrent_layers else 1  # the recurrent mixer's measured premium
    return trial.train.samples * trial.task.longest_sample * m.d_model * m.n_layers * factor


def _trial_name(trial) -> str:
    if trial.config.get("name"):  # an Optuna trial: named by CellwiseOptuna
        return trial.config["name"]
    name = TrialConfig.model_validate(trial.config["trial"]).name
    # An Optuna trial of an earlier version: its directory is named with Tune's id.
    return name if trial.config.get("grid", True) else f"{name}-{trial.trial_id}"


def _sqlite_in(run_dir: str, file: str) -> Optional[str]:
    """The URL of an SQLite file in a local run directory; None for a remote one."""
    return None if is_remote(run_dir) else f"sqlite:///{Path(run_dir).resolve() / file}"


def optuna_storage(spec: SweepSpec, run_dir: str) -> Optional[str]:
    """Where the sweep keeps its Optuna studies: search.storage, else an SQLite file in
    a local run directory; None (in memory only) for a remote run without one."""
    return spec.search.storage or _sqlite_in(run_dir, OPTUNA_FILE)


def study_name(spec: SweepSpec, cell) -> str:
    """The study of one cell: the sweep's name, then the cell's (as `plan` lists it)."""
    return f"{spec.name}/{cell_name(cell)}"


def studies_in_use(spec: SweepSpec, storage: str) -> list[str]:
    """The sweep's study names that `storage` already holds (a launch must not mix a
    new sweep into an earlier one's studies)."""
    import optuna

    known = set(optuna.get_all_study_names(storage))
    return [name for name in (study_name(spec, c) for c in cells(spec) if not cell_rates(spec, c)) if name in known]


class _CellStudy(OptunaSearch):
    """Ray's OptunaSearch for one cell, made to agree with the study's storage. A
    trial's end reaches Optuna's storage (at once) and Tune's experiment state (every
    few seconds) apart: a driver killed between the two re-runs, on resume, a trial
    that Optuna has finished. Such a trial's rows and end are Optuna's already, so
    they are not told again (Optuna refuses them: UpdateFinishedTrialError).
    Optuna is told only evaluations: a checkpoint's row between them has no metric,
    and the trial's end is told with its last evaluation, not its last row. The
    study names the trial the report chooses (`_name_choice`)."""

    def __init__(self, *args, tie_break: Optional[str] = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.tie_break = tie_break
        self._evaluated: dict[str, dict] = {}  # each running trial's last evaluation
        self._name_objective()

    def _name_choice(self) -> None:
        """The study's user attributes name the trial the report chooses for this
        cell and seed: the best metric, ties decided by the spec's tie-break (each as
        measured, a trial's user attributes). Optuna's own best trial is the best
        value alone, the earliest among equal ones; optuna-dashboard shows both on
        the study's page."""
        tie_break = getattr(self, "tie_break", None)  # None in a searcher pickled before this was kept
        done = [t for t in self._ot_study.trials if t.state.is_finished() and t.value is not None
                and math.isfinite(t.value) and "trial" in t.user_attrs]
        if tie_break is None or not done:
            return

        def rank(t):
            tie = t.user_attrs.get(tie_break, math.nan)
            tie = -math.inf if not math.isfinite(tie) else (tie if METRICS[tie_break].mode == "max" else -tie)
            return (t.value if self.mode == "max" else -t.value, tie)

        best = max(done, key=rank)  # the first of equal ranks, as the report's stable sort
        self._ot_study.set_user_attr("chosen_by_report", best.user_attrs["trial"])
        self._ot_study.set_user_attr("chosen_by", f"{self.metric} ({self.mode}), ties by {tie_break} "
                                                  f"({METRICS[tie_break].mode})")

    def _name_objective(self) -> None:
        """The objective is named after the metric (optuna-dashboard shows it)."""
        if self._ot_study is not None and self._ot_study.metric_names != [self.metric]:
            import warnings

            import optuna

            with warnings.catch_warnings():  # "experimental" since Optuna 3.2, and stable in use
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                self._ot_study.set_metric_names([self.metric])

    def tag(self, trial_id: str, **attrs) -> None:
        """User attributes of the Optuna trial behind Tune's `trial_id`."""
        ot_trial = self._ot_trials.get(trial_id)
        if ot_trial is not None:
            for key, value in attrs.items():
                ot_trial.set_user_attr(key, value)

    def _tag_figures(self, trial_id: str, result: dict) -> None:
        # The evaluation's other figures beside the objective: what a trial reached.
        self.tag(trial_id, **measured(result, [k for k in (*PROGRESS, *METRICS) if k != self.metric]))

    def _finished_in_storage(self, trial_id: str) -> bool:
        ot_trial = self._ot_trials.get(trial_id)
        if trial_id in self._completed_trials or ot_trial is None:
            return trial_id in self._completed_trials
        return self._ot_study._storage.get_trial(ot_trial._trial_id).state.is_finished()

    def on_trial_result(self, trial_id: str, result: dict) -> None:
        if result.get("evaluated") is False or self.metric not in result:
            return
        self._evaluated[trial_id] = result
        if not self._finished_in_storage(trial_id):
            self._tag_figures(trial_id, result)
            super().on_trial_result(trial_id, result)

    def on_trial_complete(self, trial_id: str, result: Optional[dict] = None, error: bool = False) -> None:
        last = self._evaluated.pop(trial_id, None)
        if result is not None and (result.get("evaluated") is False or self.metric not in result):
            result = last  # the trial's last row was a checkpoint between evaluations
        if self._finished_in_storage(trial_id):
            self._completed_trials.add(trial_id)
            return
        if result is not None:
            self._tag_figures(trial_id, result)
        super().on_trial_complete(trial_id, result, error)
        if self._ot_study is not None:
            self._name_choice()

    def __getstate__(self):
        # A study kept in a storage is pickled as its trials' ids, never as a live
        # connection: Tune's tuner.pkl and the searcher's checkpoint would otherwise
        # reopen the file where the run was launched, not where it is now.
        state = self.__dict__.copy()
        if self._storage is not None:
            state["_ot_study"], state["_storage"] = None, None
            state["_ot_trials"] = {tid: _trial_id(t) for tid, t in self._ot_trials.items()}
        return state

    @property
    def detached(self) -> bool:
        return self._ot_study is None and self._study_name != "optuna"

    def reattach(self, storage) -> None:
        """Opens the study and its trials in `storage` (the run's own optuna.db)."""
        import optuna

        study = optuna.load_study(study_name=self._study_name, storage=storage, sampler=self._sampler)
        self._ot_study, self._storage = study, storage
        self._ot_trials = {tid: optuna.trial.Trial(study, _trial_id(t)) for tid, t in self._ot_trials.items()}
        self._name_objective()


def _trial_id(trial) -> int:
    return trial if isinstance(trial, int) else trial._trial_id


# The run directory `resume` works on: a restored searcher whose studies live in the
# run directory's own optuna.db opens that file there, wherever the run was launched.
_RESUMING: dict[str, str] = {}


class CellwiseOptuna(Searcher):
    """One Optuna study per grid cell (arch, setup, size, n, seed), each given the
    learning-rate distribution of its arch and `num_samples` trials, so that each
    cell gets its own best learning rate, as the paper's sweep does; a cell whose arch
    has fixed rates in the spec runs each of them once, unsearched. With `storage`
    (an Optuna storage URL) the studies live there, named by `study_name`, for
    optuna-dashboard and `optuna.load_study`; they continue where they were on resume."""

    def __init__(self, spec: SweepSpec, storage: Optional[str] = None):
        search = spec.search
        super().__init__(metric=search.metric, mode=search.mode)
        self.spec = spec
        self.studies, self.used, self.owner = {}, {}, {}
        self.names: dict = {}  # cell -> the names of its trials so far
        self.storage = storage
        self.own_storage = storage is not None and spec.search.storage is None  # the run directory's optuna.db
        rdb = None
        if storage:
            import optuna

            rdb = optuna.storages.RDBStorage(storage)  # one connection pool for every study
        self.fixed, self.budgets = {}, {}
        for i, cell in enumerate(cells(spec)):
            self.used[cell], self.budgets[cell] = 0, cell_budget(spec, cell)
            if cell_rates(spec, cell):  # an arch at fixed rates: its cells run each rate once, unsearched
                self.fixed[cell] = cell_rates(spec, cell)
                continue
            dist = getattr(spec.lr, cell.arch)
            space = {"lr": FloatDistribution(dist.low, dist.high, log=dist.distribution == "loguniform")}
            self.studies[cell] = _CellStudy(space=space, metric=search.metric, mode=search.mode, seed=i,
                                            tie_break=search.ties_by,
                                            storage=rdb, study_name=study_name(spec, cell) if rdb else None)

    def suggest(self, trial_id: str):
        open_cells = [c for c in self.used if self.used[c] < self.budgets[c]]
        if not open_cells:
            return Searcher.FINISHED
        self._attach()
        cell = min(open_cells, key=lambda c: self.used[c])  # round robin over cells
        if cell in self.fixed:
            lr = self.fixed[cell][self.used[cell]]
        else:
            suggestion = self.studies[cell].suggest(trial_id)
            if suggestion is None:
                return None
            lr = suggestion["lr"]
            self.owner[trial_id] = cell
        self.used[cell] += 1
        trial = trial_for(self.spec, *cell, lr)
        name = self._name(cell, trial)
        if cell not in self.fixed:
            run_dir = _RESUMING.get("run_dir") or self.spec.run_dir()
            self.studies[cell].tag(trial_id, trial=name, trial_dir=f"{str(run_dir).rstrip('/')}/{name}")
        return {"trial": trial.model_dump(mode="json"), "grid": False, "name": name}

    def _name(self, cell, trial: TrialConfig) -> str:
        """The trial's name, its rate to three significant digits: more where an
        earlier trial of the cell has the name already."""
        taken = self.names.setdefault(cell, [])
        name = next((n for n in (trial.named(significant(trial.train.lr, d)) for d in range(3, 18)) if n not in taken),
                    f"{trial.name}-{len(taken)}")  # the very same rate twice
        taken.append(name)
        return name

    def _attach(self) -> None:
        """Opens the studies in their storage where they were restored detached: the
        run directory's own optuna.db (where `resume` finds the run now), else the
        storage the spec names."""
        detached = [study for study in self.studies.values() if study.detached]
        if not detached:
            return
        import optuna

        run_dir = _RESUMING.get("run_dir")
        url = _sqlite_in(run_dir, OPTUNA_FILE) if self.own_storage and run_dir and not is_remote(run_dir) else self.storage
        rdb = optuna.storages.RDBStorage(url)
        for study in detached:
            study.reattach(rdb)

    def on_trial_result(self, trial_id: str, result: dict) -> None:
        self._attach()
        if trial_id in self.owner:
            self.studies[self.owner[trial_id]].on_trial_result(trial_id, result)

    def on_trial_complete(self, trial_id: str, result: Optional[dict] = None, error: bool = False) -> None:
        self._attach()
        if trial_id in self.owner:
            self.studies[self.owner.pop(trial_id)].on_trial_complete(trial_id, result, error)

    def save(self, checkpoint_path: str) -> None:
        # OptunaSearch's own save() persists its __dict__ (the in-memory study with it).
        state = {"used": self.used, "owner": self.owner, "names": self.names,
                 "studies": {c: s.__getstate__() for c, s in self.studies.items()}}
        with open(checkpoint_path, "wb") as f:
            pickle.dump(state, f)

    def restore(self, checkpoint_path: str) -> None:
        with open(checkpoint_path, "rb") as f:
            state = pickle.load(f)
        self.used, self.owner, self.names = state["used"], state["owner"], state.get("names", {})
        for cell, study_state in state["studies"].items():
            self.studies[cell].__dict__.update(study_state)
        self._attach()


class ClusterError(RuntimeError):
    """The Ray cluster cannot be reached, or cannot run the sweep's trials."""


def resolve_address(address: str, timeout: float = 5.0) -> str:
    """The host:port of the cluster `address` names (`auto` reads RAY_ADDRESS or
    the last `ray start`), checked to answer within `timeout` seconds: Ray itself
    retries an unreachable address forever."""
    from ray._private.services import canonicalize_bootstrap_address

    if address == "auto":
        source = "RAY_ADDRESS" if os.environ.get("RAY_ADDRESS") else "Ray's record of the last `ray start` (ray_current_cluster)"
    else:
        source = "--address"
    target = address.split("://", 1)[-1]  # ray://host:port: the client server's port
    try:
        resolved = target if "://" in address else canonicalize_bootstrap_address(target)
    except (ConnectionError, ValueError) as e:
        raise ClusterError(f"--address {address}: {e}") from None
    host, _, port = resolved.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout):
            pass
    except (OSError, ValueError) as e:
        shown = address if address == resolved else f"{address} ({resolved})"
        raise ClusterError(f"nothing answers at {shown}, from {source}, within {timeout:g} s: {e}. Start the "
                           "cluster (`ray start --head`, `ray up cluster.yaml`), or drop --address to run on a local Ray") from None
    return address if "://" in address else resolved


def _free_port(host: str, port: int) -> int:
    """`port` if it can be bound on `host`, else a free one."""
    with socket.socket() as s:
        try:
            s.bind((host, port))
            return port
        except OSError:
            pass
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def start_ray(spec: SweepSpec, address: Optional[str], temp_dir: Optional[str], dashboard_host: str,
              dashboard_port: int, num_cpus: Optional[int]):
    """Attaches to a cluster at `address`, or starts an embedded local Ray with its
    dashboard (never a stale cluster found in RAY_ADDRESS or Ray's records).
    Returns Ray's context and notes for the user."""
    # Tune gives a trial its CPUs through a placement group and runs the trial in a
    # thread of its own, so neither Ray nor torch.set_num_threads there bounds the
    # OpenMP and numba pools: without this, a 1-CPU trial ran 3.6x slower, its
    # extra threads spinning against the other trials.
    runtime_env = {"env_vars": thread_env(max(1, int(spec.resources.cpus_per_trial)))}
    # The dashboard's Jobs page names a job by its metadata's job_name: the sweep's.
    job_config = ray.job_config.JobConfig(metadata={"job_name": spec.name})
    if address:
        return ray.init(address=resolve_address(address), runtime_env=runtime_env, job_config=job_config,
                        log_to_driver=True), []
    notes = []
    port = _free_port(dashboard_host, dashboard_port)
    if port != dashboard_port:
        notes.append(f"Port {dashboard_port} is taken; the dashboard listens on {port} instead (--dashboard-port to choose).")
    with _daemons_in_a_group_of_their_own():
        ctx = ray.init(
            address="local", include_dashboard=True, dashboard_host=dashboard_host, dashboard_port=port,
            num_cpus=num_cpus, _temp_dir=temp_dir, runtime_env=runtime_env, job_config=job_config, log_to_driver=True,
        )
    return ctx, notes


@contextlib.contextmanager
def _daemons_in_a_group_of_their_own():
    """Starts the embedded Ray's daemons (GCS, raylet, dashboard) in a process group
    of their own. A stop sent to the driver's process group (`kill -TERM -PGID`, as
    systemd, a batch scheduler or `docker stop` send it) then reaches the driver
    alone, which stops the sweep as on Ctrl-C; in the driver's group, the daemons
    died with it and the driver stalled on the lost GCS. Ray already starts its
    trial workers in groups of their own, and still ends the daemons with the
    driver (ray.shutdown, or the kernel's parent-death signal it sets on Linux)."""
    from ray._private import services  # Ray 2.60 starts each daemon with its ConsolePopen (Ray is pinned)

    real = getattr(services, "ConsolePopen", None)
    if real is None:  # another Ray: its daemons stay in the driver's group
        yield
        return

    class Grouped(real):
        def __init__(self, *args, **kwargs):
            if not kwargs.get("start_new_session") and kwargs.get("process_group") is None:
                kwargs["process_group"] = 0
            super().__init__(*args, **kwargs)

    services.ConsolePopen = Grouped
    try:
        yield
    finally:
        services.ConsolePopen = real


def _node_type_gpus(config: dict) -> dict[str, float]:
    """GPUs per node of each worker type an autoscaler config may start."""
    types = config.get("available_node_types") or {}
    head = config.get("head_node_type")
    return {name: float((t.get("resources") or {}).get("GPU", 0)) for name, t in types.items()
            if name != head and isinstance(t, dict) and t.get("max_workers", config.get("max_workers", 0)) > 0}


def addable_gpus() -> tuple[float, str]:
    """GPUs per node that the cluster's autoscaler can add, and where that was read
    (0 and "" when it cannot, or says nothing). Autoscaler v2 reports its node types
    to the GCS; v1 (`ray up`) is asked through its config, which `ray up` puts on the
    head as ~/ray_bootstrap_config.yaml (ICR_CLUSTER_CONFIG names another file)."""
    try:
        config = ray._private.state.state.get_cluster_config()
        groups = {g.name: float(g.resources.get("GPU", 0)) for g in config.node_group_configs if g.max_count != 0} if config else {}
    except Exception:  # an older GCS without the call: fall back to the file
        groups = {}
    if max(groups.values(), default=0) > 0:
        return max(groups.values()), "the autoscaler's node types"
    path = Path(os.environ.get("ICR_CLUSTER_CONFIG", "~/ray_bootstrap_config.yaml")).expanduser()
    try:
        import yaml

        types = _node_type_gpus(yaml.safe_load(path.read_text()) or {})
    except (OSError, ValueError, AttributeError, TypeError):
        return 0.0, ""
    if max(types.values(), default=0) > 0:
        name = max(types, key=types.get)
        return types[name], f"node type {name} in {path}"
    return 0.0, ""


def trial_resources(spec: SweepSpec, attached: bool) -> tuple[dict, str]:
    """Ray resources per trial, and a note on how trials will run. With device auto,
    trials ask for GPUs when the cluster has some, or (attached) its autoscaler can
    add GPU nodes. Refuses (ClusterError) trials that no node of an embedded Ray can
    hold; on an attached cluster an autoscaler may add nodes, so that is a note."""
    res = spec.resources
    nodes = [n["Resources"] for n in ray.nodes() if n.get("Alive")]
    most = {kind: max((n.get(kind, 0) for n in nodes), default=0) for kind in ("CPU", "GPU")}
    addable, source = addable_gpus() if attached and most["GPU"] == 0 else (0.0, "")
    if res.device == "cpu" or (res.device == "auto" and most["GPU"] == 0 and addable == 0):
        resources = {"cpu": res.cpus_per_trial, "gpu": 0}
        note = f"no GPU in the cluster: trials run on CPU ({res.cpus_per_trial:g} CPU each)" if res.device == "auto" else "device: cpu"
    else:
        resources = {"cpu": res.cpus_per_trial, "gpu": res.gpus_per_trial}
        if res.gpus_per_trial == "auto":
            shares = sorted({share for share, _ in gpu_shares(spec).values()})
            note = (f"{', '.join(f'{s:g}' for s in shares)} GPU per trial by estimated peak memory "
                    f"(gpus_per_trial: auto; `icr-sweep plan` lists each) and {res.cpus_per_trial:g} CPU")
        else:
            note = f"{res.gpus_per_trial:g} GPU and {res.cpus_per_trial:g} CPU per trial"
        if addable:
            note += f" (no GPU node is up yet; the autoscaler can add nodes of {addable:g} GPU: {source})"
    asked = {**resources, "gpu": max(shares) if resources["gpu"] == "auto" else resources["gpu"]}
    short = [f"resources.{field} is {asked[key]:g}, but the largest node has {most[kind]:g} {kind}"
             for field, key, kind in (("cpus_per_trial", "cpu", "CPU"), ("gpus_per_trial", "gpu", "GPU"))
             if asked[key] > most[kind]]
    if short and not attached:
        hint = " (device: cuda asks for a GPU; use device: auto or cpu here)" if asked["gpu"] > most["GPU"] else ""
        raise ClusterError("no trial could ever start: " + "; ".join(short) + hint)
    if short:
        note += ". Waiting for an autoscaler to add nodes: " + "; ".join(short)
    return resources, note


def _per_trial(spec: SweepSpec, resources: dict):
    """The resources argument of tune.with_resources: the dict itself, or, for
    gpus_per_trial: auto, each trial's share by its estimated peak memory."""
    if resources["gpu"] != "auto":
        return resources
    from ray.tune.execution.placement_groups import resource_dict_to_pg_factory

    def per_trial(config: dict):
        share, _ = gpu_share(spec.resources, TrialConfig.model_validate(config["trial"]))
        return resource_dict_to_pg_factory({"cpu": resources["cpu"], "gpu": share})

    return per_trial


def _tuner_parts(spec: SweepSpec, resources: dict):
    trainable = tune.with_resources(_trainable, _per_trial(spec, resources))
    # A checkpoint between evaluations (time or stop) is reported with its progress
    # row, which holds no evaluation metric; Tune's check would end the sweep at the
    # first one. The searchers here read only evaluated rows (CellwiseOptuna), and no
    # scheduler is used, so the check is switched off (Tune's documented switch).
    os.environ["TUNE_DISABLE_STRICT_METRIC_CHECKING"] = "1"
    # Tune's newer console output prints every config key (here: the whole nested
    # trial config) as a column; the classic reporter lets us pick the metrics.
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
    reporter = tune.CLIReporter(
        metric_columns={"samples": "samples", "train_loss": "train_loss",
                        **{name: METRICS[name].label for name in PLOTTED}, "samples_per_s": "samples/s"},
        parameter_columns={"trial/train/lr": "lr"}, max_report_frequency=30,
    )
    run_config = tune.RunConfig(
        progress_reporter=reporter,
        name=spec.name,
        storage_path=spec.storage_uri(),
        failure_config=tune.FailureConfig(max_failures=spec.resources.max_failures),
        checkpoint_config=tune.CheckpointConfig(num_to_keep=2),
        callbacks=[StopAtStep(spec.run_dir()), *trackers(spec, spec.tracking.mlflow and mlflow_uri(spec))],
        verbose=1,
    )
    return trainable, run_config


def mlflow_uri(spec: SweepSpec) -> Optional[str]:
    """The MLflow tracking URI of the spec's tracking.mlflow: its own, else an SQLite
    file in a local run directory (MLflow's file store is in maintenance mode and
    refuses to open by default); None for a remote run without one."""
    return spec.tracking.mlflow.tracking_uri or _sqlite_in(spec.run_dir(), MLFLOW_FILE)


@contextlib.contextmanager
def _sigterm_as_ctrl_c():
    """SIGTERM (what a cluster, a scheduler or a spot instance sends) stops the sweep
    as Ctrl-C does: Tune saves its state, the trials keep their checkpoints, and
    the command ends with the report and the resume command. Installed after Ray
    starts, whose own handler would end the driver with a stack dump."""
    def forward(signum, frame):
        os.kill(os.getpid(), signal.SIGINT)

    previous = signal.signal(signal.SIGTERM, forward)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def launch(spec: SweepSpec, resources: dict) -> str:
    """Runs every trial of `spec`; returns the run directory. Ray must be initialised."""
    run_dir = spec.run_dir()
    write_spec_record(run_dir, spec.model_dump(mode="json"), resources)
    write_plan(run_dir, **plan(spec))
    trainable, run_config = _tuner_parts(spec, resources)
    if spec.search.method == "grid":
        trials = [t.model_dump(mode="json") for t in sorted(expand(spec), key=_cost, reverse=True)]
        param_space = {"trial": tune.grid_search(trials)}
        tune_config = tune.TuneConfig(num_samples=1, max_concurrent_trials=spec.resources.max_concurrent,
                                      trial_name_creator=_trial_name, trial_dirname_creator=_trial_name)
    else:
        param_space = {}
        tune_config = tune.TuneConfig(
            search_alg=CellwiseOptuna(spec, optuna_storage(spec, run_dir)),
            num_samples=sum(cell_budget(spec, cell) for cell in cells(spec)),
            max_concurrent_trials=spec.resources.max_concurrent,
            trial_name_creator=_trial_name, trial_dirname_creator=_trial_name,
        )
    tuner = tune.Tuner(trainable, param_space=param_space, tune_config=tune_config, run_config=run_config)
    _fit(tuner)
    return run_dir


def resume(run_dir: str, spec: SweepSpec, resources: dict, say=print) -> str:
    """Continues an interrupted sweep: finished trials stay, interrupted ones continue
    from their last intact checkpoint, errored ones are retried from theirs. Where
    Tune's own state cannot be read (a full disk cut it short), the sweep is rebuilt
    from the spec and the trial directories instead (`rebuild`)."""
    trainable, run_config = _tuner_parts(spec, resources)
    _RESUMING["run_dir"] = run_dir
    if read_plan(run_dir) is None:  # a run launched before plans were stored: status and report read it
        write_plan(run_dir, **plan(spec))
    for name, what in restore_rows(run_dir).items():
        say(f"{name}: {what}")
    problem = tune_state_problem(run_dir)
    tuner = None
    if not problem:
        try:
            tuner = tune.Tuner.restore(run_dir, trainable=trainable, resume_unfinished=True, resume_errored=True)
        except Exception as e:  # a damaged tuner.pkl or state fails in many ways
            problem = f"Tune cannot restore it ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})"
    if problem:
        tuner = rebuild(run_dir, spec, trainable, run_config, problem, say)
    _fit(tuner)
    return run_dir


def tune_state_problem(run_dir: str) -> str:
    """Why Tune's record of the run cannot be trusted ('' when it can): its newest
    experiment state unreadable, or missing a trial whose directory holds results."""
    with local_view(run_dir) as local:
        statuses, problem = tune_statuses(local)
        if problem:
            return problem
        started = {p.parent.name for p in Path(local).glob(f"*/{RESULTS_FILE}")}
        missing = sorted(started - set(statuses))
    if missing and statuses:
        return f"Tune's experiment state lacks {len(missing)} trial(s) that have results ({', '.join(missing[:3])})"
    return ""


def rebuild(run_dir: str, spec: SweepSpec, trainable, run_config, problem: str, say=print):
    """A new Tune experiment in the same run directory over the spec's trials that
    have not finished, by our own record: the spec stored at launch, and each
    trial's directory (its result.json says whether it finished; its checkpoints,
    which the trainable looks for there, where it continues). Grid specs only: an
    Optuna study's trials are not known by name in advance."""
    if spec.search.method != "grid":
        raise ClusterError(f"{run_dir}: {problem}; an Optuna sweep cannot be rebuilt without it. Its finished trials "
                           "stay readable (status, report); launch the spec into a new directory for the rest")
    planned = planned_trials(spec)
    with local_view(run_dir) as local:
        trials = load_trials(local, planned, locked=False)
        finished = set(trials.loc[trials["state"] == "finished", "trial"]) if len(trials) else set()
    left = [config for name, config in planned.items() if name not in finished]
    if not is_remote(run_dir):
        set_aside_for_rebuild(run_dir, [name for name in planned if name not in finished])
    say(f"Tune's state of {run_dir} cannot be used ({problem}); the sweep is rebuilt from the spec and the trial "
        f"directories: {len(finished)} finished trial(s) kept, {len(left)} to run, each from its newest intact checkpoint")
    left.sort(key=lambda t: _cost(TrialConfig.model_validate(t)), reverse=True)
    tune_config = tune.TuneConfig(num_samples=1, max_concurrent_trials=spec.resources.max_concurrent,
                                  trial_name_creator=_trial_name, trial_dirname_creator=_trial_name)
    return tune.Tuner(trainable, param_space={"trial": tune.grid_search(left)}, tune_config=tune_config,
                      run_config=run_config)


def can_resume(run_dir: str) -> bool:
    return tune.Tuner.can_restore(run_dir)


def holds_sweep(run_dir: str) -> bool:
    """Whether trials were already started in `run_dir` (local or remote)."""
    if is_remote(run_dir):
        return can_resume(run_dir)
    return any(Path(run_dir).glob(f"*/{PARAMS_FILE}"))
