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

import os
import sys
from pathlib import Path

import pandas as pd
import ray.cloudpickle as cloudpickle
from ray.air.integrations.mlflow import MLflowLoggerCallback
from ray.air.integrations.wandb import WandbLoggerCallback, _WandbLoggingActor
from ray.tune.logger import CSVLoggerCallback, JsonLoggerCallback
from ray.tune.logger.tensorboardx import TBXLoggerCallback
from ray.tune.result import EXPR_PARAM_PICKLE_FILE, EXPR_RESULT_FILE, TRAINING_ITERATION
from ray.tune.utils.util import SafeFallbackEncoder

from orchestrator.rundir import TrialFiles
from orchestrator.spec import SweepSpec
from orchestrator.storage import answer_timeout, is_remote
from workloads.config import TRIAL_IDS, TrialConfig
from workloads.metrics import HELD_OUT, METRICS, measured

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


TRACKED = {key: metric_name(key) for key in ("train_loss", "lr", "samples_per_s", "tokens_per_s", *METRICS)}


def tracked_metrics(result: dict) -> dict:
    """The figures of a result row under their short names, with the samples (the
    step); what was not measured (NaN, None) is left out."""
    figures = measured(result, (STEP, *TRACKED))
    return {TRACKED.get(key, key): value for key, value in figures.items()}


def tracked_params(trial: dict, swept: tuple[str, ...] = ()) -> dict:
    """The trial's config (TrialConfig's JSON) as one flat dict: the ids, then the
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
    out = {short: flat.pop(key) for key, short in TRIAL_IDS.items()}
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


def swept_fields(spec: SweepSpec) -> tuple[str, ...]:
    """The task's and model's field names that the spec's axes sweep."""
    model = []
    for key, value in spec.axes.model.items():
        model += list(value) if isinstance(value, dict) else [key]
    return tuple(dict.fromkeys([*spec.axes.task, *model]))


def _params(trial, swept) -> dict:
    return tracked_params(trial.config["trial"], swept)


class _WandbActor(_WandbLoggingActor):
    """W&B's logging actor: samples as the step of every metric (W&B's own
    define_metric), each row's figures under their short names."""

    def run(self):
        try:
            return super().run()
        finally:
            # W&B's service process otherwise ends with the actor's, before its exit
            # hook tells it to: a ConnectionResetError traceback on a clean run.
            self._wandb.teardown()

    def _handle_result(self, result: dict) -> tuple[dict, dict]:
        if not getattr(self, "_defined", False):
            self._wandb.define_metric(STEP)
            self._wandb.define_metric("train/*", step_metric=STEP)
            self._wandb.define_metric("val/*", step_metric=STEP)
            self._defined = True
        return tracked_metrics(result), {}


class Wandb(WandbLoggerCallback):
    """One W&B run per trial, named after it (its id too: an offline run's folder,
    offline-run-<time>-<trial>-<tune id>, is found by the trial's name), with the
    flat config."""

    _logger_actor_cls = _WandbActor

    def __init__(self, *args, swept: tuple[str, ...] = (), **kwargs):
        super().__init__(*args, **kwargs)
        self.swept = swept

    def log_trial_start(self, trial) -> None:
        name = str(trial)
        run_id = f"{name.replace('.', '_')}-{trial.trial_id}"  # W&B ids take no dots
        # W&B's own lines (its banner, sync hints, a summary per run) stay in its
        # logs under the run directory: the console says where they are once.
        self._start_logging_actor(trial, [], id=run_id, name=name, resume=False, reinit="finish_previous",
                                  allow_val_change=True, group=self.group or trial.experiment_dir_name,
                                  project=self.project, config=_params(trial, self.swept),
                                  settings={"silent": True}, **self.kwargs)


def _or_off(method):
    """Runs a tracker callback's `method` unless the tracker was turned off; the
    first failure (a server that stopped answering, whose requests end after the
    wait) turns it off for the rest of the sweep, said once: a tracker costs its
    logging, never the run (Tune ends the sweep on a callback's exception)."""
    import functools

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


class MLflow(MLflowLoggerCallback):
    """One MLflow run per trial: the flat config as its params, each row's figures
    as metrics at its samples. MLflow logs from the driver, so a server that stops
    answering would hold the sweep (MLflow waits 120 s per request and retries 7
    times): its requests wait ICR_STORAGE_TIMEOUT_S (20 s) once, unless
    MLFLOW_HTTP_REQUEST_TIMEOUT or _MAX_RETRIES say otherwise, and a failure turns
    MLflow off for the rest of the sweep."""

    def __init__(self, *args, swept: tuple[str, ...] = (), **kwargs):
        super().__init__(*args, **kwargs)
        self.swept = swept
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", str(max(1, round(answer_timeout()))))
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")

    @_or_off
    def setup(self, *args, **kwargs):
        return super().setup(*args, **kwargs)

    @_or_off
    def log_trial_start(self, trial) -> None:
        if trial not in self._trial_runs:
            run = self.mlflow_util.start_run(tags={**self.tags, "trial_name": str(trial)}, run_name=str(trial))
            self._trial_runs[trial] = run.info.run_id
            self.mlflow_util.log_params(run_id=self._trial_runs[trial], params_to_log=_params(trial, self.swept))

    @_or_off
    def log_trial_result(self, iteration: int, trial, result: dict) -> None:
        if trial not in self._trial_runs:
            self.log_trial_start(trial)
        figures = tracked_metrics(result)
        step = int(figures.pop(STEP, 0))
        self.mlflow_util.log_metrics(run_id=self._trial_runs[trial], metrics_to_log=figures, step=step)

    @_or_off
    def log_trial_end(self, trial, failed: bool = False) -> None:
        self.mlflow_util.end_run(run_id=self._trial_runs[trial], status="FAILED" if failed else "FINISHED")


class TensorBoard(TBXLoggerCallback):
    """TensorBoard files in each trial's directory (Tune's writer): the figures under
    their short names at the trial's samples, and HParams over the flat config."""

    def __init__(self, swept: tuple[str, ...] = ()):
        super().__init__()
        self.swept = swept

    def log_trial_result(self, iteration: int, trial, result: dict) -> None:
        if trial not in self._trial_writer:
            self.log_trial_start(trial)
        figures = tracked_metrics(result)
        step = int(figures.pop(STEP, result[TRAINING_ITERATION]))
        for name, value in figures.items():
            self._trial_writer[trial].add_scalar(name, value, global_step=step)
        self._trial_result[trial] = {**self._trial_result[trial], **figures}  # HParams' metrics: the latest of each
        self._trial_writer[trial].flush()

    def _try_log_hparams(self, trial, result: dict) -> None:
        from tensorboardX.summary import hparams

        params = {k: v for k, v in _params(trial, self.swept).items() if v is not None}  # TensorBoard takes no None
        for summary in hparams(hparam_dict=params, metric_dict=result):
            self._trial_writer[trial].file_writer.add_summary(summary)


class TrialFilesCallback(JsonLoggerCallback):
    """A sweep trial's params.json and result.json, written by the run directory's
    own writer (`TrialFiles`, which `train --out` uses too) where Tune's JSON logger
    writes them; Tune's pickled config (params.pkl) and its restore of result.json
    from remote storage stay Tune's. Being a JsonLoggerCallback, it keeps Tune from
    adding its own."""

    def log_trial_start(self, trial) -> None:
        self.update_config(trial, trial.config)
        trial.init_local_path()
        self._restore_from_remote(EXPR_RESULT_FILE, trial)
        self._trial_files[trial] = TrialFiles(trial.local_path, encoder=SafeFallbackEncoder)

    def log_trial_result(self, iteration: int, trial, result: dict) -> None:
        if trial not in self._trial_files:
            self.log_trial_start(trial)
        self._trial_files[trial].append(result)

    def log_trial_end(self, trial, failed: bool = False) -> None:
        self._trial_files.pop(trial, None)

    def update_config(self, trial, config: dict) -> None:
        self._trial_configs[trial] = config
        TrialFiles(trial.local_path, encoder=SafeFallbackEncoder).write_config(config)
        with open(Path(trial.local_path, EXPR_PARAM_PICKLE_FILE), "wb") as f:
            cloudpickle.dump(config, f)


def trackers(spec: SweepSpec, mlflow_uri) -> list:
    """Ray Tune's logger callbacks for the trackers `spec.tracking` turns on, and
    Tune's JSON and CSV results (what status and report read) always."""
    tracking, run_dir, swept = spec.tracking, spec.run_dir(), swept_fields(spec)
    # Tune adds its own JSON, CSV and TensorBoard loggers unless told not to.
    os.environ["TUNE_DISABLE_AUTO_CALLBACK_LOGGERS"] = "1"
    out = [TrialFilesCallback(), CSVLoggerCallback()]
    if tracking.tensorboard:
        out.append(TensorBoard(swept))
    if tracking.wandb:
        w = tracking.wandb
        if w.mode == "offline":
            os.environ["WANDB_MODE"] = "offline"  # the callback asks for no API key then
        where = w.dir or (None if is_remote(run_dir) else str(Path(run_dir).resolve()))
        options = {k: v for k, v in dict(entity=w.entity, dir=where).items() if v}
        # W&B logs from actors of its own, so a server that stops answering holds no
        # trial; at the end Tune waits upload_timeout for them (30 min by default),
        # then ends them: their runs stay in W&B's local folder for `wandb sync`.
        out.append(Wandb(project=w.project, group=w.group or spec.name, mode=w.mode, log_config=False, swept=swept,
                         upload_timeout=answer_timeout(), **options))
    if tracking.mlflow:
        out.append(MLflow(tracking_uri=mlflow_uri, experiment_name=tracking.mlflow.experiment or spec.name,
                          tags={"sweep": spec.name}, swept=swept))
    return out
