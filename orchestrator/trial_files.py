"""The run's own files of each sweep trial, written as Ray Tune's JSON and CSV
loggers would write them: params.json and result.json by the run directory's
writer (`TrialFiles`, which `train --out` uses too), Tune's pickled config, and
progress.csv. Not a tracker: status, report and resume read these."""

from __future__ import annotations

import sys
from pathlib import Path

import ray.cloudpickle as cloudpickle
from ray.tune.logger import CSVLoggerCallback, JsonLoggerCallback
from ray.tune.result import EXPR_PARAM_PICKLE_FILE, EXPR_RESULT_FILE
from ray.tune.utils.util import SafeFallbackEncoder

from orchestrator.arrays import array_of
from orchestrator.rundir import ERROR_FILE, MEMBER_FAILED, STARTED_OVER, TrialFiles, set_aside_stored_rows
from orchestrator.trackers.common import Member, fetch_stored, per_member

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
        fetch_stored(trial, EXPR_RESULT_FILE)
        self.files[trial] = TrialFiles(trial.local_path, encoder=SafeFallbackEncoder)

    def log_trial_result(self, iteration: int, trial, result: dict) -> None:
        if trial not in self.files:
            self.log_trial_start(trial)
        if result.get(STARTED_OVER):  # its first row since it started over from sample 0 (orchestrator/worker.py)
            set_aside_for_start_over(trial, self.files[trial])
        self.files[trial].append(result)

    def log_trial_end(self, trial, failed: bool = False) -> None:
        self.files.pop(trial, None)

    def member_failed(self, member: Member, error: str, own: bool) -> None:
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


def set_aside_for_start_over(trial, files: TrialFiles) -> None:
    """A trial that starts over from sample 0: its earlier rows set aside where the
    sweep keeps them (rundir.set_aside_stored_rows), the local copies dropped."""
    problem = set_aside_stored_rows(trial.storage.storage_filesystem, trial.storage.trial_fs_path, files)
    if problem:
        print(f"warning: {trial}: its rows from before it started over could not be set aside in storage "
              f"({problem}); its new rows replace them there", file=sys.stderr, flush=True)
