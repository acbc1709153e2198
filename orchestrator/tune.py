"""Runs a sweep spec on Ray Tune: one trial per resolved config, checkpointed at
every evaluation, retried from its checkpoint when it crashes, resumable as a whole."""

import json
import math
import os
import pickle
import tempfile
from pathlib import Path
from typing import Optional

import ray
import torch
from optuna.distributions import FloatDistribution
from ray import tune
from ray.tune.search import Searcher
from ray.tune.search.optuna import OptunaSearch

from orchestrator.spec import SPEC_FILE, SweepSpec, cells, expand, trial_for
from workloads.config import TrialConfig
from workloads.train import run_trial


def _trainable(config: dict) -> None:
    """One trial inside a Ray worker: resumes from Tune's checkpoint when there is one."""
    cpus = tune.get_context().get_trial_resources().required_resources.get("CPU", 1)
    torch.set_num_threads(max(1, int(cpus)))
    with tempfile.TemporaryDirectory(prefix="icr-trial-") as work:
        resume = None
        checkpoint = tune.get_checkpoint()
        if checkpoint is not None:
            resume = Path(checkpoint.to_directory(os.path.join(work, "restored")))

        def report(metrics: dict, checkpoint_dir: Optional[Path]) -> None:
            # Tune stores the trial config beside every result (params.json, result.json).
            flat = {k: (math.nan if v is None else v) for k, v in metrics.items() if k != "config"}
            tune.report(flat, checkpoint=tune.Checkpoint.from_directory(str(checkpoint_dir)))

        run_trial(config["trial"], report=report, checkpoint_dir=Path(work) / "checkpoint", resume_from=resume)


def _cost(trial: TrialConfig) -> float:
    """A rough relative cost, to start the longest trials first: a sweep whose
    longest trial starts last ends with one trial running alone."""
    from workloads.tasks.istree_kernels import SETUPS, max_length

    m = trial.model
    mamba_factor = 3 if len(m.attn_layer_idx) < m.n_layers else 1  # the CPU scan's measured premium
    return trial.train.samples * max_length(trial.task.n, SETUPS.index(trial.task.setup)) * m.d_model * m.n_layers * mamba_factor


def _trial_name(trial) -> str:
    name = TrialConfig.model_validate(trial.config["trial"]).name
    # Optuna's learning rates can round to the same name: keep directories apart.
    return name if trial.config.get("grid", True) else f"{name}-{trial.trial_id}"


class CellwiseOptuna(Searcher):
    """One Optuna study per grid cell (arch, setup, size, n, seed), each given the
    learning-rate distribution of its arch and `num_samples` trials, so that each
    cell gets its own best learning rate, as the paper's sweep does."""

    def __init__(self, spec: SweepSpec):
        search = spec.search
        super().__init__(metric=search.metric, mode=search.mode)
        self.spec = spec
        self.budget = search.num_samples
        self.studies, self.used, self.owner = {}, {}, {}
        for i, cell in enumerate(cells(spec)):
            dist = getattr(spec.lr, cell[0])
            space = {"lr": FloatDistribution(dist.low, dist.high, log=dist.distribution == "loguniform")}
            self.studies[cell] = OptunaSearch(space=space, metric=search.metric, mode=search.mode, seed=i)
            self.used[cell] = 0

    def suggest(self, trial_id: str):
        open_cells = [c for c in self.studies if self.used[c] < self.budget]
        if not open_cells:
            return Searcher.FINISHED
        cell = min(open_cells, key=lambda c: self.used[c])  # round robin over cells
        suggestion = self.studies[cell].suggest(trial_id)
        if suggestion is None:
            return None
        self.used[cell] += 1
        self.owner[trial_id] = cell
        arch, setup, size, n, seed = cell
        trial = trial_for(self.spec, arch, setup, size, n, seed, suggestion["lr"])
        return {"trial": trial.model_dump(mode="json"), "grid": False}

    def on_trial_result(self, trial_id: str, result: dict) -> None:
        if trial_id in self.owner:
            self.studies[self.owner[trial_id]].on_trial_result(trial_id, result)

    def on_trial_complete(self, trial_id: str, result: Optional[dict] = None, error: bool = False) -> None:
        if trial_id in self.owner:
            self.studies[self.owner.pop(trial_id)].on_trial_complete(trial_id, result, error)

    def save(self, checkpoint_path: str) -> None:
        # OptunaSearch's own save() persists its __dict__ (the in-memory study with it).
        state = {"used": self.used, "owner": self.owner, "studies": {c: s.__dict__.copy() for c, s in self.studies.items()}}
        with open(checkpoint_path, "wb") as f:
            pickle.dump(state, f)

    def restore(self, checkpoint_path: str) -> None:
        with open(checkpoint_path, "rb") as f:
            state = pickle.load(f)
        self.used, self.owner = state["used"], state["owner"]
        for cell, study_state in state["studies"].items():
            self.studies[cell].__dict__.update(study_state)


def start_ray(spec: SweepSpec, address: Optional[str], temp_dir: Optional[str], dashboard_host: str,
              dashboard_port: int, num_cpus: Optional[int]):
    """Attaches to a cluster at `address`, or starts an embedded local Ray with its dashboard."""
    # Tune gives a trial its CPUs through a placement group and runs the trial in a
    # thread of its own, so neither Ray nor torch.set_num_threads there bounds the
    # OpenMP and numba pools: without this, a 1-CPU trial ran 3.6x slower, its
    # extra threads spinning against the other trials.
    threads = str(max(1, int(spec.resources.cpus_per_trial)))
    runtime_env = {"env_vars": {"OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads, "NUMBA_NUM_THREADS": threads}}
    if address:
        return ray.init(address=address, runtime_env=runtime_env, log_to_driver=True)
    return ray.init(
        include_dashboard=True, dashboard_host=dashboard_host, dashboard_port=dashboard_port,
        num_cpus=num_cpus, _temp_dir=temp_dir, runtime_env=runtime_env, log_to_driver=True,
    )


def trial_resources(spec: SweepSpec) -> tuple[dict, str]:
    """Ray resources per trial, and a note on how trials will run."""
    res = spec.resources
    gpus_in_cluster = ray.cluster_resources().get("GPU", 0)
    if res.device == "cpu" or (res.device == "auto" and gpus_in_cluster == 0):
        return {"cpu": res.cpus_per_trial, "gpu": 0}, f"no GPU in the cluster: trials run on CPU ({res.cpus_per_trial:g} CPU each)" if res.device == "auto" else "device: cpu"
    return {"cpu": res.cpus_per_trial, "gpu": res.gpus_per_trial}, f"{res.gpus_per_trial:g} GPU and {res.cpus_per_trial:g} CPU per trial"


def _tuner_parts(spec: SweepSpec, resources: dict):
    trainable = tune.with_resources(_trainable, resources)
    # Tune's newer console output prints every config key (here: the whole nested
    # trial config) as a column; the classic reporter lets us pick the metrics.
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
    reporter = tune.CLIReporter(
        metric_columns={"samples": "samples", "train_loss": "train_loss", "val_exact_match": "exact_match",
                        "gen_accuracy": "gen_acc", "samples_per_s": "samples/s"},
        parameter_columns={"trial/train/lr": "lr"}, max_report_frequency=30,
    )
    run_config = tune.RunConfig(
        progress_reporter=reporter,
        name=spec.name,
        storage_path=spec.storage_uri(),
        failure_config=tune.FailureConfig(max_failures=spec.resources.max_failures),
        checkpoint_config=tune.CheckpointConfig(num_to_keep=2),
        verbose=1,
    )
    return trainable, run_config


def launch(spec: SweepSpec, resources: dict) -> str:
    """Runs every trial of `spec`; returns the run directory. Ray must be initialised."""
    run_dir = spec.run_dir()
    if "://" not in run_dir:
        Path(run_dir).mkdir(parents=True, exist_ok=True)
        Path(run_dir, SPEC_FILE).write_text(json.dumps({"spec": spec.model_dump(mode="json"), "resources": resources}, indent=1))
    trainable, run_config = _tuner_parts(spec, resources)
    if spec.search.method == "grid":
        trials = [t.model_dump(mode="json") for t in sorted(expand(spec), key=_cost, reverse=True)]
        param_space = {"trial": tune.grid_search(trials)}
        tune_config = tune.TuneConfig(num_samples=1, max_concurrent_trials=spec.resources.max_concurrent,
                                      trial_name_creator=_trial_name, trial_dirname_creator=_trial_name)
    else:
        param_space = {}
        tune_config = tune.TuneConfig(
            search_alg=CellwiseOptuna(spec), num_samples=len(cells(spec)) * spec.search.num_samples,
            max_concurrent_trials=spec.resources.max_concurrent,
            trial_name_creator=_trial_name, trial_dirname_creator=_trial_name,
        )
    tuner = tune.Tuner(trainable, param_space=param_space, tune_config=tune_config, run_config=run_config)
    tuner.fit()
    return run_dir


def resume(run_dir: str, spec: SweepSpec, resources: dict) -> str:
    """Continues an interrupted sweep: finished trials stay, interrupted ones continue
    from their last checkpoint, errored ones are retried from theirs."""
    trainable, _ = _tuner_parts(spec, resources)
    tuner = tune.Tuner.restore(run_dir, trainable=trainable, resume_unfinished=True, resume_errored=True)
    tuner.fit()
    return run_dir


def can_resume(run_dir: str) -> bool:
    return tune.Tuner.can_restore(run_dir)
