"""What every tracker shows of a sweep alike, and how a tracker's Ray Tune logger
callback takes an array's trial (its members, each a trial) and a resumed trial
(each row logged once):

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
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
from ray.tune.result import EXPR_RESULT_FILE, TRAINING_ITERATION

from orchestrator.arrays import ARRAY_KEY, array_of, member_names
from orchestrator.rundir import ERROR_FILE, MEMBER_FAILED, TrialFiles, row_stored, small_text
from orchestrator.spec import SweepSpec
from workloads.config import TrialConfig
from workloads.metrics import HELD_OUT, METRICS, RESOLVED, measured
from workloads.naming import model_label
from workloads.results import TRIAL_IDS

STEP = "samples"  # training samples: the x axis of every chart


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
# show their first columns (train loss, lr, samples/s and tokens/s must not come before exact match).
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
    # The report's model label first (no tracker had it), then the ids.
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


def trial_params(trial, swept) -> dict:
    return tracked_params(trial.config["trial"], swept)


class Member:
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


def logged_once_per_member(callback: type) -> type:
    """A tracker's callback: per member (`per_member`), each row logged once (`RowsOnce`)."""
    return per_member(callback, RowsOnce)


class RowsOnce:
    """Mixed in before a tracker's callback (`logged_once_per_member`): a trial that continues from
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
            fetch_stored(trial, EXPR_RESULT_FILE)
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

    def _members(self, trial) -> list[Member]:
        cache = self.__dict__.setdefault("_member_cache", {})
        if trial not in cache:
            array = trial.config[ARRAY_KEY]
            cache[trial] = [Member(trial, config, name, i)
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
            if failed and not finished(member) and not member.stored(MEMBER_FAILED):
                self._end(member, trial, error, own=False)
            elif (member.name, trial.trial_id) in self._live():
                self._live().discard((member.name, trial.trial_id))
                super().log_trial_end(member, False)
        self.__dict__.get("_member_cache", {}).pop(trial, None)

    def _end(self, member: Member, trial, error: str, own: bool) -> None:
        """A member's failure: kept (member_failed), and its run ended FAILED where it was started."""
        hook = getattr(self, "member_failed", None)
        if hook is not None:
            hook(member, error, own)
        if (member.name, trial.trial_id) in self._live():
            self._live().discard((member.name, trial.trial_id))
            super().log_trial_end(member, True)


def finished(member: Member) -> bool:
    rows = TrialFiles(member.local_path).stored_rows()
    return bool(rows) and bool(rows[-1].get("final_eval"))


def or_off(method):
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


FETCH_TRIES = 3  # a store that has just answered again may miss a request or two (seen: moto after a pause)


def fetch_stored(trial, name: str) -> None:
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
