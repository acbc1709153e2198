"""The names of what a run directory holds, and which directory is which.

    <storage>/<sweep name>/           a sweep's run directory (`icr-sweep launch`)
        .icr-sweep.lock               the driver's lock, held while a launch or resume works on it
        icr-sweep.json                the spec as launched (resume reads it), and the resources; a URL's
                                      secret in it masked
        .icr-secrets.json             those secrets (a tracker's password, a storage's key): its owner's alone
        plan.json                     the trials the spec plans: names and configs (grid), or a count (Optuna)
        .icr-stop                     a stop request, which running trials see after their step
        optuna.db, mlflow.db          Optuna's studies and MLflow's runs, where they are the run's own
        experiment_state-*.json, ...  Ray Tune's record of the experiment (its trials' states)
        <trial name>/                 one trial's directory (`icr-sweep train --out` writes the same)
            params.json               {"trial": its config}
            result.json               one JSON row per report, appended
            result-before-rebuild.json  its rows from before the sweep was rebuilt (read first)
            result-damaged*.json      a result.json as it was before a repair
            result-before-start-over*.json  its rows from before it started over from sample 0 (its
                                      checkpoints gone): kept, never read as its results
            error.txt                 Tune's record of the error that ended it
            .icr-fails-again          a failure any retry repeats (a loss not finite before any update):
                                      Tune's retries end at once; resume clears it
            .icr-member-failed        a member of an array whose own loss went non-finite: its array trains
                                      on without it, and a resume leaves it failed (a member whose error.txt
                                      is its array's, a worker killed or a full disk, is retried with it)
            checkpoint_*/             its checkpoints
        array-<first member>/         a trial array's Tune trial (resources.fuse > 1: orchestrator/arrays.py):
            checkpoint_*/<member>/    its checkpoints, a member's in a folder named after it (its trial
                                      directory holds its params.json, naming the array, rows and errors)
        report.md, results.csv, best.csv, *.png   the report (`icr-sweep report` writes it anew)
        .icr-report.json              the names the report wrote: only those are ever replaced or removed
        .icr-driver.json              a remote run's: the driver that ended, and Tune's state it left (no lock there)
        .icr-wandb-failed             the first error that ended W&B's logging of a trial: the console said it once

A launch or a `train` writes only into a folder that holds none of these names, or
that is already a run of this tool (guard.py): nothing of a user's is overwritten.
"""

import os
from pathlib import Path
from typing import Optional

from orchestrator.storage import is_remote
from workloads.metrics import METRICS, PLOTTED
from workloads.naming import ARRAY_PREFIX, TRIAL_NAME

LOCK_FILE = ".icr-sweep.lock"
TRIAL_LOCK_FILE = ".icr-sweep-train.lock"  # `train --out`'s, in its trial directory
SPEC_FILE = "icr-sweep.json"
SECRETS_FILE = ".icr-secrets.json"  # the spec's URL secrets, kept from SPEC_FILE: readable by its owner alone
PLAN_FILE = "plan.json"
STOP_FILE = ".icr-stop"
OPTUNA_FILE = "optuna.db"
MLFLOW_FILE = "mlflow.db"
TUNE_STATE = "experiment_state-*.json"  # Tune's, newest last by name
TUNER_FILE = "tuner.pkl"  # Tune's pickle of the tuner, the run's config in it
# Tune's files that pickle the run's config or searcher (a tracker's or a storage's URI
# with its secret among them): readable by their owner alone (tune.owner_only, copy_whole).
TUNE_PICKLES = (TUNER_FILE, "searcher-state-*.pkl", "search_gen_state-*.json")
PARAMS_FILE = "params.json"
RESULTS_FILE = "result.json"
EARLIER_RESULTS = "result-before-rebuild.json"
DAMAGED_RESULTS = "result-damaged.json"
DAMAGED_GLOB = "result-damaged*.json"  # the first repair's, then result-damaged-2.json, ...
STARTED_OVER_FILE = "result-before-start-over.json"  # rows of a trial that started over from 0 (never read as its own)
STARTED_OVER = "started_over"  # a row's mark: its trial started over from 0, its earlier rows reached this many samples
ERROR_FILE = "error.txt"
FAILS_AGAIN = ".icr-fails-again"
MEMBER_FAILED = ".icr-member-failed"  # a member of an array that failed on its own arithmetic: it stays failed

SYNC_PART = ".icr-sync"  # the suffix of a file Tune's sync is writing into the run directory (unpromised.copy_whole)
REPORT_MANIFEST = ".icr-report.json"
DRIVER_FILE = ".icr-driver.json"
DRIVER_LOG = "icr-sweep.log"  # Ray's and Tune's log lines of each launch and resume (orchestrator/progress.py)
WANDB_FAILED = ".icr-wandb-failed"  # the first error of W&B's logging in this run: said once, and in the report
PLOT_FILES = tuple(f"{METRICS[m].plot}_*.png" for m in PLOTTED) + ("frontier.png", "frontier_robust.png",
                                                                  "lr_window_*.png")
REPORT_FILES = ("report.md", "findings.json", "results.csv", "best.csv", "frontier.csv", "frontier_robust.csv",
                *PLOT_FILES)

# What a launch writes into its run directory before its first trial starts: its own
# records (and their halves, where a write was cut short) and Ray Tune's (its storage
# marker, tuner and experiment state).
BEFORE_ANY_TRIAL = (LOCK_FILE, SPEC_FILE, SECRETS_FILE, f"{SECRETS_FILE}.tmp", PLAN_FILE, STOP_FILE, OPTUNA_FILE, MLFLOW_FILE, DRIVER_LOG,
                    f"{SPEC_FILE}.tmp", f"{PLAN_FILE}.tmp", ".validate_storage_marker", TUNER_FILE, TUNE_STATE,
                    f".{TUNE_STATE}.writing", "basic-variant-state-*.json", "search_gen_state-*.json",
                    "searcher-state-*.pkl", f".*{SYNC_PART}")  # .writing: Tune's state half written, a sync's half
# copy (orchestrator/unpromised.py)
# Every name a launch writes at the top of its run directory, then or later (trials'
# directories aside): a folder holding any of them is refused unless it is a run of this tool.
LAUNCH_WRITES = BEFORE_ANY_TRIAL + (f"{TUNE_STATE}.damaged*", f"{PLAN_FILE}.damaged*", REPORT_MANIFEST, DRIVER_FILE,
                                     WANDB_FAILED, *REPORT_FILES)
# The folders a launch makes at the top of its run directory: its trackers' (W&B's
# offline runs, where the spec logs to W&B into the run directory), by what each
# holds, and its trials' (named by workloads/naming.py) and its arrays'.
def tracker_folders() -> dict[str, tuple[str, ...]]:
    """Each tracker's folder at the top of a run directory, and what it writes in it
    (each tracker's `writes`: orchestrator/trackers/)."""
    from orchestrator.trackers import writes

    return writes()


def launch_folder(name: str, trackers: Optional[tuple[str, ...]] = None) -> bool:
    """Whether a folder of this name at the top of a run directory is one a launch
    makes: a trial's or an array's, or one of `trackers`' (those the spec turns on;
    None: every tracker's)."""
    trackers = tuple(tracker_folders()) if trackers is None else trackers
    return (name in trackers or TRIAL_NAME.fullmatch(name) is not None
            or (name.startswith(ARRAY_PREFIX) and TRIAL_NAME.fullmatch(name[len(ARRAY_PREFIX):]) is not None))


def launch_entries(folder: Path, trackers: tuple[str, ...]) -> Optional[list[str]]:
    """What of `folder`, at the top of a run directory and new since a launch began,
    the launch wrote: where it is named as the launch names its folders
    (`launch_folder`, with the trackers the spec turns on), its entries named as the
    launch (or the tracker) names what it writes there; None for any other folder.
    A folder of that name that a user made meanwhile, or a file of theirs in it, is
    not the launch's (issue 83, class 5: an unstarted launch's discard removed a
    user's wandb/ folder and its files though the spec had no W&B)."""
    import fnmatch

    name = folder.name
    if not launch_folder(name, trackers):
        return None
    own = tracker_folders()[name] if name in trackers else SWEEP_TRIAL_WRITES
    return sorted(entry for entry in os.listdir(folder) if any(fnmatch.fnmatch(entry, p) for p in own))


# Every name `train --out` (and `report` of that trial) writes into a trial's directory.
TRIAL_WRITES = (PARAMS_FILE, RESULTS_FILE, "result.tmp", EARLIER_RESULTS, DAMAGED_GLOB, "result-before-start-over*.json",
                ERROR_FILE, FAILS_AGAIN, MEMBER_FAILED,
                STOP_FILE, "checkpoint", "checkpoint_*", REPORT_MANIFEST, *REPORT_FILES)
# ... and what a sweep's trial directory holds besides: Tune's pickled config, the
# progress and TensorBoard loggers' files, a file half copied by Tune's sync.
SWEEP_TRIAL_WRITES = TRIAL_WRITES + ("params.pkl", "progress.csv", "events.out.tfevents.*", f".*{SYNC_PART}")


def is_trial_dir(path: Path) -> bool:
    """Whether `path` is one trial's directory (params.json inside) rather than a run's."""
    return (Path(path) / PARAMS_FILE).is_file()


SMALL_TEXT_BYTES = 1 << 16


def small_text(path: Path, limit: int = SMALL_TEXT_BYTES) -> str:
    """A small text file of a trial (its error, say), its last `limit` bytes at most
    (an error file of 85 MB made `status --format json` print all of it): "" where
    it is absent or cannot be read."""
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            size = f.tell()
            f.seek(max(0, size - limit))
            return f.read().decode(errors="replace")
    except OSError:
        return ""


def one_line(text: str, limit: int = 1000) -> str:
    """A message of a trial's file for a table or JSON: at most `limit` characters."""
    return text if len(text) <= limit else f"{text[:limit]} ... ({len(text) - limit:,} more characters)"


def trials_home(path: Path) -> Path:
    """The directory holding the trials' directories: the run's, or for one trial's
    directory (`train --out`) its parent."""
    path = Path(path)
    return path.parent if is_trial_dir(path) else path


def trial_names(run_dir: Path) -> set[str]:
    """The trials that have a directory with a config or results in `run_dir`."""
    return {p.parent.name for pattern in (PARAMS_FILE, RESULTS_FILE) for p in Path(run_dir).glob(f"*/{pattern}")}


def named_like(folder: Path, patterns: tuple[str, ...]) -> list[str]:
    """The entries of `folder` whose names match any of `patterns` (globs), sorted."""
    return sorted({p.name for pattern in patterns for p in Path(folder).glob(pattern)})


def free_path(folder: Path, name: str) -> Path:
    """`folder/name`, or where that is taken, the first free name-2, name-3, ... (the
    number before the last suffix): what is set aside never replaces another file."""
    taken = set(os.listdir(folder)) if Path(folder).is_dir() else set()
    return Path(folder, free_name(taken, name))


def free_name(taken: set[str], name: str) -> str:
    """`name`, or where it is in `taken`, the first of name-2, name-3, ... that is not."""
    stem, suffix = Path(name).stem, Path(name).suffix
    target, k = name, 2
    while target in taken:
        target, k = f"{stem}-{k}{suffix}", k + 1
    return target


def sweep_above(path: Path) -> Optional[Path]:
    """The sweep run directory that `path` is, or lies inside (it holds the spec
    record or the driver lock); None when there is none."""
    for folder in (path, *path.parents):
        if (folder / SPEC_FILE).is_file() or (folder / LOCK_FILE).is_file():
            return folder
    return None


def sqlite_url(run_dir: str, file: str) -> Optional[str]:
    """The URL of one of the run's own SQLite files (OPTUNA_FILE, MLFLOW_FILE) in a
    local run directory; None for a remote one (SQLite needs a local file)."""
    return None if is_remote(run_dir) else f"sqlite:///{Path(run_dir).resolve() / file}"
