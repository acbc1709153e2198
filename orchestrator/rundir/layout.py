"""The names of what a run directory holds, and which directory is which.

    <storage>/<sweep name>/           a sweep's run directory (`icr-sweep launch`)
        .icr-sweep.lock               the driver's lock, held while a launch or resume works on it
        icr-sweep.json                the spec as launched (resume reads it), and the resources
        plan.json                     the trials the spec plans: names and configs (grid), or a count (Optuna)
        .icr-stop                     a stop request, which running trials see after their step
        optuna.db, mlflow.db          Optuna's studies and MLflow's runs, where they are the run's own
        experiment_state-*.json, ...  Ray Tune's record of the experiment (its trials' states)
        <trial name>/                 one trial's directory (`icr-sweep train --out` writes the same)
            params.json               {"trial": its config}
            result.json               one JSON row per report, appended
            result-before-rebuild.json  its rows from before the sweep was rebuilt (read first)
            result-damaged*.json      a result.json as it was before a repair
            error.txt                 Tune's record of the error that ended it
            .icr-fails-again          a failure any retry repeats (a loss not finite before any update):
                                      Tune's retries end at once; resume clears it
            checkpoint_*/             its checkpoints
"""

from pathlib import Path
from typing import Optional

from orchestrator.storage import is_remote

LOCK_FILE = ".icr-sweep.lock"
TRIAL_LOCK_FILE = ".icr-sweep-train.lock"  # `train --out`'s, in its trial directory
SPEC_FILE = "icr-sweep.json"
PLAN_FILE = "plan.json"
STOP_FILE = ".icr-stop"
OPTUNA_FILE = "optuna.db"
MLFLOW_FILE = "mlflow.db"
TUNE_STATE = "experiment_state-*.json"  # Tune's, newest last by name
PARAMS_FILE = "params.json"
RESULTS_FILE = "result.json"
EARLIER_RESULTS = "result-before-rebuild.json"
DAMAGED_RESULTS = "result-damaged.json"
DAMAGED_GLOB = "result-damaged*.json"  # the first repair's, then result-damaged-2.json, ...
ERROR_FILE = "error.txt"
FAILS_AGAIN = ".icr-fails-again"

# What a launch writes into its run directory before its first trial starts: its own
# records and Ray Tune's (its storage marker, tuner and experiment state).
BEFORE_ANY_TRIAL = (LOCK_FILE, SPEC_FILE, PLAN_FILE, STOP_FILE, OPTUNA_FILE, MLFLOW_FILE, ".validate_storage_marker",
                    "tuner.pkl", TUNE_STATE, "basic-variant-state-*.json", "searcher-state-*.pkl")


def is_trial_dir(path: Path) -> bool:
    """Whether `path` is one trial's directory (params.json inside) rather than a run's."""
    return (Path(path) / PARAMS_FILE).is_file()


def trials_home(path: Path) -> Path:
    """The directory holding the trials' directories: the run's, or for one trial's
    directory (`train --out`) its parent."""
    path = Path(path)
    return path.parent if is_trial_dir(path) else path


def trial_names(run_dir: Path) -> set[str]:
    """The trials that have a directory with a config or results in `run_dir`."""
    return {p.parent.name for pattern in (PARAMS_FILE, RESULTS_FILE) for p in Path(run_dir).glob(f"*/{pattern}")}


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
