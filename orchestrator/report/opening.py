"""The commands that open a run in each tool it logged to (a notebook, TensorBoard,
MLflow, W&B, optuna-dashboard): the console's last lines and report.md's first."""

from __future__ import annotations

from pathlib import Path

from orchestrator.rundir import OPTUNA_FILE, Run
from orchestrator.secrets import command


def open_commands(run: Run, run_dir: str, local: Path) -> list[str]:
    """For each tool this run logged to, the one command (or address) that opens it
    on this run: what the console's last lines and report.md's first say. `run_dir`
    is the run directory as the user names it (a path or a URI); its files are
    looked for in `local`, where the report is written from. Each tracker says its
    own line (orchestrator/trackers/)."""
    from orchestrator.shell import missing
    from orchestrator.trackers import opens

    spec, local = run.spec or {}, Path(local)
    search = spec.get("search") or {}
    where = str(run_dir).rstrip("/")
    out = [f"a notebook: `from icr_sweep import load_run; load_run({where!r})`", *opens(spec, where, local)]
    if search.get("method") == "optuna":
        storage = search.get("storage") or (f"sqlite:///{where}/{OPTUNA_FILE}" if (local / OPTUNA_FILE).exists() else None)
        if storage:
            out.append(f"Optuna: `{command('optuna-dashboard', storage)}`{missing('optuna-dashboard')}")
    return out
