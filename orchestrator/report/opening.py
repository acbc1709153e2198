"""The commands that open a run in each tool it logged to (a notebook, TensorBoard,
MLflow, W&B, optuna-dashboard): the console's last lines and report.md's first."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Optional

from orchestrator.rundir import MLFLOW_FILE, OPTUNA_FILE, WANDB_FAILED, Run, small_text
from orchestrator.secrets import command, redact


def open_commands(run: Run, run_dir: str, local: Path) -> list[str]:
    """For each tool this run logged to, the one command (or address) that opens it
    on this run: what the console's last lines and report.md's first say. `run_dir`
    is the run directory as the user names it (a path or a URI); its files are
    looked for in `local`, where the report is written from."""
    spec, local = run.spec or {}, Path(local)
    tracking, search = spec.get("tracking") or {}, spec.get("search") or {}
    where = str(run_dir).rstrip("/")
    out = [f"a notebook: `from icr_sweep import load_run; load_run({where!r})`"]
    if tracking.get("tensorboard", True) and next(local.glob("*/events.out.tfevents.*"), None):
        out.append(f"TensorBoard: `{command('tensorboard', '--logdir', where)}`{_missing('tensorboard')}")
    mlflow = tracking.get("mlflow")
    if mlflow is not None:
        uri = mlflow.get("tracking_uri") or f"sqlite:///{where}/{MLFLOW_FILE}"
        experiment = mlflow.get("experiment") or spec.get("name", "")
        number = None if mlflow.get("tracking_uri") else _mlflow_experiment_id(local / MLFLOW_FILE, experiment)
        # MLflow 3 opens an experiment in its GenAI view (its runs table without a parameter or metric
        # column); these query parameters open the model-training view, every metric charted (issue 53).
        runs = (f", then http://127.0.0.1:5000/#/experiments/{number}/runs?workflowType=machine_learning"
                "&compareRunsMode=CHART (its runs, charted)" if number else "")
        opens = redact(uri) if uri.startswith("http") else command("mlflow", "ui", "--backend-store-uri", uri)
        out.append(f"MLflow: `{opens}`{runs} "
                   f"(experiment {experiment}; in MLflow 3's own views choose \"Model training\")"
                   + ("" if uri.startswith("http") else _missing("mlflow")))
    wandb = tracking.get("wandb")
    if wandb:
        if wandb.get("mode", "offline") == "offline":
            folder = f"{wandb.get('dir') or where}/wandb"
            out.append(f"W&B (offline): `{command('wandb', 'sync', folder)}/offline-run-*`, then the project "
                       f"{wandb['project']}; here, without upload: `{command('wandb', 'beta', 'leet', folder)}`"
                       + _missing("wandb"))
        else:
            entity = f"{wandb['entity']}/" if wandb.get("entity") else ""
            from orchestrator.tracking import wandb_app

            out.append(f"W&B: {wandb_app()}/{entity}{wandb['project']} (group {wandb.get('group') or spec.get('name')})")
        failed = small_text(local / WANDB_FAILED).strip()
        if failed:
            out[-1] += f"; W&B stopped logging some of its trials: {failed}"
    if search.get("method") == "optuna":
        storage = search.get("storage") or (f"sqlite:///{where}/{OPTUNA_FILE}" if (local / OPTUNA_FILE).exists() else None)
        if storage:
            out.append(f"Optuna: `{command('optuna-dashboard', storage)}`{_missing('optuna-dashboard')}")
    return out


# What installs each command open_commands prints, and how to tell it is here: MLflow's
# UI is not in mlflow-skinny (the project's tracker extra), whose `mlflow ui` serves no page.
_INSTALLS = {"tensorboard": "tensorboard", "mlflow": "mlflow", "wandb": "wandb", "optuna-dashboard": "optuna-dashboard"}


def _missing(tool: str) -> str:
    """'' where this environment can run the command that opens `tool`; else what to install."""
    import importlib.util
    import shutil

    here = shutil.which(tool) is not None
    if here and tool == "mlflow":
        spec = importlib.util.find_spec("mlflow")
        here = bool(spec and spec.origin and (Path(spec.origin).parent / "server" / "js" / "build").is_dir())
    return "" if here else f" (not installed here: `pip install {_INSTALLS[tool]}` first)"


def _mlflow_experiment_id(db: Path, name: str) -> Optional[str]:
    """The id of experiment `name` in an MLflow SQLite store (None where it cannot be read)."""
    import sqlite3

    if not db.is_file():
        return None
    try:
        with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as con:
            row = con.execute("SELECT experiment_id FROM experiments WHERE name = ?", (name,)).fetchone()
    except sqlite3.Error:
        return None
    return str(row[0]) if row else None
