"""MLflow: one run per trial, through MLflow's own client, in the run directory's
SQLite store (mlflow.db) or an MLflow server's."""

from __future__ import annotations

import contextlib
import functools
import os
from pathlib import Path
from typing import Optional
from urllib.parse import urlsplit

from pydantic import Field, field_validator

from orchestrator.secrets import NotAURL, ask, command, parts, redact, where_to
from orchestrator.shell import missing
from orchestrator.spec.section import Section
from orchestrator.storage import answer_timeout
from orchestrator.trackers import Launch, Shown, Tracker, TrackerError, made_on_first_use, register

# MLflow's tracking stores (its REST client and its SQLAlchemy store's databases).
MLFLOW_SCHEMES = ("http", "https", "databricks", "sqlite", "postgresql", "mysql", "mssql")


class MlflowSpec(Section):
    tracking_uri: Optional[str] = Field(
        None, description="an MLflow tracking URI (http://host:5000, sqlite:////abs/path.db); "
        "default: sqlite:///<run directory>/mlflow.db, for a local run directory")

    @field_validator("tracking_uri")
    @classmethod
    def _a_uri_mlflow_opens(cls, value):
        if value is None:  # the default: the run directory's own mlflow.db
            return value
        scheme = value.partition("://")[0] if "://" in value else ""
        if scheme in ("", "file"):
            raise ValueError(f"{value!r} names MLflow's file store, which is in maintenance mode and refuses to open; "
                             "use sqlite:////abs/path.db or an MLflow server's http://host:5000")
        if scheme.split("+")[0] not in MLFLOW_SCHEMES:  # postgresql+psycopg2:// names its driver
            raise ValueError(f"{value!r}: unknown scheme {scheme}://; MLflow opens {', '.join(s + '://' for s in MLFLOW_SCHEMES)}")
        return value
    experiment: Optional[str] = Field(None, description="default: the sweep's name")


# The experiment's runs table as the printed address opens it: MLflow's shared view
# (an experiment tag its UI reads for `viewStateShareKey`), as MLflow 3.17's UI shows it
# (issue 79: its Run Name column, 170 px wide, cut every name before the seed, and its
# charts drew the first 10 runs alone).
VIEW = "icr-sweep"
VIEW_TAG = "mlflow.sharedViewState." + VIEW
VIEW_COLUMNS = ("params.`model`", "params.`setup`", "params.`n`", "params.`seed`", "params.`lr`",
                "metrics.`val/exact_match`")
RUN_NAME_COLUMN = "attributes.`Run Name`"
PX_PER_CHAR, NAME_PADDING_PX = 7, 60  # the Run Name column's width for a name of k characters: 7k + 60 px


def shared_view(longest_name: int) -> str:
    """The shared view's JSON: the identity and exact match as columns, the Run Name
    column wide enough for the longest trial name, every run charted."""
    import json

    # The UI applies a width to the columns `columnOrder` lists alone.
    return json.dumps({"selectedColumns": list(VIEW_COLUMNS), "columnOrder": [RUN_NAME_COLUMN, *VIEW_COLUMNS],
                       "columnWidths": {RUN_NAME_COLUMN: PX_PER_CHAR * longest_name + NAME_PADDING_PX},
                       "runsHiddenMode": "SHOW_ALL"})


def mlflow_uri(spec, run_dir: str) -> Optional[str]:
    """The MLflow tracking URI of the spec's tracking.mlflow: its own, else an SQLite
    file in the local run directory (MLflow's file store is in maintenance mode and
    refuses to open by default); None for a remote run without one."""
    from orchestrator.rundir import MLFLOW_FILE, sqlite_url

    return spec.tracking.mlflow.tracking_uri or sqlite_url(run_dir, MLFLOW_FILE)


@functools.cache
def callback_class() -> type:
    """The MLflow callback's class, made on first use (Ray's logger imported then)."""
    from ray.tune.logger import LoggerCallback

    from orchestrator.trackers.common import (STEP, logged_once_per_member, or_off, resolved, tracked_metrics,
                                              trial_params)

    @logged_once_per_member
    class MLflow(LoggerCallback):
        """One MLflow run per trial, through MLflow's own client: the flat config as its
        params, each row's figures as metrics at its samples. MLflow logs from the
        driver, so a server that stops answering would hold the sweep (MLflow waits 120
        s per request and retries 7 times): its requests wait ICR_STORAGE_TIMEOUT_S (20
        s) once, unless MLFLOW_HTTP_REQUEST_TIMEOUT or _MAX_RETRIES say otherwise, and a
        failure turns MLflow off for the rest of the sweep."""

        # A callback pickled by a sweep launched before the shared view has no width of its own: a resume of it
        # reads this one (an instance attribute missing at setup turned MLflow off for the resumed sweep).
        longest_name = 40

        def __init__(self, tracking_uri: str, experiment_name: str, tags: dict, swept: tuple[str, ...] = (),
                     longest_name: int = 40):
            self.tracking_uri, self.experiment_name, self.tags, self.swept = tracking_uri, experiment_name, tags, swept
            self.longest_name = longest_name
            self.client, self.experiment_id, self.runs, self.resolved = None, None, {}, set()
            os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", str(max(1, round(answer_timeout()))))
            os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")

        @or_off
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
            self.client.set_experiment_tag(self.experiment_id, VIEW_TAG, shared_view(self.longest_name))

        @or_off
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
            run = self.client.create_run(self.experiment_id, run_name=str(trial),
                                         tags={**self.tags, "trial_name": str(trial)})
            self.runs[trial] = run.info.run_id
            params = [Param(key, str(value)) for key, value in trial_params(trial, self.swept).items()]
            for i in range(0, len(params), 100):  # MLflow takes at most 100 params per batch
                self.client.log_batch(run.info.run_id, params=params[i:i + 100])

        @or_off
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

        @or_off
        def log_trial_end(self, trial, failed: bool = False) -> None:
            if trial in self.runs:
                self.client.set_terminated(self.runs.pop(trial), status="FAILED" if failed else "FINISHED")

        @or_off
        def on_experiment_end(self, trials, **info) -> None:
            """A sweep stopped (Ctrl-C, a stop) ends the runs of its unfinished trials
            KILLED, not RUNNING for good; a resume continues each."""
            for trial in list(self.runs):
                self.client.set_terminated(self.runs.pop(trial), status="KILLED")

    MLflow.__qualname__ = "MLflow"  # pickled by name, as the module's attribute
    return MLflow


__getattr__ = made_on_first_use(__name__, "MLflow", callback_class)


def check_server(uri: str) -> None:
    """Raises TrackerError where an MLflow server named by `uri` does not answer as one."""
    if urlsplit(uri).scheme not in ("http", "https"):
        return
    try:
        url, user = parts(uri)
    except NotAURL as e:
        raise TrackerError(f"tracking.mlflow.tracking_uri {e}") from None
    problem = _mlflow_unanswered(url, user)
    if problem:
        raise TrackerError(f"tracking.mlflow.tracking_uri: {redact(uri)} {problem}; start the MLflow server "
                           "(`mlflow server`), or drop tracking_uri to log into the run directory")


def _mlflow_unanswered(url: str, user: Optional[tuple[str, str]]) -> str:
    """'' when an MLflow server answers at `url` within the wait (its /health says
    OK; a 401 or 403 without credentials is one that asks for MLflow's own), else
    what it answered. Credentials given in the URI go as basic auth, to that host alone."""
    import base64

    headers = {"Authorization": "Basic " + base64.b64encode(":".join(user).encode()).decode()} if user else {}
    answer = ask(url.rstrip("/") + "/health", answer_timeout(), headers=headers)
    if isinstance(answer, str):
        return answer
    status, headers, body = answer
    if 300 <= status < 400:
        return f"answered {where_to(status, headers, url)} (not followed: name the server's own address)"
    if status in (401, 403):
        return f"refused the user and password given in it (HTTP {status})" if user else ""
    if status != 200:
        return f"answered HTTP {status} at /health: no MLflow server that works now"
    if body.strip() != b"OK":
        return "answered, but not as an MLflow server does (its /health says OK): is it one?"
    return ""


def _mlflow_experiment(db: Path, name: str) -> tuple[Optional[str], bool]:
    """The id of experiment `name` in an MLflow SQLite store (None where it cannot be
    read), and whether it holds the tool's shared view."""
    import sqlite3

    if not db.is_file():
        return None, False
    try:
        with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as con:
            row = con.execute("SELECT experiment_id FROM experiments WHERE name = ?", (name,)).fetchone()
            view = row and con.execute("SELECT 1 FROM experiment_tags WHERE experiment_id = ? AND key = ?",
                                       (row[0], VIEW_TAG)).fetchone()
    except sqlite3.Error:
        return None, False
    return (str(row[0]), bool(view)) if row else (None, False)


@register
class MlflowTracker(Tracker):
    """`tracking.mlflow`: one MLflow run per trial, its parameters the flat config,
    its metrics each row's figures at the trial's samples."""

    name, section, package = "mlflow", MlflowSpec, "mlflow"

    def check(self, config: MlflowSpec, launch: Launch) -> None:
        uri = mlflow_uri(launch.spec, launch.run_dir)
        if uri is None:
            raise TrackerError("tracking.mlflow.tracking_uri: a remote run directory needs one (an MLflow server, "
                               "say); the default file store is for local runs")
        check_server(uri)

    def callbacks(self, config: MlflowSpec, launch: Launch) -> list:
        spec = launch.spec
        from orchestrator.grid import shape_trials

        # An Optuna trial's name writes its rate to three significant digits (1.23e-3), its shape's the range's low end.
        longest = max((len(trial.name) for trial in shape_trials(spec)), default=40) + (
            0 if spec.search.method == "grid" else 4)
        return [callback_class()(tracking_uri=mlflow_uri(spec, launch.run_dir),
                                 experiment_name=config.experiment or spec.name, tags={"sweep": spec.name},
                                 swept=launch.swept, longest_name=longest)]

    def opens(self, config: dict, shown: Shown) -> Optional[str]:
        from orchestrator.rundir import MLFLOW_FILE

        spec, where = shown.spec, shown.where
        uri = config.get("tracking_uri") or f"sqlite:///{where}/{MLFLOW_FILE}"
        experiment = config.get("experiment") or spec.get("name", "")
        number, view = (None, False) if config.get("tracking_uri") else _mlflow_experiment(shown.local / MLFLOW_FILE,
                                                                                             experiment)
        # MLflow 3 opens an experiment in its GenAI view (its runs table without a parameter or metric
        # column); workflowType opens the model-training view, viewStateShareKey the tool's view of it.
        runs = (f", then http://127.0.0.1:5000/#/experiments/{number}/runs?workflowType=machine_learning"
                + (f"&viewStateShareKey={VIEW} (its runs: each trial's name whole, its model, setup, n, seed, rate "
                   "and exact match; the chart button charts them all)" if view else
                   "&compareRunsMode=CHART (its runs, charted)") if number else "")
        opens = redact(uri) if uri.startswith("http") else command("mlflow", "ui", "--backend-store-uri", uri)
        return (f"MLflow: `{opens}`{runs} (experiment {experiment}; in MLflow 3's own views choose \"Model training\")"
                + ("" if uri.startswith("http") else missing("mlflow")))
