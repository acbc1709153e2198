"""What W&B, MLflow and TensorBoard show of a sweep: Ray Tune's logger callbacks,
subclassed only where a filter is needed, so that every tracker shows one run the
same way:

- one flat parameter space: the swept values first (arch, setup, size, n, lr,
  seed, then the task's and model's fields the spec sweeps), then the rest of
  the config, only the fields the trial's model really has (a Transformer has no
  recurrent mixer, a Mamba no attention heads);
- the metrics under short names (`val/exact_match`, `train/loss`), with the
  training samples as the step; Tune's bookkeeping (`done`, `pid`,
  `training_iteration`, the config repeated in every row ...) is not logged.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import ray.cloudpickle as cloudpickle
from ray.tune.logger import CSVLoggerCallback, JsonLoggerCallback, LoggerCallback
from ray.tune.result import EXPR_PARAM_PICKLE_FILE, EXPR_RESULT_FILE, TRAINING_ITERATION
from ray.tune.utils.util import SafeFallbackEncoder

from orchestrator.arrays import ARRAY_KEY, array_of, member_names
from orchestrator.rundir import (ERROR_FILE, MEMBER_FAILED, STARTED_OVER, WANDB_FAILED, TrialFiles, row_stored,
                                 set_aside_stored_rows, small_text)
from orchestrator.spec import SweepSpec
from orchestrator.storage import answer_timeout, is_remote
from orchestrator.unpromised import WANDB_SAID, wandb_callback
from workloads.config import TrialConfig
from workloads.results import TRIAL_IDS
from workloads.metrics import HELD_OUT, METRICS, RESOLVED, measured
from workloads.naming import model_label

STEP = "samples"  # training samples: the x axis of every chart
DIFFERS = bytes([7 << 3, 1])  # HParamInfo.differs = true: field 7, varint 1


def metric_name(key: str) -> str:
    """A result key's name in the trackers: val_exact_match -> val/exact_match,
    gen_accuracy -> val/gen_accuracy, test_exact_match -> test/exact_match (the
    held-out set's, under a prefix of its own), train_loss -> train/loss, lr ->
    train/lr (the scheduled rate: its curve)."""
    if key in HELD_OUT:
        return f"test/{key.removeprefix('test_')}"
    if key in METRICS:
        return f"val/{key.removeprefix('val_')}"
    return f"train/{key.removeprefix('train_')}"


# The metrics first, exact match (the paper's) leading: TensorBoard's HParams and the trackers' tables
# show their first columns (issue 53: train loss, lr, samples/s and tokens/s came before exact match).
TRACKED = {key: metric_name(key) for key in (*METRICS, "train_loss", "lr", "samples_per_s", "tokens_per_s")}


def tracked_metrics(result: dict) -> dict:
    """The figures of a result row under their short names, with the samples (the
    step); what was not measured (NaN, None) is left out."""
    figures = measured(result, (STEP, *TRACKED))
    return {TRACKED.get(key, key): value for key, value in figures.items()}


def tracked_params(trial: dict, swept: tuple[str, ...] = ()) -> dict:
    """The trial's config (TrialConfig's JSON) as one flat dict: the model's label
    (the report's), the ids, then the
    fields of `swept` (field names, the spec's task and model axes), then the rest;
    a model's recurrent mixer only where it has recurrent layers, attention's fields
    only where it has attention layers."""
    config = TrialConfig.model_validate(trial)
    model = config.model
    dump = config.model_dump(mode="json")
    if not model.n_recurrent_layers:
        dump["model"].pop("mixer")
    if not model.attn_layer_idx:
        for field in ("d_mlp", "n_heads", "rope_theta", "attn_init", "attn_layer_idx"):
            dump["model"].pop(field, None)
    flat = pd.json_normalize(dump, sep=".").iloc[0].to_dict()  # JSON: a tuple is a list here
    # The report's model label first (issue 64: no tracker had it), then the ids.
    out = {"model": model_label(model.arch, model.size), **{short: flat.pop(key) for key, short in TRIAL_IDS.items()}}
    if config.task_label:
        out["setup"] = config.setup
    for field in swept:
        for key in [k for k in flat if k.rsplit(".", 1)[-1] == field]:
            out[key] = flat.pop(key)
    out.update(flat)
    out.pop("task_label", None)
    out["params"] = model.n_params  # trainable parameters: the size the findings compare
    out["trial_dir"] = config.name  # the trial's directory in the run directory
    return {k: _plain(v) for k, v in out.items()}


def _plain(value):
    """A parameter as every tracker shows it alike: numbers and strings as they
    are, a list as its JSON, None and booleans as words (MLflow showed Python's
    reprs: None, False)."""
    if value is None:
        return "none"
    if isinstance(value, bool):
        return str(value).lower()
    return str(value) if isinstance(value, list) else value


def resolved(result: dict) -> dict:
    """What a trial ran on, from one of its rows (RESOLVED: strings), where it says."""
    return {key: result[key] for key in RESOLVED if isinstance(result.get(key), str)}


def swept_fields(spec: SweepSpec) -> tuple[str, ...]:
    """The task's and model's field names that the spec's axes sweep."""
    model = []
    for key, value in spec.axes.model.items():
        if isinstance(value, dict):  # per arch, its fields' lists
            model += list(value)
        elif isinstance(value, list) and all(isinstance(v, dict) for v in value):  # per arch, a list of variants
            model += [field for variant in value for field in variant]
        else:  # a field, its values for every arch
            model.append(key)
    return tuple(dict.fromkeys([*spec.axes.task, *model]))


def _params(trial, swept) -> dict:
    return tracked_params(trial.config["trial"], swept)


class _Member:
    """One member of an array's Tune trial (orchestrator/arrays.py) as the trackers'
    callbacks take a trial: named after it, its config {"trial": ..., "array": the
    array's name}, its directory beside its array's, its id the array's and its
    place (W&B's run id), continuing where the array continues."""

    def __init__(self, array_trial, config: dict, name: str, place: int):
        self.array_trial, self.name = array_trial, name
        self.config = {"trial": config, "array": array_trial.config[ARRAY_KEY]["name"]}
        self.trial_id = f"{array_trial.trial_id}_{place}"
        self.experiment_dir_name = array_trial.experiment_dir_name
        self.local_experiment_path = array_trial.local_experiment_path
        self.local_path = str(Path(array_trial.local_path).parent / self.name)
        storage = array_trial.storage
        self.storage = SimpleNamespace(storage_filesystem=storage.storage_filesystem,
                                       trial_fs_path=f"{storage.trial_fs_path.rstrip('/').rsplit('/', 1)[0]}/{self.name}")

    @property
    def checkpoint(self):
        return self.array_trial.checkpoint

    def stored(self, name: str) -> bool:
        """Whether the member's directory in the sweep's storage holds `name` (Tune's
        local path is a staging folder of the Ray session, which a resume starts bare)."""
        import pyarrow.fs

        fs, path = self.storage.storage_filesystem, f"{self.storage.trial_fs_path}/{name}"
        try:
            return fs.get_file_info(path).type != pyarrow.fs.FileType.NotFound
        except OSError:
            return Path(self.local_path, name).exists()

    def unstore(self, name: str) -> None:
        """Removes `name` from the member's directory, in its staging folder and in storage."""
        Path(self.local_path, name).unlink(missing_ok=True)
        if self.stored(name):
            with contextlib.suppress(OSError):
                self.storage.storage_filesystem.delete_file(f"{self.storage.trial_fs_path}/{name}")

    def init_local_path(self) -> None:
        Path(self.local_path).mkdir(parents=True, exist_ok=True)

    def __str__(self) -> str:
        return self.name


def per_member(callback: type, *mixins: type) -> type:
    """A logger callback class whose every instance logs an array's Tune trial as
    its members (`Members`), `mixins` between; the class keeps its name (Tune
    pickles callbacks)."""
    return type(callback.__name__, (Members, *mixins, callback), {"__doc__": callback.__doc__,
                                                                  "__module__": callback.__module__,
                                                                  "__qualname__": callback.__qualname__})


def tracker(callback: type) -> type:
    """A tracker's callback: per member (`per_member`), each row logged once (`RowsOnce`)."""
    return per_member(callback, RowsOnce)


class RowsOnce:
    """Mixed in before a tracker's callback (`tracker`): a trial that continues from
    a checkpoint older than its last stored row (its driver was killed between the
    two) reports those rows again, with the same figures (catch_up, the resumed
    trial's training); its tracker logged them before and is not given them again
    (W&B would chart each twice, MLflow and TensorBoard hold two points at a step).
    What was stored is read at the trial's start from its result.json (fetched
    from storage where the trial continues from a checkpoint). The trackers log a
    row before TrialFilesCallback, the last callback, stores it, so a row stored was
    logged by each (TensorBoard's and MLflow's writes return once written; W&B's
    are handed to its logging actor)."""

    def log_trial_start(self, trial) -> None:
        trial.init_local_path()
        if trial.checkpoint is not None:
            _fetch(trial, EXPR_RESULT_FILE)
        self.__dict__.setdefault("_stored_before", {})[str(trial)] = TrialFiles(trial.local_path).stored_rows()
        super().log_trial_start(trial)

    def log_trial_result(self, iteration: int, trial, result: dict) -> None:
        if not row_stored(self.__dict__.get("_stored_before", {}).get(str(trial), []), result):
            super().log_trial_result(iteration, trial, result)


class Members:
    """Mixed in before a logger callback (`per_member`): an array's Tune trial is
    logged as its members, each as the trial it is (its start, rows and end; a
    member that failed ends there, FAILED, while the array trains on, and the
    callback's `member_failed(member, error, own)`, where it has one, hears it
    first: `own` where the member failed on its own arithmetic, not with its whole
    array), so that every tracker and the run directory show K ordinary trials. A
    lone trial passes through. A member that failed on its own before is not
    started again; one that failed with its array (a worker killed, a full disk) is,
    as a lone trial is retried."""

    def _members(self, trial) -> list[_Member]:
        cache = self.__dict__.setdefault("_member_cache", {})
        if trial not in cache:
            array = trial.config[ARRAY_KEY]
            cache[trial] = [_Member(trial, config, name, i)
                            for i, (config, name) in enumerate(zip(array["members"], member_names(array)))]
        return cache[trial]

    def _live(self) -> set:
        """The members started and not yet ended, as (name, the array's trial id)."""
        return self.__dict__.setdefault("_members_live", set())

    def log_trial_start(self, trial) -> None:
        if array_of(trial.config) is None:
            return super().log_trial_start(trial)
        for member in self._members(trial):
            if not member.stored(MEMBER_FAILED):
                member.unstore(ERROR_FILE)  # its array's error, not its own: retried with its array
                self._live().add((member.name, trial.trial_id))
                super().log_trial_start(member)

    def log_trial_result(self, iteration: int, trial, result: dict) -> None:
        if array_of(trial.config) is None:
            return super().log_trial_result(iteration, trial, result)
        members = {m.name: m for m in self._members(trial)}
        for name, row in result.get("members", {}).items():
            super().log_trial_result(iteration, members[name], {**row, "config": members[name].config,
                                                                TRAINING_ITERATION: result.get(TRAINING_ITERATION)})
        for name, error in result.get("member_errors", {}).items():
            self._end(members[name], trial, error, own=True)

    def log_trial_save(self, trial) -> None:
        if array_of(trial.config) is None:
            super().log_trial_save(trial)

    def log_trial_end(self, trial, failed: bool = False) -> None:
        if array_of(trial.config) is None:
            return super().log_trial_end(trial, failed)
        error = small_text(Path(trial.local_path, ERROR_FILE)).strip() or f"its array, {trial}, failed"
        for member in self._members(trial):
            if failed and not _finished(member) and not member.stored(MEMBER_FAILED):
                self._end(member, trial, error, own=False)
            elif (member.name, trial.trial_id) in self._live():
                self._live().discard((member.name, trial.trial_id))
                super().log_trial_end(member, False)
        self.__dict__.get("_member_cache", {}).pop(trial, None)

    def _end(self, member: _Member, trial, error: str, own: bool) -> None:
        """A member's failure: kept (member_failed), and its run ended FAILED where it was started."""
        hook = getattr(self, "member_failed", None)
        if hook is not None:
            hook(member, error, own)
        if (member.name, trial.trial_id) in self._live():
            self._live().discard((member.name, trial.trial_id))
            super().log_trial_end(member, True)


def _finished(member: _Member) -> bool:
    rows = TrialFiles(member.local_path).stored_rows()
    return bool(rows) and bool(rows[-1].get("final_eval"))


def wandb_failed(trial_dir: str, error: Exception) -> None:
    """W&B's logging of a trial ended on `error` (in its logging actor: a server that
    refuses the run, an init that timed out): said on the console once per sweep,
    the first error kept in the run directory (WANDB_FAILED), which the console's
    closing lines and the report read. The sweep goes on."""
    from orchestrator.secrets import redact

    text = redact(f"{type(error).__name__}: {str(error).strip().splitlines()[0][:300] if str(error).strip() else ''}")
    try:
        fd = os.open(Path(trial_dir).parent / WANDB_FAILED, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        return  # said already
    except OSError:
        fd = None  # a remote run directory: said for each trial whose logging fails
    if fd is not None:
        with os.fdopen(fd, "w") as f:
            f.write(text + "\n")
    print(f"{WANDB_SAID} {Path(trial_dir).name} ({text}); W&B will hold no more of this sweep's "
          "trials that meet it. The sweep goes on; its results are in its run directory", file=sys.stderr, flush=True)


@functools.cache
def wandb_tracker() -> type:
    """The W&B tracker's class, `Wandb`, made once, on first use (a spec with W&B on,
    an unpickled callback): Ray's W&B callback imports wandb, which a sweep without
    W&B imported for nothing (0.4 s of every launch's and resume's start)."""

    class Wandb(wandb_callback(tracked_metrics, STEP, charts=("train/*", "val/*", "test/*"), trial_dir="trial_dir",
                                   config=resolved, failed=wandb_failed)):
        """One W&B run per trial, named after it (its id too: an offline run's folder,
        offline-run-<time>-<trial>-<tune id>, is found by the trial's name), with the
        flat config; samples are every chart's step."""

        def __init__(self, *args, swept: tuple[str, ...] = (), **kwargs):
            super().__init__(*args, **kwargs)
            self.swept = swept

        def log_trial_start(self, trial) -> None:
            name = str(trial)
            run_id = f"{name.replace('.', '_')}-{trial.trial_id}"  # W&B ids take no dots
            # W&B's own lines (its banner, sync hints, a summary per run) stay in its
            # logs under the run directory: the console says where they are once.
            self.start_run(trial, id=run_id, name=name, resume="allow", reinit="finish_previous", allow_val_change=True,
                           group=self.group or trial.experiment_dir_name, project=self.project,
                           config=_params(trial, self.swept), settings={"silent": True}, **self.kwargs)

    Wandb.__qualname__ = "Wandb"  # pickled by name, as the module's attribute
    return tracker(Wandb)


def __getattr__(name: str):
    """The module's `Wandb`, made on first use (PEP 562): pickle finds the class by it."""
    if name == "Wandb":
        return wandb_tracker()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _or_off(method):
    """Runs a tracker callback's `method` unless the tracker was turned off; the
    first failure (a server that stopped answering, whose requests end after the
    wait) turns it off for the rest of the sweep, said once: a tracker costs its
    logging, never the run (Tune ends the sweep on a callback's exception)."""

    @functools.wraps(method)
    def guarded(self, *args, **kwargs):
        if getattr(self, "_off", False):
            return None
        try:
            return method(self, *args, **kwargs)
        except Exception as e:
            self._off = True
            print(f"warning: {type(self).__name__} stopped logging for the rest of the sweep: {type(e).__name__}: "
                  f"{str(e).splitlines()[0][:300] if str(e) else ''} (the sweep goes on; what it logged so far is kept)",
                  file=sys.stderr, flush=True)
            return None
    return guarded


@tracker
class MLflow(LoggerCallback):
    """One MLflow run per trial, through MLflow's own client: the flat config as its
    params, each row's figures as metrics at its samples. MLflow logs from the
    driver, so a server that stops answering would hold the sweep (MLflow waits 120
    s per request and retries 7 times): its requests wait ICR_STORAGE_TIMEOUT_S (20
    s) once, unless MLFLOW_HTTP_REQUEST_TIMEOUT or _MAX_RETRIES say otherwise, and a
    failure turns MLflow off for the rest of the sweep."""

    def __init__(self, tracking_uri: str, experiment_name: str, tags: dict, swept: tuple[str, ...] = ()):
        self.tracking_uri, self.experiment_name, self.tags, self.swept = tracking_uri, experiment_name, tags, swept
        self.client, self.experiment_id, self.runs, self.resolved = None, None, {}, set()
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", str(max(1, round(answer_timeout()))))
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")

    @_or_off
    def setup(self, *args, **kwargs):
        from mlflow import MlflowClient

        self.client = MlflowClient(tracking_uri=self.tracking_uri)
        experiment = self.client.get_experiment_by_name(self.experiment_name)
        if experiment is None:
            self.experiment_id = self.client.create_experiment(self.experiment_name)
        else:
            self.experiment_id = experiment.experiment_id
            if experiment.lifecycle_stage == "deleted":  # named again: the experiment comes back
                self.client.restore_experiment(self.experiment_id)

    @_or_off
    def log_trial_start(self, trial) -> None:
        from mlflow.entities import Param

        if trial in self.runs or self.client is None:
            return
        # A trial that continues (a resume, a retry) continues its run: one run per trial (issue 53).
        found = self.client.search_runs([self.experiment_id], filter_string=f"tags.trial_name = '{trial}'",
                                        max_results=1)
        if found:
            self.runs[trial] = found[0].info.run_id
            self.client.update_run(self.runs[trial], status="RUNNING")
            return
        run = self.client.create_run(self.experiment_id, run_name=str(trial), tags={**self.tags, "trial_name": str(trial)})
        self.runs[trial] = run.info.run_id
        params = [Param(key, str(value)) for key, value in _params(trial, self.swept).items()]
        for i in range(0, len(params), 100):  # MLflow takes at most 100 params per batch
            self.client.log_batch(run.info.run_id, params=params[i:i + 100])

    @_or_off
    def log_trial_result(self, iteration: int, trial, result: dict) -> None:
        import time

        from mlflow.entities import Metric, Param

        if trial not in self.runs:
            self.log_trial_start(trial)
        if trial not in self.runs:
            return
        figures = tracked_metrics(result)
        step, now = int(figures.pop(STEP, 0)), int(time.time() * 1000)
        metrics = [Metric(name, float(value), now, step) for name, value in figures.items()]
        ran = resolved(result) if trial not in self.resolved else {}  # once: MLflow's params do not change
        if ran:
            self.resolved.add(trial)
        self.client.log_batch(self.runs[trial], metrics=metrics, params=[Param(k, v) for k, v in ran.items()])

    @_or_off
    def log_trial_end(self, trial, failed: bool = False) -> None:
        if trial in self.runs:
            self.client.set_terminated(self.runs.pop(trial), status="FAILED" if failed else "FINISHED")

    @_or_off
    def on_experiment_end(self, trials, **info) -> None:
        """A sweep stopped (Ctrl-C, a stop) ends the runs of its unfinished trials
        KILLED, not RUNNING for good; a resume continues each."""
        for trial in list(self.runs):
            self.client.set_terminated(self.runs.pop(trial), status="KILLED")


# The columns TensorBoard's HParams shows by default (it shows the first five of those
# marked as differing, by name): what tells two trials apart (issue 64: the swept fields
# marked too pushed seed, setup and size out, and two seeds read as identical rows).
HPARAMS_SHOWN = ("setup", "model", "n", "lr", "seed")


def hparams_of(spec: SweepSpec) -> tuple[dict, set[str]]:
    """Every parameter a trial of `spec` logs, in the trackers' order (the model's
    label, the ids, the swept fields, the rest), each with a value of one trial that
    has it; and those to show first (HPARAMS_SHOWN)."""
    from orchestrator.grid import shape_trials

    swept = swept_fields(spec)
    example = {}
    for trial in shape_trials(spec):
        for key, value in tracked_params(trial.model_dump(mode="json"), swept).items():
            example.setdefault(key, value)
    return example, set(HPARAMS_SHOWN) & set(example)


class EventFile:
    """A TensorBoard event file in `folder` whose every event is written (and, at
    `flush`, on disk) when `add` returns: tensorboardX's EventsWriter. Its
    SummaryWriter queues events for a thread that writes them and flushes every
    `flush_secs`, so a driver killed just after a row lost it from TensorBoard for
    good (seen: a trial's evaluation in its results, missing from its event file)."""

    def __init__(self, folder: str):
        from tensorboardX.event_file_writer import EventsWriter

        self.events = EventsWriter(str(Path(folder) / "events"))

    def add(self, summary, step: int | None = None) -> None:
        import time

        from tensorboardX.proto.event_pb2 import Event

        event = Event(summary=summary, wall_time=time.time())
        if step is not None:
            event.step = int(step)
        self.events.write_event(event)

    def flush(self) -> None:
        self.events.flush()

    def close(self) -> None:
        self.events.close()


@tracker
class TensorBoard(LoggerCallback):
    """TensorBoard files in each trial's directory (`EventFile`): the
    figures under their short names at the trial's samples, and, at the trial's
    end, its HParams session (the flat config, the latest of each figure). The
    HParams experiment (which parameters, which metrics) is written once, in the
    run directory: TensorBoard sorts parameters by whether they differ between
    runs, then by name, and shows the first five, so HPARAMS_SHOWN alone are marked
    as differing: they come first and are shown; every other one is listed after
    them (as each trial's own experiment, TensorBoard listed them by name alone,
    and showed model.attn_init before setup)."""

    def __init__(self, swept: tuple[str, ...] = (), hparams: tuple[dict, set[str]] = ({}, set())):
        self.swept, (self.params, self.varying) = swept, hparams
        self.writers, self.latest, self.ran, self.experiment_written = {}, {}, {}, False

    def log_trial_start(self, trial) -> None:
        if trial in self.writers:
            self.writers[trial].close()
        trial.init_local_path()
        self.writers[trial] = EventFile(trial.local_path)
        self.latest.setdefault(trial, {})
        if not self.experiment_written and self.params:
            self.write_experiment(trial.local_experiment_path)

    def write_experiment(self, run_dir: str) -> None:
        """The HParams experiment: every parameter, those the spec sweeps marked as
        differing, and the metrics; in the run directory, TensorBoard's logdir."""
        from tensorboardX.proto.plugin_hparams_pb2 import HParamsPluginData
        from tensorboardX.summary import hparams

        every = {**self.params, **{key: "" for key in RESOLVED}}  # what ran: text, known at the trial's end
        experiment, _, _ = hparams(hparam_dict=every, metric_dict={name: 0.0 for name in TRACKED.values()})
        data = HParamsPluginData()
        value = experiment.value[0]
        data.ParseFromString(value.metadata.plugin_data.content)
        for info in data.experiment.hparam_infos:
            if info.name in self.varying:  # TensorBoard's HParamInfo.differs (field 7, a bool), which
                info.MergeFromString(DIFFERS)  # tensorboardX's copy of the proto lacks: its wire bytes
        value.metadata.plugin_data.content = data.SerializeToString()
        writer = EventFile(run_dir)
        writer.add(experiment)
        writer.close()
        self.experiment_written = True

    def log_trial_result(self, iteration: int, trial, result: dict) -> None:
        from tensorboardX.summary import scalar

        if trial not in self.writers:
            self.log_trial_start(trial)
        figures = tracked_metrics(result)
        step = int(figures.pop(STEP, result[TRAINING_ITERATION]))
        for name, value in figures.items():
            self.writers[trial].add(scalar(name, value), step)
        self.latest[trial] = {**self.latest[trial], **figures}
        self.ran[trial] = {**self.ran.get(trial, {}), **resolved(result)}
        self.writers[trial].flush()

    def log_trial_end(self, trial, failed: bool = False) -> None:
        from tensorboardX.summary import hparams

        writer, latest, ran = self.writers.pop(trial, None), self.latest.pop(trial, {}), self.ran.pop(trial, {})
        if writer is None:
            return
        if latest:
            params = {**_params(trial, self.swept), **ran}  # plain values: TensorBoard takes no None
            _, session_start, session_end = hparams(hparam_dict=params, metric_dict=latest)
            for summary in (session_start, session_end):  # the experiment is the run directory's
                writer.add(summary)
        writer.close()


@per_member
class TrialFilesCallback(JsonLoggerCallback):
    """A sweep trial's params.json and result.json, written by the run directory's
    own writer (`TrialFiles`, which `train --out` uses too) where Tune's JSON logger
    writes them, and Tune's pickled config (params.pkl) beside them. Being a
    JsonLoggerCallback (all of whose methods it overrides), it keeps Tune from adding
    its own.

    Every trial first fetches its result.json from storage (a remote run's trial may
    start on another node), not only one Tune knows a checkpoint of: the trial finds
    its checkpoints in storage itself (orchestrator/worker.py), and one Tune's saved
    state did not know of would otherwise write its rows from there on into a new
    file that replaced the stored one (CI, 2026-12-02: a trial of an S3 run resumed
    with its last row alone). A trial that starts over from sample 0 sets its fetched
    rows aside at its first row (STARTED_OVER)."""

    def __init__(self):
        self.files = {}

    def log_trial_start(self, trial) -> None:
        self.update_config(trial, trial.config)
        _fetch(trial, EXPR_RESULT_FILE)
        self.files[trial] = TrialFiles(trial.local_path, encoder=SafeFallbackEncoder)

    def log_trial_result(self, iteration: int, trial, result: dict) -> None:
        if trial not in self.files:
            self.log_trial_start(trial)
        if result.get(STARTED_OVER):  # its first row since it started over from sample 0 (orchestrator/worker.py)
            _set_aside_for_start_over(trial, self.files[trial])
        self.files[trial].append(result)

    def log_trial_end(self, trial, failed: bool = False) -> None:
        self.files.pop(trial, None)

    def member_failed(self, member: _Member, error: str, own: bool) -> None:
        Path(member.local_path).mkdir(parents=True, exist_ok=True)
        Path(member.local_path, ERROR_FILE).write_text(error + "\n")
        if own:  # its own arithmetic: any retry repeats it, so a resume leaves it failed
            Path(member.local_path, MEMBER_FAILED).write_text(error + "\n")

    def update_config(self, trial, config: dict) -> None:
        trial.init_local_path()
        TrialFiles(trial.local_path, encoder=SafeFallbackEncoder).write_config(config)
        with open(Path(trial.local_path, EXPR_PARAM_PICKLE_FILE), "wb") as f:
            cloudpickle.dump(config, f)


@per_member
class MemberCSV(CSVLoggerCallback):
    """Tune's progress.csv, in each trial's directory (an array's members' each)."""


class ArrayCSV(CSVLoggerCallback):
    """An array's own progress.csv (its first member's columns), which Tune's
    analysis at the sweep's end reads from every Tune trial's directory (it warns
    of each that lacks one); nothing for a lone trial (MemberCSV writes its own)."""

    def log_trial_start(self, trial) -> None:
        if array_of(trial.config) is not None:
            super().log_trial_start(trial)

    def log_trial_result(self, iteration: int, trial, result: dict) -> None:
        if array_of(trial.config) is not None:
            super().log_trial_result(iteration, trial, {k: v for k, v in result.items()
                                                        if k not in ("members", "member_errors")})

    def log_trial_end(self, trial, failed: bool = False) -> None:
        if array_of(trial.config) is not None:
            super().log_trial_end(trial, failed)


def _set_aside_for_start_over(trial, files: TrialFiles) -> None:
    """A trial that starts over from sample 0: its earlier rows set aside where the
    sweep keeps them (rundir.set_aside_stored_rows), the local copies dropped."""
    problem = set_aside_stored_rows(trial.storage.storage_filesystem, trial.storage.trial_fs_path, files)
    if problem:
        print(f"warning: {trial}: its rows from before it started over could not be set aside in storage "
              f"({problem}); its new rows replace them there", file=sys.stderr, flush=True)


FETCH_TRIES = 3  # a store that has just answered again may miss a request or two (seen: moto after a pause)


def _fetch(trial, name: str) -> None:
    """Copies a file of the trial's directory from the sweep's storage to the trial's
    local directory (where they are one, the file itself), trying FETCH_TRIES times."""
    import pyarrow.fs

    storage = trial.storage
    local, remote = Path(trial.local_path, name), f"{storage.trial_fs_path}/{name}"
    if isinstance(storage.storage_filesystem, pyarrow.fs.LocalFileSystem) and Path(remote).resolve() == local.resolve():
        return
    for attempt in range(1, FETCH_TRIES + 1):
        try:
            pyarrow.fs.copy_files(remote, str(local), source_filesystem=storage.storage_filesystem)
            return
        except FileNotFoundError:  # nothing stored yet
            return
        except OSError as e:  # unreadable: the rows start here
            if attempt == FETCH_TRIES:
                print(f"warning: {trial}: {name} could not be fetched from storage ({type(e).__name__}: {e}); the rows "
                      "stored so far are replaced by those from here on (its checkpoints hold its evaluations)",
                      file=sys.stderr, flush=True)
                return
            time.sleep(attempt)


def trackers(spec: SweepSpec, mlflow_uri, run_dir: str) -> list:
    """Ray Tune's logger callbacks for the trackers `spec.tracking` turns on, and
    Tune's JSON and CSV results (what status and report read) always."""
    tracking, swept = spec.tracking, swept_fields(spec)
    # Tune adds its own JSON, CSV and TensorBoard loggers unless told not to.
    os.environ["TUNE_DISABLE_AUTO_CALLBACK_LOGGERS"] = "1"
    # The trial's files come last: a row stored (result.json) was logged by every
    # tracker before it, which `RowsOnce` relies on when a killed driver's trial resumes.
    out = [MemberCSV(), ArrayCSV()]
    if tracking.tensorboard:
        out.append(TensorBoard(swept, hparams_of(spec)))
    if tracking.wandb:
        w = tracking.wandb
        if w.mode == "offline":
            os.environ["WANDB_MODE"] = "offline"  # the callback asks for no API key then
        where = w.dir or (None if is_remote(run_dir) else str(Path(run_dir).resolve()))
        options = {k: v for k, v in dict(entity=w.entity, dir=where).items() if v}
        # W&B logs from actors of its own, so a server that stops answering holds no
        # trial; at the end Tune waits upload_timeout for them (30 min by default),
        # then ends them: their runs stay in W&B's local folder for `wandb sync`.
        out.append(wandb_tracker()(project=w.project, group=w.group or spec.name, mode=w.mode, log_config=False,
                                   swept=swept, upload_timeout=answer_timeout(), **options))
    if tracking.mlflow:
        out.append(MLflow(tracking_uri=mlflow_uri, experiment_name=tracking.mlflow.experiment or spec.name,
                          tags={"sweep": spec.name}, swept=swept))
    return out + [TrialFilesCallback()]
