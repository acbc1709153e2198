"""The code of one trial inside a Ray worker: its resources and threads, the
checkpoint it continues from (Tune's, else the newest intact one in its
directory), its rows reported to Tune, and what it does where a checkpoint is
gone or its failure would repeat. The driver (tune.py) hands `trainable_fn` to
Tune."""

import logging
import math
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Optional

import pyarrow.fs
from ray import tune

from orchestrator.arrays import array_of, member_names
from orchestrator.rundir import (FAILS_AGAIN, MEMBER_FAILED, STARTED_OVER, STARTED_OVER_FILE, STOP_FILE, catch_up,
                                 stored_rows)
from orchestrator.stopping import StopRequests
from orchestrator.unpromised import forget_progress, mix_into_trials, name_trial_actor, tell_progress
from workloads.checkpoint import CheckpointError, first_intact
from workloads.config import TrialConfig
from workloads.threads import bound_threads

# The training code (torch: 1.5 s of imports) is imported where a trial starts, not
# here: the driver imports this module for `trainable_fn` alone (issue 63).


def trainable_fn(config: dict) -> None:
    """One trial inside a Ray worker: resumes from Tune's checkpoint when there is one."""
    given = tune.get_context().get_trial_resources().required_resources
    gpus = given.get("GPU", 0)
    if not gpus:
        # Ray leaves CUDA_VISIBLE_DEVICES alone for a task given no GPU, so it would
        # see every GPU of its node and pile onto cuda:0 beside the GPU trials.
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
    bound_threads(max(1, int(given.get("CPU", 1))))
    # Ray Train's "Checkpoint successfully created at ..." at every checkpoint reached
    # the driver's console after its last lines (the report, how to open the run);
    # the checkpoints are the run directory's to show (status, report).
    logging.getLogger("ray.train").setLevel(logging.WARNING)
    storage = _trial_storage()
    telling = Telling(storage[1]) if storage is not None else None
    try:
        _train(config, storage, gpus, telling)
    finally:
        if telling is not None:
            forget_progress(telling.key)


TELL_EVERY_S = 2.0  # how often a trial tells its samples between evaluations (the progress view)


class Telling:
    """A trial's `on_step`: its samples, and its speed since its first step here, told
    every `every` seconds under `key` (its directory), where the driver's progress
    view reads them (unpromised.told_progress): the count moves between evaluations."""

    def __init__(self, key: str, every: float = TELL_EVERY_S, clock: Callable[[], float] = time.monotonic,
                 tell: Callable[[str, int, float], None] = tell_progress):
        self.key, self.every, self.clock, self.tell = key, every, clock, tell
        self.start: Optional[tuple[float, int]] = None
        self.told_at = 0.0

    def __call__(self, samples: int) -> None:
        now = self.clock()
        if self.start is None:  # the first step's time is the model's warm-up, not its speed
            self.start, self.told_at = (now, samples), now
            return
        if now - self.told_at >= self.every:
            started, first = self.start
            self.tell(self.key, samples, (samples - first) / (now - started) if now > started else 0.0)
            self.told_at = now


def _train(config: dict, storage, gpus: float, telling: Optional[Telling]) -> None:
    """A lone trial, or an array (`_array_trial`), as `trainable_fn` was given it."""
    from workloads.train import Checkpoints, Hooks, NonFiniteLoss, run_trial

    array = array_of(config)
    if array is not None:
        return _array_trial(array, storage, gpus, telling)
    trial = TrialConfig.model_validate(config["trial"])
    _fails_again(storage)
    with tempfile.TemporaryDirectory(prefix="icr-trial-") as work:
        tried = _Counted(_checkpoints(work, storage))
        resume = first_intact(tried, trial, say=_say)
        over = {} if resume is not None else _starts_over(storage, trial.name, tried.count)

        def report(metrics: dict, checkpoint_dir: Optional[Path]) -> None:
            flat = {**_flat(metrics, gpus), **over}
            over.clear()  # the first row alone: the driver sets the earlier rows aside before writing it
            tune.report(flat, checkpoint=tune.Checkpoint.from_directory(str(checkpoint_dir)) if checkpoint_dir else None)

        def on_resume(rows: list[dict]) -> None:
            catch_up(_stored_rows(storage), rows, report=lambda row: report(row, None),
                     say=lambda line: _say(f"icr-sweep: {trial.name}: {line}"))

        room, asked = _on_local_storage(storage)
        try:
            run_trial(trial, Hooks(report=report, stop=asked, stop_ends=False, on_resume=on_resume, on_step=telling),
                      Checkpoints(dir=Path(work) / "checkpoint", resume_from=resume, room_in=room))
        except NonFiniteLoss as e:
            if e.step == 1 and storage is not None:  # before any update: every retry meets it again
                with storage[0].open_output_stream(f"{storage[1]}/{FAILS_AGAIN}") as f:
                    f.write(str(e).encode())
            raise


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _on_local_storage(storage) -> tuple[tuple[Path, ...], Optional[StopRequests]]:
    """Where a checkpoint needs room besides the worker's own folder, and the sweep's
    stop requests: both read on local storage only (the trial's directory on its
    disk, the stop file beside it)."""
    if storage is None or not isinstance(storage[0], pyarrow.fs.LocalFileSystem):
        return (), None
    return (Path(storage[1]),), StopRequests(Path(storage[1]).parent / STOP_FILE)


def _flat(metrics: dict, gpus: float) -> dict:
    """A row as Tune stores it: without the config (Tune stores the trial's beside
    every result: params.json, result.json), None as NaN, and where it ran."""
    flat = {k: (math.nan if v is None else v) for k, v in metrics.items() if k != "config"}
    flat.update(gpu_share=gpus, cuda_devices=os.environ.get("CUDA_VISIBLE_DEVICES", "all"))
    return flat


def _array_trial(array: dict, storage, gpus: float, telling: Optional[Telling] = None) -> None:
    """An array's worker (orchestrator/arrays.py): its members that have not failed
    train as one (run_array), from the newest checkpoint that holds each of them.
    Each report is one Tune result: the first member's row (what Tune's progress
    table and stop callback read) with every member's row under `members` and the
    failures since the last report under `member_errors` (the trackers' callbacks
    write each member's files from them: trackers.Members)."""
    from workloads.array_train import ArrayHooks, run_array
    from workloads.train import Checkpoints

    members = dict(zip(member_names(array), (TrialConfig.model_validate(m) for m in array["members"])))
    failed = [name for name in members if _trial_file(_member_storage(storage, name), MEMBER_FAILED) is not None]
    for name in failed:  # a member that failed on its own stays failed: its retry repeats it
        del members[name]
    if failed:
        _say(f"icr-sweep: {array['name']}: {', '.join(failed)} failed before, on their own loss; the others train on")
    if not members:
        return
    names, configs = list(members), list(members.values())
    errors: dict[str, str] = {}

    def report(rows: dict, checkpoint_dir: Optional[Path]) -> None:
        flat = {name: {**_flat(row, gpus), **over.pop(name, {})} for name, row in rows.items()}
        head = next(iter(flat.values()), {})
        tune.report({**head, "members": flat, "member_errors": dict(errors)},
                    checkpoint=tune.Checkpoint.from_directory(str(checkpoint_dir)) if checkpoint_dir else None)
        errors.clear()

    def on_resume(name: str, rows: list[dict]) -> None:
        catch_up(_stored_rows(_member_storage(storage, name)), rows, report=lambda row: report({name: row}, None),
                 say=lambda line: _say(f"icr-sweep: {name}: {line}"))

    with tempfile.TemporaryDirectory(prefix="icr-array-") as work:
        tried = _Counted(_checkpoints(work, storage))
        resume = first_intact(tried, configs, say=_say, names=names)
        over = {} if resume is not None else {
            name: _starts_over(_member_storage(storage, name), name, tried.count) for name in names}
        room, asked = _on_local_storage(storage)
        hooks = ArrayHooks(report=report, stop=asked, stop_ends=False, on_resume=on_resume, on_step=telling,
                           fail=lambda name, error: errors.__setitem__(name, f"{type(error).__name__}: {error}"))
        run_array(configs, hooks, Checkpoints(dir=Path(work) / "checkpoint", resume_from=resume, room_in=room), names)
    if errors:  # failures after the last report (every member failed)
        tune.report({"members": {}, "member_errors": errors})


class _Counted:
    """An iterable that counts the items taken from it (the checkpoints tried)."""

    def __init__(self, items):
        self.items, self.count = items, 0

    def __iter__(self):
        for item in self.items:
            self.count += 1
            yield item


def _starts_over(storage, name: str, tried: int) -> dict:
    """A trial about to train from sample 0 although its results had reached further
    (its checkpoints deleted, or none readable): says so, and returns the mark its
    first row carries (STARTED_OVER: the samples reached), at which the driver sets
    its earlier rows aside (result.json would otherwise hold the first rows twice);
    {} for a trial that had no rows."""
    reached = max((int(row.get("samples") or 0) for row in _stored_rows(storage)), default=0)
    if not reached:
        return {}
    why = "no checkpoint of it is left" if not tried else f"none of its {tried} checkpoint(s) can be read"
    _say(f"icr-sweep: {name}: STARTING OVER from sample 0: {why}, though its results had reached {reached:,} "
         f"samples; those rows are set aside ({STARTED_OVER_FILE}), not repeated")
    return {STARTED_OVER: reached}


def _member_storage(storage, name: str):
    """(filesystem, path) of a member's trial directory, beside its array's."""
    return None if storage is None else (storage[0], f"{storage[1].rstrip('/').rsplit('/', 1)[0]}/{name}")


class FailsAgain(RuntimeError):
    """A retry of a trial whose failure any retry repeats, ended before it trains."""


def _fails_again(storage) -> None:
    """Ends a retry at once (FailsAgain, with the first failure's message) where the
    trial's failure would repeat: Tune retries a failed trial from scratch when it
    has no checkpoint, up to max_failures times, and has no way to be told an error
    is final. `resume` clears the mark (the spec or the machine may have changed)."""
    first = _trial_file(storage, FAILS_AGAIN)
    if first is not None:
        raise FailsAgain(f"{first}; not retried: any retry fails alike. Change the spec, then launch it again")


def _trial_file(storage, name: str) -> Optional[str]:
    """The text of a file of the trial's directory, read where the sweep keeps it
    (None where there is no storage or no such file)."""
    if storage is None:
        return None
    try:
        with storage[0].open_input_stream(f"{storage[1]}/{name}") as f:
            return f.read().decode("utf-8", errors="replace")
    except (OSError, FileNotFoundError):
        return None


def _stored_rows(storage) -> list[dict]:
    """The result rows stored so far in the trial's directory (those kept from before
    a rebuild too): what Tune's driver wrote, read where the sweep keeps it."""
    return stored_rows(lambda name: _trial_file(storage, name))


class _TrialActor:
    """Mixed into the class Tune makes of `trainable_fn` (its `__mixins__` hook).

    A trial's actor is named after its trial: the Ray dashboard lists an actor by
    its repr, which Ray reads once its constructor returns; Tune's is the
    function's name, `trainable_fn`, the same for every trial.

    A checkpoint Tune restores that is gone from storage (deleted, or never
    finished by a stop or a full disk) is passed over as a damaged one is:
    Tune failed the trial for good ("does not exist on storage anymore"); the
    trial now starts without it and `_checkpoints` finds the newest intact one in
    its directory, or none: then it starts over, saying so (`_starts_over`)."""

    def __init__(self, *args, **kwargs):
        # Tune's "Restored on <ip> from checkpoint: Checkpoint(...)" reached the console
        # of every resume; the driver's progress view says what a resume restored.
        logging.getLogger("ray.tune.trainable").setLevel(logging.WARNING)
        super().__init__(*args, **kwargs)
        name_trial_actor(self, self.trial_name)

    def restore(self, checkpoint_path, *args, **kwargs):
        checkpoint = getattr(checkpoint_path, "checkpoint", None)
        if checkpoint is not None and _missing(checkpoint):
            print(f"icr-sweep: {self.trial_name}: the checkpoint Tune restores, {checkpoint.path}, is gone from "
                  "storage; continuing from the newest intact checkpoint in its directory, where one is left (where "
                  "none is, it starts over, and says so)", file=sys.stderr, flush=True)
            return None
        return super().restore(checkpoint_path, *args, **kwargs)


def _missing(checkpoint: tune.Checkpoint) -> bool:
    try:
        return checkpoint.filesystem.get_file_info(checkpoint.path).type == pyarrow.fs.FileType.NotFound
    except OSError:  # storage that cannot say: Tune's own check decides
        return False


mix_into_trials(trainable_fn, _TrialActor)


def _trial_storage():
    """(pyarrow filesystem, path) of the trial's directory in the sweep's storage
    (Tune's context: a developer API)."""
    try:
        storage = tune.get_context().get_storage()
        return storage.storage_filesystem, storage.trial_fs_path
    except Exception:  # another Ray: Tune's own checkpoint alone
        return None


def _checkpoints(work: str, storage):
    """The trial's checkpoints, to restore from in this order, each fetched into
    `work` when asked for: every one in the trial's directory in `storage`
    (`_trial_storage`'s), newest first, the one Tune hands over among them (first,
    where it is not there). One that cannot be fetched, say deleted, comes as a
    CheckpointError, which first_intact passes over as it does a damaged one: a
    damaged newest one then costs one checkpoint's interval, not the trial. Tune
    hands over the newest one its saved state knows, which is older than the
    trial where the driver was killed within seconds of a checkpoint (Tune saves
    its state every 10 s or so): a finished trial then trained its last stretch
    and reported its last evaluation again. A sweep whose Tune state was rebuilt
    (Tune hands nothing over) finds its trials' checkpoints here too."""
    given = tune.get_checkpoint()
    found = []
    if storage is not None:
        fs, trial_path = storage
        try:
            found = [info for info in fs.get_file_info(pyarrow.fs.FileSelector(trial_path, allow_not_found=True))
                     if info.type == pyarrow.fs.FileType.Directory and info.base_name.startswith("checkpoint_")]
        except OSError:
            found = []
        found.sort(key=lambda info: (info.mtime or 0, info.base_name), reverse=True)  # ties: the later number
    here = [info.path.rstrip("/") for info in found]
    if given is not None and given.path.rstrip("/") not in here:
        yield _fetched(given, os.path.join(work, "restored-0"))
    for i, info in enumerate(found, 1):
        is_given = given is not None and info.path.rstrip("/") == given.path.rstrip("/")
        yield _fetched(given if is_given else tune.Checkpoint(info.path, filesystem=storage[0]),
                       os.path.join(work, f"restored-{i}"))


def _fetched(checkpoint, where: str):
    """`checkpoint` in the local folder `where`, or a CheckpointError saying why it cannot be fetched."""
    try:
        return Path(checkpoint.to_directory(where))
    except (OSError, RuntimeError) as e:  # deleted or unreadable: passed over as a damaged one is
        return CheckpointError(f"{checkpoint.path} cannot be fetched ({type(e).__name__}: "
                               f"{str(e).splitlines()[0][:200]})")
