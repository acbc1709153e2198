"""Every private Ray name icr-sweep uses is kept in orchestrator/unpromised.py: each
one is checked here against the installed library, so that a release that moves
one fails here, naming the name and the version."""

import re
import sys
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from orchestrator.unpromised import PRIVATE_NAMES, missing

ORCHESTRATOR = Path(__file__).resolve().parents[2] / "orchestrator"


@pytest.mark.parametrize("private", PRIVATE_NAMES, ids=lambda p: f"{p.module}.{p.name}")
def test_each_private_name_the_tool_uses_is_still_in_the_installed_library(private):
    assert missing(private) is None, missing(private)


@pytest.mark.parametrize("name, changed, says", [
    ("canonicalize_bootstrap_address", dict(name="canonicalize_address"),
     "has no ray._private.services.canonicalize_address (AttributeError"),
    ("_ActorClassCache", dict(module="ray.tune.execution.gone"), "has no ray.tune.execution.gone._ActorClassCache"),
    ("__mixins__", dict(name="__bases_to_mix__"), "ray.tune.trainable.function_trainable.wrap_function no longer reads "
                                                  "__bases_to_mix__"),
    ("_temp_dir", dict(name="_tmp_dir"), "ray.init no longer reads _tmp_dir"),
])
def test_a_name_a_release_moved_is_reported_with_the_library_version_and_what_it_bought(name, changed, says):
    import ray

    private = next(p for p in PRIVATE_NAMES if p.name == name)
    message = missing(replace(private, **changed))
    assert message is not None and says in message and f"ray {ray.__version__}" in message, message
    assert message.endswith(f"it bought: {private.buys}")


def test_no_other_module_of_the_orchestrator_uses_a_private_name_of_ray_tune_or_optuna():
    # The issue's own check: `grep -rn "\._[a-z]" orchestrator | grep -E "ray|tune|optuna"`,
    # plus imports of a private name (`from ray... import _X`) and ray's private modules.
    out = subprocess.run(["grep", "-rn", r"\._[a-z]", "--include=*.py", str(ORCHESTRATOR)],
                         capture_output=True, text=True).stdout
    hits = {line.split(":")[0] for line in out.splitlines() if re.search("ray|tune|optuna", line)}
    imports = subprocess.run(["grep", "-rnE", r"(from (ray|optuna)\S* import .*\b_[A-Za-z])|(ray|optuna)\S*\._",
                              "--include=*.py", str(ORCHESTRATOR)], capture_output=True, text=True).stdout
    hits |= {line.split(":")[0] for line in imports.splitlines()}
    assert {Path(h).name for h in hits} == {"unpromised.py"}, out + imports


def test_a_workers_lines_go_to_the_runs_log_and_the_tools_own_word_to_the_console(tmp_path):
    """Issue 53: the README's first command ended with a Ray worker's "Exception
    ignored ... SystemExit: 1", printed when Ray's SIGTERM met a weakref callback;
    issue 79: a worker's line ended the console after a resume. Every worker line
    but the tool's own word goes to the run's log, naming the worker."""
    from ray._private.ray_logging import global_worker_stdstream_dispatcher as dispatcher

    from orchestrator import progress
    from orchestrator.unpromised import worker_lines_to_the_log

    printed = []
    dispatcher.add_handler("ray_print_logs", lambda data: printed.append(data["lines"]))
    log = tmp_path / "icr-sweep.log"
    ours = "icr-sweep: t0: the checkpoint Tune restores, /x, is gone from storage"
    try:
        worker_lines_to_the_log()
        worker_lines_to_the_log()  # wrapped once, however often called
        noise = ["Exception ignored in: <function WeakSet.__init__.<locals>._remove at 0x7f>",
                 "Traceback (most recent call last):", '  File "_weakrefset.py", line 39, in _remove',
                 '  File "ray/_private/worker.py", line 1063, in sigterm_handler',
                 "    raise_sys_exit_with_custom_error_message(", "SystemExit: 1"]
        with progress.console(False, log):
            dispatcher.emit({"lines": ["step 10", *noise, ours, "step 11"], "pid": 1, "is_err": True,
                             "actor_name": "transformer-cot-tiny-n5-lr3e-3-s0"})
            dispatcher.emit({"lines": noise, "pid": 2, "is_err": True})
    finally:
        dispatcher.remove_handler("ray_print_logs")
    assert printed == [[ours]]
    kept = log.read_text()
    assert "transformer-cot-tiny-n5-lr3e-3-s0: step 10" in kept and "pid 2: SystemExit: 1" in kept
    assert all(line in kept for line in noise) and ours not in kept


def test_a_launch_that_keeps_nothing_gets_no_log_back_from_a_late_worker_line(tmp_path, capsys):
    """The workers' lines go to the run's log for the rest of the command; a launch
    refused once Ray was up removes what it wrote, and a line of Ray's autoscaler
    that came after wrote icr-sweep.log again into the user's folder (CI, once).
    After the discard a worker line goes nowhere: not to the file, not to the console."""
    import logging

    from orchestrator import progress
    from orchestrator.cli.sweep import _discard
    from orchestrator.rundir.guard import Footprint
    from orchestrator.unpromised import WORKER_LOG

    run_dir = tmp_path / "runs" / "sweep"
    run_dir.mkdir(parents=True)
    (run_dir / "notes.txt").write_text("mine")
    footprint = Footprint(str(run_dir))
    workers = logging.getLogger(WORKER_LOG)
    saved = workers.handlers[:], workers.propagate
    try:
        with progress.console(False, run_dir / "icr-sweep.log"):
            logging.getLogger("ray").warning("Ray's line while it runs")  # the launch's log, written
        assert _discard(footprint)  # refused: the log goes with the rest
        workers.warning("autoscaler: a line after the launch removed what it wrote")  # the workers' first
    finally:
        workers.handlers, workers.propagate = saved
    assert sorted(p.name for p in run_dir.iterdir()) == ["notes.txt"]
    assert "removed what it wrote" not in capsys.readouterr().err


def test_tunes_usage_tag_of_a_sweeps_callbacks_counts_as_tunes_own_without_its_integrations(tmp_path):
    """Issue 63: Tune's tag imported mlflow and wandb (1 s of every launch and resume)
    to compare class names; `count_callbacks` gives the same counts for every kind
    it tells apart: Ray's integrations, its default loggers, ours, a plain callback."""
    from ray.air._internal import usage
    from ray.air.integrations.mlflow import MLflowLoggerCallback
    from ray.tune import Callback
    from ray.tune.logger import CSVLoggerCallback

    from orchestrator.spec import SweepSpec
    from orchestrator.trackers import callbacks
    from orchestrator.tune import StopAtStep
    from orchestrator.unpromised import callbacks_counted_by_name, count_callbacks

    spec = SweepSpec(name="tagged", tracking=dict(tensorboard=True, mlflow={}, wandb=dict(project="p", mode="offline")))
    ours = callbacks(spec, str(tmp_path))
    callbacks = [*ours, StopAtStep(tmp_path / "stop"), MLflowLoggerCallback(), CSVLoggerCallback(), Callback(), "no"]
    real = usage._count_callbacks
    assert dict(count_callbacks(callbacks)) == dict(real(callbacks))
    assert {"MLflowLoggerCallback", "CSVLoggerCallback", "CustomLoggerCallback", "CustomCallback"} <= set(
        count_callbacks(callbacks))
    with callbacks_counted_by_name():
        assert usage._count_callbacks is count_callbacks
    assert usage._count_callbacks is real


def test_tunes_usage_tag_imports_no_tracker_library():
    probe = ("import sys\nfrom ray.air._internal import usage\nfrom ray.tune import Callback\n"
             "from orchestrator.unpromised import callbacks_counted_by_name\n"
             "with callbacks_counted_by_name():\n    usage.tag_callbacks([Callback()])\n"
             "print(sorted(m for m in ('mlflow', 'wandb', 'comet_ml', 'aim') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True,
                         cwd=ORCHESTRATOR.parent)
    assert out.stdout.split()[-1] == "[]", out.stdout + out.stderr


def test_tunes_experiment_state_is_written_whole_or_not_at_all(tmp_path):
    """CI, 2026-12-02: a driver killed while Tune wrote its experiment state left it
    cut short (Tune writes it in place), and the Optuna sweep could not resume. Within
    `experiment_state_written_whole`, a save that dies mid-write (here the encoder,
    halfway through the trials) leaves the last whole state and no half file; a save
    that ends replaces it. Outside it, Tune's own save is back (and cuts it short)."""
    import json
    import types

    from ray.tune.execution.tune_controller import TuneController

    from orchestrator.unpromised import experiment_state_written_whole

    class Unencodable:
        def __reduce__(self):
            raise RuntimeError("killed mid-write")

    def controller(trials):
        c = object.__new__(TuneController)
        saved = types.SimpleNamespace(save_to_dir=lambda *args, **kwargs: None)
        c.__dict__.update(_session_str="2026-12-02_00-00-00", _start_time=0.0, _search_alg=saved, _callbacks=saved,
                          _storage=types.SimpleNamespace(experiment_driver_staging_path=str(tmp_path)))
        c._get_trial_checkpoints = lambda: {i: trial for i, trial in enumerate(trials)}
        c.__getstate__ = lambda: {}
        return c

    state = tmp_path / "experiment_state-2026-12-02_00-00-00.json"
    with experiment_state_written_whole():
        controller(["first " * 1000]).save_to_dir()
        assert json.loads(state.read_text())["trial_data"] == ["first " * 1000]
        with pytest.raises(RuntimeError, match="killed mid-write"):
            controller(["second " * 1000, Unencodable()]).save_to_dir()
        assert json.loads(state.read_text())["trial_data"] == ["first " * 1000]
        assert sorted(p.name for p in tmp_path.iterdir()) == [state.name]
        controller(["third"]).save_to_dir()
        assert json.loads(state.read_text())["trial_data"] == ["third"]
    with pytest.raises(RuntimeError, match="killed mid-write"):
        controller(["second " * 1000, Unencodable()]).save_to_dir()
    with pytest.raises(json.JSONDecodeError):
        json.loads(state.read_text())


def _sync(staging, run_dir) -> None:
    """One sync of Tune's staging folder into a local run directory, by Tune's own syncer."""
    import pyarrow.fs
    from ray.train._internal.storage import _FilesystemSyncer

    syncer = _FilesystemSyncer(storage_filesystem=pyarrow.fs.LocalFileSystem(), sync_period=0, sync_timeout=60)
    assert syncer.sync_up(str(staging), str(run_dir))
    syncer.wait()


def test_the_run_directorys_copy_of_tunes_state_is_never_read_cut_short(tmp_path):
    """Issue 83, class 3: Tune copies its staging folder over the run directory's
    files in place, so a reader (resume, status) now and then read the experiment
    state empty or cut short, and the half-written files of a save in progress were
    copied too. Within `run_directory_written_whole`, a reader that reads while sync
    after sync rewrites the file always parses a whole one, and no half file or
    part of a copy is left in the run directory."""
    import json
    import threading

    from orchestrator.unpromised import run_directory_written_whole

    staging, run_dir = tmp_path / "staging", tmp_path / "run"
    (staging / "trial").mkdir(parents=True)
    state, rows = staging / "experiment_state-x.json", staging / "trial" / "result.json"
    (staging / ".experiment_state-x.json.writing").write_text('{"half')  # a save of Tune's in progress
    (staging / "tmp-search_gen_state-x.json").write_text('{"half')  # Tune's own atomic save, in progress
    bad, done = [], threading.Event()

    def read():
        while not done.is_set():
            for path in (run_dir / state.name, run_dir / "trial" / rows.name):
                try:
                    text = path.read_text()
                except FileNotFoundError:
                    continue
                try:
                    json.loads(text)
                except ValueError:
                    bad.append(len(text))

    with run_directory_written_whole():
        state.write_text(json.dumps({"trial_data": ["0" * 4_000_000]}))
        rows.write_text(json.dumps({"samples": "0" * 4_000_000}))
        _sync(staging, run_dir)
        reader = threading.Thread(target=read)
        reader.start()
        for k in range(1, 16):
            state.write_text(json.dumps({"trial_data": [str(k % 10) * (4_000_000 + k)]}))
            rows.write_text(json.dumps({"samples": str(k % 10) * (4_000_000 + k)}))
            _sync(staging, run_dir)
        done.set()
        reader.join()
    assert not bad, f"{len(bad)} reads of a file cut short (lengths {bad[:5]})"
    assert json.loads((run_dir / state.name).read_text())["trial_data"] == ["5" * 4_000_015]
    assert sorted(p.relative_to(run_dir).as_posix() for p in run_dir.rglob("*")) == [
        "experiment_state-x.json", "trial", "trial/result.json"]


def test_a_sync_killed_midway_leaves_the_last_whole_copy(tmp_path, monkeypatch):
    import shutil

    from orchestrator.unpromised import run_directory_written_whole

    staging, run_dir = tmp_path / "staging", tmp_path / "run"
    staging.mkdir()
    (staging / "experiment_state-x.json").write_text('{"trials": 1}')
    with run_directory_written_whole():
        _sync(staging, run_dir)
        (staging / "experiment_state-x.json").write_text('{"trials": 2}')

        def killed(src, dst, **kwargs):
            Path(dst).write_text('{"tri')
            raise KeyboardInterrupt

        monkeypatch.setattr(shutil, "copy2", killed)
        with pytest.raises(KeyboardInterrupt):
            from orchestrator.unpromised import copy_whole

            copy_whole(str(staging), str(run_dir))
        monkeypatch.undo()
        assert (run_dir / "experiment_state-x.json").read_text() == '{"trials": 1}'
        _sync(staging, run_dir)  # the next sync replaces the half copy it left
    assert (run_dir / "experiment_state-x.json").read_text() == '{"trials": 2}'
    assert sorted(p.name for p in run_dir.iterdir()) == ["experiment_state-x.json"]


def test_what_wandbs_logging_actor_prints_of_its_own_goes_to_the_runs_log_not_the_console(tmp_path):
    """Issue 83, class 9: a W&B server that failed a run put wandb's messages and its
    service's Go panic (26 lines) on the console. They go to the run's log; the
    tool's own word that W&B stopped stays on the console, once."""
    from ray._private.ray_logging import global_worker_stdstream_dispatcher as dispatcher

    from orchestrator import progress
    from orchestrator.unpromised import WANDB_ACTOR, WANDB_SAID, worker_lines_to_the_log

    printed = []
    dispatcher.add_handler("ray_print_logs", lambda data: printed.append(data["lines"]))
    log = tmp_path / "icr-sweep.log"
    try:
        worker_lines_to_the_log()
        with progress.console(False, log):
            pass  # Tune's loop ended: W&B's actor prints as its runs end
        said = f"{WANDB_SAID} t0 (HandleAbandonedError: ); the sweep goes on"
        panic = ["wandb: [wandb.login()] Loaded credentials for http://127.0.0.1:1 from WANDB_API_KEY.",
                 "panic: runtime error: invalid memory address or nil pointer dereference", "goroutine 89 [running]:",
                 "wandb: ERROR Problem finishing run"]
        dispatcher.emit({"lines": [*panic, said], "pid": 7, "is_err": True, "actor_name": WANDB_ACTOR})
        dispatcher.emit({"lines": ["step 10"], "pid": 8, "is_err": True, "actor_name": "transformer-cot-tiny"})
    finally:
        dispatcher.remove_handler("ray_print_logs")
    assert printed == [[said]]
    assert all(line in log.read_text() for line in [*panic, "step 10"])


def test_the_report_names_the_wandb_server_a_run_logged_to(monkeypatch, tmp_path):
    """Issue 83, class 9: the closing line named wandb.ai for a server of one's own."""
    from orchestrator.report import open_commands
    from orchestrator.rundir import Run

    run = Run.__new__(Run)
    run.spec = {"name": "s", "tracking": {"tensorboard": False, "wandb": {"project": "p", "mode": "online"}}}
    monkeypatch.setenv("WANDB_BASE_URL", "http://me:PA55@wandb.lab:8080/")
    assert open_commands(run, str(tmp_path), tmp_path)[-1] == "W&B: http://wandb.lab:8080/p (group s)"
    monkeypatch.delenv("WANDB_BASE_URL")
    assert open_commands(run, str(tmp_path), tmp_path)[-1] == "W&B: https://wandb.ai/p (group s)"


def test_no_worker_is_started_ahead_unless_the_user_says_so_and_the_environment_is_left_as_it_was(monkeypatch):
    # The raylet starts with the driver's environment (the e2e test of a killed driver
    # checks that no worker sat idle); the driver's own environment is left as it was.
    import os

    from orchestrator.unpromised import no_idle_workers_ahead

    key = "RAY_prestart_worker_first_driver"
    monkeypatch.delenv(key, raising=False)
    with no_idle_workers_ahead():
        assert os.environ[key] == "0"
    assert key not in os.environ
    monkeypatch.setenv(key, "1")
    with no_idle_workers_ahead():
        assert os.environ[key] == "1"
    assert os.environ[key] == "1"


def test_wandbs_logging_actor_takes_its_items_in_the_order_they_were_sent_whatever_order_they_arrive_in():
    # The actor runs `put` beside `run` in a second thread, which Ray does not promise
    # to run in the order sent: the numbers restore it, and a number below the next
    # expected (a call Ray retried into a restarted actor) is taken as it comes.
    import threading

    from orchestrator.unpromised import Inbox

    inbox = Inbox()
    for number in (0, 2, 1):
        inbox.put(number, f"row {number}")
    assert [inbox.get() for _ in range(3)] == ["row 0", "row 1", "row 2"]

    restarted = Inbox()  # a fresh actor starts at the first number it is given
    restarted.put(5, "row 5")
    assert restarted.get() == "row 5"
    restarted.put(7, "row 7")
    restarted.put(4, "row 4, retried")
    assert restarted.get() == "row 4, retried"
    taken = []
    waiting = threading.Thread(target=lambda: taken.append(restarted.get()))
    waiting.start()
    waiting.join(0.2)
    assert waiting.is_alive() and not taken  # row 6 has not come: row 7 waits for it
    restarted.put(6, "row 6")
    waiting.join(5)
    assert taken == ["row 6"] and restarted.get() == "row 7"


def test_wandbs_logging_actor_gets_its_items_by_its_own_calls_not_a_queue_actor_per_trial(monkeypatch, tmp_path):
    # Ray's callback starts a queue actor (a worker process) per trial beside its logging
    # actor; here the logging actor is handed each item itself, numbered in order.
    from orchestrator.trackers.wandb import wandb_tracker

    made, calls = [], []

    class Remote:
        def __init__(self, name):
            self.name = name

        def remote(self, *args, **kwargs):
            calls.append((self.name, args, kwargs))
            return f"ref {len(calls)}"

    class Handle:
        put, run = Remote("put"), Remote("run")

    class Made:
        def remote(self, **kwargs):
            made.append(kwargs)
            return Handle()

    import ray

    monkeypatch.setattr(ray, "remote", lambda **options: (lambda cls: Made()))
    monkeypatch.setattr(ray, "get_runtime_context", lambda: type("C", (), {"get_node_id": lambda self: "0" * 56})())
    callback = wandb_tracker()(project="p", mode="offline")
    trial = type("Trial", (), {"local_path": str(tmp_path)})()
    callback._start_logging_actor(trial, [], name="t")
    callback._trial_queues[trial].put(("result", {"a": 1}))
    callback._trial_queues[trial].put(("end", None))
    assert made[0]["queue"] is None and made[0]["name"] == "t"
    assert [(name, args) for name, args, _ in calls] == [("run", ()), ("put", (0, ("result", {"a": 1}))),
                                                         ("put", (1, ("end", None)))]
    assert callback._logging_future_to_trial == {"ref 1": trial}
