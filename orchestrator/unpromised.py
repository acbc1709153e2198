"""What icr-sweep uses of Ray, Tune and their W&B integration that the libraries do
not promise: every private name, here and nowhere else in orchestrator/. Each use
says what it buys and which public API was tried; `PRIVATE_NAMES` lists them, and
tests/orchestrator/test_unpromised.py checks each against the installed library, so
that a release that moves one fails there, naming the name and the version, not
somewhere in a sweep. Ray is pinned in pyproject.toml; where a name is gone at run
time, each use falls back to what the public API gives (said in its docstring).
Optuna needs none: its studies are driven through ask-and-tell and its storage's
methods (optuna_search.py)."""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional


@dataclass(frozen=True)
class PrivateName:
    library: str  # the distribution whose version a change is reported against
    module: str
    name: str  # dotted within the module: a class's attribute as Class.attr
    buys: str
    tried: str
    set_in: Optional[str] = None  # a name no object holds until run (an instance attribute, a keyword
    # argument read from **kwargs): the function, dotted within the module, whose source names it


PRIVATE_NAMES = (
    PrivateName("ray", "ray", "_temp_dir", set_in="init",
                buys="the embedded Ray's session files (logs, sockets) where the command's --temp-dir says, so that "
                "two users' or tests' Rays on one machine do not share /tmp/ray",
                tried="RAY_TMPDIR (read in Ray 2.60 as a base directory under which Ray adds `ray`; "
                "undocumented, so no more promised than this keyword, which Ray's docs name)"),
    PrivateName("ray", "ray._private.services", "canonicalize_bootstrap_address",
                "`--address auto` resolved to the host:port it names (RAY_ADDRESS or the last `ray start`), so that "
                "the tool checks it answers before ray.init, which retries an unreachable address forever",
                "ray.init(address=...) (connects, never resolves alone); ray.util.client (ray:// only)"),
    PrivateName("ray", "ray._private.ray_constants", "ENABLE_RAY_CLUSTER",
                "the embedded Ray's node address 127.0.0.1, so that its GCS, raylet, workers, agents and metrics "
                "endpoints listen on loopback alone, as on macOS (issue 52, class 2)",
                "ray.init(_node_ip_address='127.0.0.1') (Ray 2.60 replaces a loopback address by the machine's "
                "routable one, services.resolve_ip_for_localhost); RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 (read once, "
                "when ray is imported, before the command knows where the dashboard listens)"),
    PrivateName("ray", "ray._private.ray_logging", "global_worker_stdstream_dispatcher",
                "the workers' lines (a library's, Ray's traceback of a worker it ended with SIGTERM, issue 53) "
                "in the run's log instead of the driver's console, which keeps the tool's own word alone (issue 79)",
                "ray.init(log_to_driver=False) (the tool's own word lost too); logging filters (Ray prints "
                "worker lines with print, not logging)"),
    *(PrivateName("ray", "ray.experimental.internal_kv", name,
                  "a running trial's samples and speed, told every few seconds between its evaluations to the "
                  "driver's progress view and its time left (issue 79), as a key of the cluster's GCS: no process "
                  "of its own, and read where the driver runs on a cluster too",
                  "tune.report (each report is a result that Tune's searchers, callbacks and trackers take, and "
                  "a round trip that pauses training); a Ray actor as a board (one more worker process a sweep)")
      for name in ("_internal_kv_put", "_internal_kv_get", "_internal_kv_del")),
    PrivateName("ray", "ray._private.ray_logging", "handlers", set_in="WorkerStandardStreamDispatcher.__init__",
                buys="the dispatcher's handlers above, to wrap the one that prints", tried="none public"),
    PrivateName("ray", "ray._private.services", "ConsolePopen",
                "the embedded Ray's daemons in a process group of their own, so that a stop sent to the driver's "
                "group (systemd, a batch scheduler, docker stop) reaches the driver alone",
                "ray.init has no option for the daemons' process group"),
    PrivateName("ray", "ray._private.state", "state.get_cluster_config",
                "the GPUs per node an autoscaler (v2) can add, for `gpus_per_trial` on a cluster that starts empty",
                "ray.cluster_resources() / ray.available_resources() (only nodes that are up); "
                "ray.autoscaler.sdk (requests resources, does not list node types)"),
    PrivateName("ray", "ray.tune.execution.tune_controller", "_ActorClassCache",
                "each trial's actor named after its trial in the Ray dashboard (Tune creates them unnamed), and, on "
                "the embedded Ray, made without the AWS keys Tune copies into its runtime env (logged in clear)",
                "tune.with_resources / tune.TuneConfig (no actor options; ray-project/ray#32763)"),
    PrivateName("ray", "ray.tune.execution.tune_controller", "experiment_state_file_name",
                set_in="TuneController.save_to_dir",
                buys="Tune's experiment state written whole or not at all (a new file renamed over the last): Tune "
                "2.60 writes it in place, and a driver killed mid-write left it cut short, after which an Optuna "
                "sweep (which cannot be rebuilt without it) could not resume (CI, 2026-12-02)",
                tried="none public: the file is written inside save_to_dir, under the name this property gives"),
    PrivateName("ray", "ray.train._internal.storage", "_FilesystemSyncer._sync_up_command",
                "the run directory's copies of Tune's files (its experiment state, the searcher's, each trial's "
                "result.json) replaced whole, never rewritten in place: Tune 2.60 copies its staging folder over "
                "them, and a resume or `status` that read one mid-copy found it empty, a driver killed mid-copy left "
                "it cut short (issue 83, class 3)",
                "tune.SyncConfig (a period and a timeout; no way to say how a file is written)"),
    PrivateName("ray", "ray.tune.search.search_generator", "_counter", set_in="SearchGenerator.__init__",
                buys="a restored search's count of trials made (which ends it at num_samples) as the trials Tune's "
                "restored state holds: the count saved beside that state may be of another save, and a resume then "
                "asked a trial twice or never (issue 83, class 1)",
                tried="SearchGenerator.set_state (public, but takes the whole saved state, the count among it)"),
    PrivateName("ray", "ray.tune.search.search_generator", "_finished", set_in="SearchGenerator.__init__",
                buys="a restored search not ended by a flag saved beside an older state of Tune's: its searcher "
                "says when its trials are all made", tried="as for _counter"),
    PrivateName("ray", "ray.air._internal.usage", "_count_callbacks",
                "a launch or resume 1 s sooner: Tune's usage tag of a sweep's callbacks imported Ray's MLflow, "
                "W&B, Comet and Aim integrations (mlflow and wandb among them) to compare class names; counted "
                "here by the same names, the tag unchanged (tests/orchestrator/test_unpromised.py)",
                "RAY_USAGE_STATS_ENABLED=0 (the tag is not sent, but the integrations are still imported)"),
    PrivateName("ray", "ray.tune.trainable.function_trainable", "_name", set_in="wrap_function",
                buys="the trial's actor listed by its trial's name (its repr) on the dashboard's Actors page",
                tried="Trainable.trial_name (public, but the repr reads _name)"),
    PrivateName("ray", "ray.tune.trainable.function_trainable", "__mixins__", set_in="wrap_function",
                buys="the class Tune makes of a trial's function given the methods of a class of ours (the actor's "
                "name, a checkpoint gone from storage passed over)",
                tried="a Trainable class of our own (public, but the function API's reporting and checkpointing "
                "would be rewritten for it)"),
    PrivateName("ray", "ray.air.integrations.wandb", "_WandbLoggingActor",
                "W&B's logging actor with samples as every chart's step (define_metric), the project's metric "
                "names, and W&B's service ended before the actor (no ConnectionResetError at exit)",
                "WandbLoggerCallback's public options (no step metric, no renaming, no teardown)"),
    PrivateName("ray", "ray.air.integrations.wandb", "_WandbLoggingActor._handle_result",
                "the row each W&B log call gets", "WandbLoggerCallback(excludes=...) (drops keys, renames none)"),
    PrivateName("ray", "ray.air.integrations.wandb", "_wandb", set_in="_WandbLoggingActor.__init__",
                buys="the actor's wandb module, for define_metric and teardown", tried="none public"),
    PrivateName("ray", "ray.air.integrations.wandb", "_logdir", set_in="_WandbLoggingActor.run",
                buys="the W&B run's trial_log_path the trial's directory in the run directory, not Ray's temporary copy",
                tried="wandb.init(config=...) (Ray writes trial_log_path after init, over it)"),
    PrivateName("ray", "ray.air.integrations.wandb", "WandbLoggerCallback._logger_actor_cls",
                "the logging actor class above", "none public"),
    PrivateName("ray", "ray.air.integrations.wandb", "_remote_logger_class", set_in="WandbLoggerCallback._start_logging_actor",
                buys="W&B's logging actor made without WANDB_API_KEY in its runtime env on the embedded Ray (whose "
                "workers inherit the driver's environment): Ray's runtime-env agent logs a runtime env in clear",
                tried="WandbLoggerCallback(api_key=...) (copied into the same runtime env)"),
    PrivateName("ray", "ray.air.integrations.wandb", "WandbLoggerCallback._start_logging_actor",
                "one W&B run per trial with its own id, name and flat config",
                "WandbLoggerCallback.log_trial_start (names the run by Tune's trial id, logs the nested config)"),
    *(PrivateName("ray", "ray.air.integrations.wandb", name, set_in="WandbLoggerCallback.__init__",
                  buys="W&B's logging actor handed its items itself (Inbox, Outbox): Ray's callback starts a queue "
                  "actor per trial beside it, a worker process of about 2.7 core-seconds (issue 82)",
                  tried="none public: the callback makes its queue in _start_logging_actor")
      for name in ("_trial_queues", "_trial_logging_actors", "_trial_logging_futures", "_logging_future_to_trial")),
    PrivateName("ray", "ray.air.integrations.wandb", "self.queue.get", set_in="_WandbLoggingActor.run",
                buys="the logging actor's items taken from its own Inbox", tried="as for _trial_queues"),
)


def missing(private: PrivateName) -> Optional[str]:
    """None where the installed library still has `private`, else what changed,
    naming the name, the library and its version."""
    import importlib
    import importlib.metadata
    import inspect

    version = importlib.metadata.version(private.library)
    where = f"{private.module}.{private.set_in or private.name}"
    try:
        found = importlib.import_module(private.module)
        for part in (private.set_in or private.name).split("."):
            found = getattr(found, part)
        if private.set_in is not None and private.name not in inspect.getsource(inspect.unwrap(found)):
            return f"{private.library} {version}: {where} no longer reads {private.name}; it bought: {private.buys}"
    except (ImportError, AttributeError, TypeError, OSError) as e:
        return f"{private.library} {version} has no {where} ({type(e).__name__}: {e}); it bought: {private.buys}"
    return None


def temp_dir_option(temp_dir: Optional[str]) -> dict:
    """ray.init's keyword for the session's temporary directory."""
    return {"_temp_dir": temp_dir}


def mix_into_trials(trainable: Callable, mixin: type) -> None:
    """Tune's class for `trainable` (a function) inherits `mixin` first."""
    trainable.__mixins__ = (mixin,)


def bootstrap_address(address: str) -> str:
    """The host:port `address` names (`auto`: RAY_ADDRESS or the last `ray start`)."""
    from ray._private.services import canonicalize_bootstrap_address

    return canonicalize_bootstrap_address(address)


@contextlib.contextmanager
def daemons_in_a_group_of_their_own():
    """Within it, a Ray started here runs its daemons (GCS, raylet, dashboard) in a
    process group of their own (Ray starts each with its ConsolePopen); another Ray
    keeps them in the driver's group."""
    from ray._private import services

    real = getattr(services, "ConsolePopen", None)
    if real is None:
        yield
        return

    class Grouped(real):
        def __init__(self, *args, **kwargs):
            if not kwargs.get("start_new_session") and kwargs.get("process_group") is None:
                kwargs["process_group"] = 0
            super().__init__(*args, **kwargs)

    services.ConsolePopen = Grouped
    try:
        yield
    finally:
        services.ConsolePopen = real


@contextlib.contextmanager
def node_on_loopback(loopback: bool):
    """Within it (with `loopback`), a Ray started here takes 127.0.0.1 as its
    node's address, as Ray does on macOS and Windows: every process of it listens on
    loopback alone. Where Ray lacks the switch, it listens where Ray chooses."""
    from ray._private import ray_constants

    if not loopback or not hasattr(ray_constants, "ENABLE_RAY_CLUSTER"):
        yield
        return
    real = ray_constants.ENABLE_RAY_CLUSTER
    ray_constants.ENABLE_RAY_CLUSTER = False
    try:
        yield
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = real


@contextlib.contextmanager
def no_idle_workers_ahead():
    """Within it, a Ray started here starts no Python workers ahead of its first
    driver's tasks. Ray starts one per CPU for that driver's job, but a job with a
    runtime env (this tool's: the trials' thread bounds) starts its trials in
    workers of their own: those started ahead sat idle to the end, about 0.45
    core-seconds each. Ray's raylet reads RAY_prestart_worker_first_driver from the
    environment it starts in; a value the user set stays, and where Ray lacks the
    name nothing changes."""
    key = "RAY_prestart_worker_first_driver"
    if key in os.environ:
        yield
        return
    os.environ[key] = "0"
    try:
        yield
    finally:
        os.environ.pop(key, None)


def worker_lines_to_the_log() -> None:
    """Of the worker lines Ray prints on this driver's console, keeps the tool's own
    word there (`TOOLS_WORD`, W&B's stop) and sends the rest to WORKER_LOG, the
    run's icr-sweep.log while a sweep runs (progress.console): a library's lines,
    a trial's, Ray's traceback of a worker it ended with SIGTERM inside a weakref
    callback ("Exception ignored in: ... SystemExit: 1", issue 53). Where Ray
    lacks the names, nothing changes."""
    try:
        from ray._private.ray_logging import global_worker_stdstream_dispatcher as dispatcher

        with dispatcher._lock:
            dispatcher.handlers = [(name, _tools_own_word(handler) if name == "ray_print_logs" else handler)
                                   for name, handler in dispatcher.handlers]
    except (ImportError, AttributeError):
        return


# What Ray's dashboard and console call W&B's logging actor (its repr), and what of its
# lines the console still shows: the tool's own word that W&B stopped (trackers.wandb_failed).
WANDB_ACTOR = "W&B logger"
WORKER_LOG = "icr_sweep.workers"  # the logger of the workers' lines kept off the console (progress.console: the run's log)
WANDB_SAID = "warning: W&B stopped logging"
TOOLS_WORD = "icr-sweep: "  # how a trial's line for the console begins (worker.py)


def _tools_own_word(handler: Callable) -> Callable:
    """`handler` given the tool's own lines alone; the others go to WORKER_LOG,
    each with the worker that printed it (W&B's messages and its service's Go
    panic when a server fails it were 26 lines on the console, issue 83, class 9)."""
    if getattr(handler, "tools_own_word", False):
        return handler

    def handle(data: dict) -> None:
        import logging

        lines = data.get("lines") or []
        ours = [line.startswith((TOOLS_WORD, WANDB_SAID)) for line in lines]
        who = data.get("actor_name") or data.get("task_name") or f"pid {data.get('pid')}"
        for line, own in zip(lines, ours):
            if not own:
                logging.getLogger(WORKER_LOG).warning("%s: %s", who, line)
        if any(ours):
            handler({**data, "lines": [line for line, own in zip(lines, ours) if own]})

    handle.tools_own_word = True
    return handle


PROGRESS = "icr-sweep-progress"  # the GCS namespace of the running trials' told counts


def tell_progress(key: str, samples: int, rate: float) -> None:
    """A running trial's samples trained and samples per second, under `key` (its
    directory's path), for `told_progress`; nothing where Ray lacks the names or
    its store does not answer (the view then moves at evaluations)."""
    try:
        from ray.experimental.internal_kv import _internal_kv_put

        _internal_kv_put(key, f"{samples} {rate!r}", overwrite=True, namespace=PROGRESS)
    except Exception:
        pass


def told_progress(key: str) -> Optional[tuple[int, float]]:
    """(samples, samples per second) told under `key`, or None."""
    try:
        from ray.experimental.internal_kv import _internal_kv_get

        samples, rate = _internal_kv_get(key, namespace=PROGRESS).split()
        return int(samples), float(rate)
    except Exception:  # nothing told yet (None), another Ray, a store that did not answer
        return None


def forget_progress(key: str) -> None:
    """Removes what a trial told, as it ends."""
    try:
        from ray.experimental.internal_kv import _internal_kv_del

        _internal_kv_del(key, namespace=PROGRESS)
    except Exception:
        pass


def autoscaler_node_groups() -> dict[str, float]:
    """GPUs per node of each node group the cluster's autoscaler (v2) can start, as
    the GCS reports them (empty where it reports none, or cannot)."""
    import ray

    try:
        config = ray._private.state.state.get_cluster_config()
        return {g.name: float(g.resources.get("GPU", 0)) for g in config.node_group_configs if g.max_count != 0} \
            if config else {}
    except Exception:  # an older GCS without the call, or another Ray
        return {}


# What Ray copies from the driver's environment into an actor's runtime env (Tune's trial
# actors: AWS_*, ray/tune/execution/class_cache.py; Ray's W&B actor: WANDB_API_KEY), which
# Ray's runtime-env agent then writes in clear into its session's logs.
SECRETS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SECURITY_TOKEN", "AWS_SESSION_TOKEN", "WANDB_API_KEY")
_INHERITED = {"env": False}


def workers_inherit_env(inherit: bool) -> None:
    """Says whether this driver's Ray workers inherit its environment (the embedded
    Ray, whose daemons the driver starts): then no secret is copied into a runtime
    env. On an attached cluster a remote node's worker has only what its runtime env
    brings, so Ray's copies stay."""
    _INHERITED["env"] = inherit


def without_secrets(runtime_env):
    """`runtime_env` with SECRETS left out of its env_vars, where workers inherit them."""
    from ray.runtime_env import RuntimeEnv

    if not _INHERITED["env"] or not runtime_env or not set(SECRETS) & set(runtime_env.get("env_vars") or {}):
        return runtime_env
    env_vars = {k: v for k, v in runtime_env["env_vars"].items() if k not in SECRETS}
    return RuntimeEnv(**{**dict(runtime_env), "env_vars": env_vars})


@contextlib.contextmanager
def trial_actors_named():
    """Within it, Tune names each trial's actor after its trial (the dashboard's
    Actors page finds a trial by its Name column); a trial started again in the same
    driver (a retry) is named `<name> (2)`, ...: the failed actor's name may not be
    free yet. Another Ray keeps Tune's unnamed actors."""
    from ray.tune.execution import tune_controller

    real = getattr(tune_controller, "_ActorClassCache", None)
    if real is None:
        yield
        return
    starts: dict[str, int] = {}

    def named(make):
        def remote(args=None, kwargs=None, **options):
            if "runtime_env" in options:
                options["runtime_env"] = without_secrets(options["runtime_env"])
            storage = (kwargs or {}).get("storage")
            trial = getattr(storage, "trial_dir_name", None)
            if trial and "name" not in options:
                starts[trial] = starts.get(trial, 0) + 1
                options["name"] = trial if starts[trial] == 1 else f"{trial} ({starts[trial]})"
            return make(args=args, kwargs=kwargs, **options)
        return remote

    class Named(real):
        def get(self, trainable_cls):
            actor_cls = super().get(trainable_cls)
            if "_remote" not in vars(actor_cls):  # the cache hands out one class per trainable
                actor_cls._remote = named(actor_cls._remote)
            return actor_cls

    tune_controller._ActorClassCache = Named
    try:
        yield
    finally:
        tune_controller._ActorClassCache = real


# Ray's own callbacks, by the names Tune's usage tag counts (besides its default ones).
_TAGGED_CALLBACKS = ("WandbLoggerCallback", "MLflowLoggerCallback", "CometLoggerCallback", "AimLoggerCallback")


def count_callbacks(callbacks) -> dict[str, int]:
    """Tune's usage tag of a sweep's callbacks (`ray.air._internal.usage._count_callbacks`)
    without importing the integrations whose class names it compares: the same counts."""
    import collections

    from ray.tune import Callback
    from ray.tune.logger import LoggerCallback
    from ray.tune.utils.callback import DEFAULT_CALLBACK_CLASSES

    names = set(_TAGGED_CALLBACKS) | {cls.__name__ for cls in DEFAULT_CALLBACK_CLASSES}
    counts: dict[str, int] = collections.defaultdict(int)
    for callback in callbacks or []:
        if not isinstance(callback, Callback):
            continue
        name = type(callback).__name__
        counts[name if name in names else
               "CustomLoggerCallback" if isinstance(callback, LoggerCallback) else "CustomCallback"] += 1
    return counts


@contextlib.contextmanager
def callbacks_counted_by_name():
    """Within it, Tune tags its usage of callbacks by `count_callbacks` (where the
    private counter is gone, Tune's own runs)."""
    from ray.air._internal import usage

    real = getattr(usage, "_count_callbacks", None)
    if real is None:
        yield
        return
    usage._count_callbacks = count_callbacks
    try:
        yield
    finally:
        usage._count_callbacks = real


def name_trial_actor(actor, name: Optional[str]) -> None:
    """The repr of a function trainable's actor (what the dashboard lists), which
    Tune sets to the function's name for every trial."""
    if name:
        actor._name = name


class Inbox:
    """W&B's logging actor's queue, inside the actor: items numbered by the callback
    in the order it sends them, taken in that order (a threaded actor may run its
    calls out of order). A number below the next one expected (a call Ray retried
    after the actor restarted) is taken next, as it comes; the first number a fresh
    actor is given is where it starts."""

    def __init__(self):
        import threading

        self._ready = threading.Condition()
        self._waiting: dict[int, object] = {}
        self._late: list = []
        self._next: Optional[int] = None

    def put(self, number: int, item) -> None:
        with self._ready:
            if self._next is None:
                self._next = number
            if number < self._next:
                self._late.append(item)
            else:
                self._waiting[number] = item
            self._ready.notify()

    def get(self):
        with self._ready:
            while True:
                if self._late:
                    return self._late.pop(0)
                if self._next in self._waiting:
                    self._next += 1
                    return self._waiting.pop(self._next - 1)
                self._ready.wait()


class Outbox:
    """What Ray's W&B callback puts its items into (`put`, as into a Ray queue): each
    handed, numbered, to the logging actor's Inbox."""

    def __init__(self, actor):
        self._actor = actor
        self._sent = 0

    def put(self, item) -> None:
        self._actor.put.remote(self._sent, item)
        self._sent += 1


def wandb_callback(figures: Callable[[dict], dict], step: str, charts: tuple[str, ...], trial_dir: str,
                   config: Callable[[dict], dict], failed: Callable[[str, Exception], None]):
    """Ray's WandbLoggerCallback class, opened where it has no public hook: its
    logging actor logs `figures(row)` with `step` as the step metric of every chart
    matching `charts` (W&B's define_metric) and adds `config(row)` to the run's
    config (what the trial ran on), writes as the run's trial_log_path the
    run's config entry `trial_dir` (the trial's directory in the run directory; Ray
    writes its temporary copy of it, which vanishes with the session), and ends
    W&B's service before the actor ends; `start_run(trial, **init)` starts one
    trial's run with wandb.init's arguments as given. Where wandb fails in the actor
    (a server that refuses the run, W&B's init timing out), `failed(trial_dir, error)`
    is told: Ray's actor would end with the error in its log alone."""
    from ray.air.integrations.wandb import WandbLoggerCallback, _WandbLoggingActor

    class Actor(_WandbLoggingActor):
        def __init__(self, logdir: str, queue, *args, **kwargs):
            super().__init__(logdir, Inbox() if queue is None else queue, *args, **kwargs)
            self._logdir = (self.kwargs.get("config") or {}).get(trial_dir, self._logdir)

        def put(self, number: int, item) -> None:
            """The callback's `number`-th item for `run` (Ray's queue protocol)."""
            self.queue.put(number, item)

        def __repr__(self) -> str:  # its name on the dashboard, and its lines' prefix (quiet_worker_exits)
            return WANDB_ACTOR

        def run(self):
            try:
                return super().run()
            except Exception as e:
                failed(self._logdir, e)
            finally:
                # W&B's service process otherwise ends with the actor's, before its exit
                # hook tells it to: a ConnectionResetError traceback on a clean run.
                self._wandb.teardown()

        def _handle_result(self, result: dict) -> tuple[dict, dict]:
            if not getattr(self, "defined", False):
                self._wandb.define_metric(step)
                for chart in charts:
                    self._wandb.define_metric(chart, step_metric=step)
                self.defined = True
            return figures(result), config(result)

    class Callback(WandbLoggerCallback):
        _logger_actor_cls = Actor

        def start_run(self, trial, **init) -> None:
            self._start_logging_actor(trial, [], **init)

        def _start_logging_actor(self, trial, exclude_results: list, **init) -> None:
            """Ray's, but the items reach the logging actor by its own `put` (into its
            Inbox) instead of through a Ray queue: Ray starts an actor of its own,
            a worker process, per trial for the queue alone."""
            import ray
            from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

            if trial in self._trial_logging_futures:  # a trial started again reuses its actor
                return
            if not self._remote_logger_class:
                # Ray's own copies WANDB_API_KEY into the actor's runtime env, which Ray's
                # agent logs in clear: only where workers do not inherit the driver's.
                key = {} if _INHERITED["env"] or "WANDB_API_KEY" not in os.environ else {
                    "runtime_env": {"env_vars": {"WANDB_API_KEY": os.environ["WANDB_API_KEY"]}}}
                here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
                # Two threads: `run` waits on the inbox in one, `put` fills it in the other.
                self._remote_logger_class = ray.remote(num_cpus=0, scheduling_strategy=here, max_restarts=-1,
                                                       max_task_retries=-1, max_concurrency=2,
                                                       **key)(self._logger_actor_cls)
            actor = self._remote_logger_class.remote(logdir=trial.local_path, queue=None, exclude=exclude_results,
                                                     to_config=self.AUTO_CONFIG_KEYS, **init)
            self._trial_queues[trial] = Outbox(actor)
            self._trial_logging_actors[trial] = actor
            future = actor.run.remote()
            self._trial_logging_futures[trial] = future
            self._logging_future_to_trial[future] = trial

    return Callback


@contextlib.contextmanager
def experiment_state_written_whole():
    """Within it, Tune saves its experiment state (experiment_state-*.json, the
    trials and the searcher's place) whole or not at all: into a hidden file beside
    it, then renamed over it, as Tune already saves its searcher's and callbacks'
    states. A driver killed while Tune writes leaves the last whole state, which a
    resume reads. Where Tune lacks the names, it writes as it does."""
    from ray.tune.execution.tune_controller import TuneController

    real_save, real_name = getattr(TuneController, "save_to_dir", None), vars(TuneController).get(
        "experiment_state_file_name")
    if real_save is None or not isinstance(real_name, property):
        yield
        return

    def file_name(self) -> str:
        name = real_name.fget(self)
        return f".{name}.writing" if getattr(self, "_icr_writing", False) else name

    def save_to_dir(self) -> None:
        final = self.experiment_state_path
        self._icr_writing = True
        written = self.experiment_state_path
        try:
            real_save(self)
        except BaseException:
            Path(written).unlink(missing_ok=True)
            raise
        finally:
            self._icr_writing = False
        os.replace(written, final)

    TuneController.experiment_state_file_name, TuneController.save_to_dir = property(file_name), save_to_dir
    try:
        yield
    finally:
        TuneController.experiment_state_file_name, TuneController.save_to_dir = real_name, real_save


# Half-written files of Tune's that its sync must not copy into the run directory:
# its experiment state being written (experiment_state_written_whole above), and
# the searcher's (Tune's own _atomic_save writes tmp-<name>, then renames it).
_HALF_WRITTEN = (".experiment_state-*.json.writing", "tmp-*")


def copy_whole(source: str, destination: str, exclude=None) -> None:
    """Copies the folder (or file) `source` into `destination` on this machine, each
    file written beside its final name and renamed over it: a reader sees the last
    whole copy or the new one, never a file cut short; a copy killed midway leaves
    its half under a hidden name (`.<name>.icr-sync`, replaced by the next copy of
    that file). Half-written staging files (_HALF_WRITTEN) and the relative paths
    matching `exclude` (Tune's globs) are left out; Tune's pickles are readable by
    their owner alone (rundir.TUNE_PICKLES)."""
    import fnmatch
    import shutil

    from orchestrator.rundir.layout import SYNC_PART, TUNE_PICKLES

    source_path = Path(source)
    files = [(source_path, Path(destination))] if source_path.is_file() else [
        (Path(folder, name), Path(destination, Path(folder).relative_to(source_path), name))
        for folder, _, names in os.walk(source_path) for name in names]
    for src, dst in files:
        relative = src.relative_to(source_path).as_posix() if src != source_path else src.name
        if any(fnmatch.fnmatch(src.name, p) for p in _HALF_WRITTEN) or any(
                fnmatch.fnmatch(relative, p) for p in exclude or ()):
            continue
        dst.parent.mkdir(parents=True, exist_ok=True)
        part = dst.with_name(f".{dst.name}{SYNC_PART}")
        try:
            shutil.copy2(src, part)
        except FileNotFoundError:  # gone from staging meanwhile (a file Tune renamed): the next sync has it
            part.unlink(missing_ok=True)
            continue
        if any(fnmatch.fnmatch(src.name, p) for p in TUNE_PICKLES):  # the run's config, its secrets in it
            os.chmod(part, 0o600)
        os.replace(part, dst)


@contextlib.contextmanager
def run_directory_written_whole():
    """Within it, Tune's sync of its staging folder into a local run directory writes
    each file whole (`copy_whole`); remote storage is written as Tune writes it (an
    object store replaces an object whole). Where Tune lacks the name, it copies as
    it does."""
    import pyarrow.fs
    from ray.train._internal import storage

    syncer = getattr(storage, "_FilesystemSyncer", None)
    real = getattr(syncer, "_sync_up_command", None)
    if real is None:
        yield
        return

    def sync_up_command(self, local_path: str, uri: str, exclude=None):
        if isinstance(self.storage_filesystem, pyarrow.fs.LocalFileSystem):
            return copy_whole, dict(source=local_path, destination=uri, exclude=exclude)
        return real(self, local_path, uri, exclude)

    syncer._sync_up_command = sync_up_command
    try:
        yield
    finally:
        syncer._sync_up_command = real


def trials_made(search, made: int) -> None:
    """A Tune SearchGenerator's count of trials made set to `made`, and the search
    not ended: its searcher says when it is (Searcher.FINISHED)."""
    search._counter = made
    search._finished = False
