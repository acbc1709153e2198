"""Run directories: refused before anything starts when they cannot be written,
locked for the whole run, and a second driver on the same sweep refused."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from orchestrator.cli import app
from orchestrator.rundir import RunDirError, RunLock, check_storage, driver_is_live

ROOT = Path(__file__).parents[2]
MICRO = str(ROOT / "sweeps" / "istree_micro.yaml")
runner = CliRunner()


def launch(*args):
    return runner.invoke(app, ["launch", MICRO, *args])


def test_storage_that_is_a_file_is_refused_before_ray_starts(tmp_path):
    blocker = tmp_path / "runs"
    blocker.write_text("not a directory")
    result = launch("--storage", str(blocker))
    assert result.exit_code == 2
    assert f"{blocker} is a file" in result.output and "choose another --storage" in result.output
    assert "Starting a local Ray" not in result.output


def test_a_name_too_long_for_the_filesystem_is_refused(tmp_path):
    result = launch("--storage", str(tmp_path / ("r" * 300)))
    assert result.exit_code == 2 and "over the 255-byte limit of a file name" in result.output


def test_unwritable_storage_is_refused():
    # sysfs refuses new directories to every user, root included.
    result = launch("--storage", "/sys/icr-sweep-runs")
    assert result.exit_code == 2
    assert "/sys/icr-sweep-runs/istree_micro cannot be written" in result.output and "choose another --storage" in result.output


def test_check_storage_accepts_a_new_directory(tmp_path):
    check_storage(str(tmp_path / "a" / "b"))
    check_storage(f"file://{tmp_path}/c")
    assert (tmp_path / "a" / "b").is_dir() and (tmp_path / "c").is_dir()


def test_a_second_driver_on_a_running_sweep_is_refused(tmp_path):
    run_dir = tmp_path / "runs" / "istree_micro"
    with RunLock(str(run_dir)):
        assert driver_is_live(run_dir)
        result = launch("--storage", str(tmp_path / "runs"))
        assert result.exit_code == 2
        assert f"in use by another icr-sweep (pid {os.getpid()})" in result.output
        with pytest.raises(RunDirError):
            RunLock(str(run_dir)).__enter__()
    assert not driver_is_live(run_dir)


def test_a_killed_driver_leaves_no_stale_lock(tmp_path):
    run_dir = tmp_path / "run"
    code = f"from orchestrator.rundir import RunLock; import time; RunLock({str(run_dir)!r}).__enter__(); print('held', flush=True); time.sleep(60)"
    holder = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        assert driver_is_live(run_dir)
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    deadline = time.time() + 5
    while driver_is_live(run_dir) and time.time() < deadline:
        time.sleep(0.05)
    with RunLock(str(run_dir)):
        pass


def test_launch_with_an_address_where_nothing_listens_fails_fast(tmp_path):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    started = time.monotonic()
    result = subprocess.run([sys.executable, "-m", "orchestrator.cli", "launch", MICRO, "--storage", str(tmp_path),
                             "--address", f"127.0.0.1:{port}"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2, result.stderr
    assert f"nothing answers at 127.0.0.1:{port}" in result.stderr and "from --address" in result.stderr
    assert not list(tmp_path.glob("*/*/params.json"))
    assert time.monotonic() - started < 100  # it did not wait on Ray's endless retries


def test_auto_names_ray_address_as_the_source(monkeypatch):
    from orchestrator.cluster import ClusterError, resolve_address

    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:9")
    with pytest.raises(ClusterError, match="from RAY_ADDRESS"):
        resolve_address("auto", timeout=1)


def test_a_taken_dashboard_port_is_replaced_by_a_free_one():
    import socket

    from orchestrator.cluster import _free_port

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        taken = s.getsockname()[1]
        other = _free_port("127.0.0.1", taken)
        assert other != taken
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", other))


TRAIN = ["train", "--arch", "transformer", "--size", "tiny", "--setup", "cot", "--n", "4", "--samples", "64",
         "--batch-size", "32", "--eval-every", "64", "--val-samples", "8"]


def _a_sweep_run(tmp_path) -> Path:
    """A run directory as `launch` leaves it: the spec record and one trial's files."""
    run_dir = tmp_path / "runs" / "sweep"
    trial = run_dir / "transformer-cot-tiny-n5-lr0.001-s0"
    trial.mkdir(parents=True)
    (run_dir / "icr-sweep.json").write_text('{"spec": {}}')
    (trial / "params.json").write_text('{"trial": {"name": "transformer-cot-tiny-n5-lr0.001-s0"}}')
    (trial / "result.json").write_text('{"samples": 1}\n')
    return run_dir


@pytest.mark.parametrize("where", ["the sweep", "a trial of the sweep", "inside a trial"])
def test_train_refuses_a_directory_a_sweep_owns_and_leaves_it_as_it_was(tmp_path, where, thread_pools):
    """`train --out` into a sweep's run directory, one of its trials, or below one
    (issue 28, class 3: it deleted the trial's result.json and rewrote its params)."""
    run_dir = _a_sweep_run(tmp_path)
    trial = next(run_dir.glob("*/params.json")).parent
    out = {"the sweep": run_dir, "a trial of the sweep": trial, "inside a trial": trial / "x"}[where]
    before = {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}
    result = runner.invoke(app, [*TRAIN, "--out", str(out)])
    assert result.exit_code == 2, result.output
    assert "a sweep's run directory" in result.output and str(run_dir) in result.output
    assert {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()} == before


def test_train_refuses_another_trials_directory_and_an_empty_out(tmp_path, thread_pools):
    out = tmp_path / "mine"
    first = runner.invoke(app, [*TRAIN, "--out", str(out)])
    assert first.exit_code == 0, first.output
    kept = (out / "result.json").read_bytes()
    other = runner.invoke(app, [*TRAIN[:8], "5", *TRAIN[9:], "--out", str(out)])  # n 5: another trial
    assert other.exit_code == 2 and "holds the trial transformer-cot-tiny-n4" in other.output, other.output
    assert (out / "result.json").read_bytes() == kept
    again = runner.invoke(app, [*TRAIN, "--out", str(out)])  # the same trial: its own directory, resumed
    assert again.exit_code == 0, again.output
    above = runner.invoke(app, [*TRAIN, "--out", str(tmp_path)])  # a directory of trials
    assert above.exit_code == 2 and "holds the directories of other trials (mine)" in above.output, above.output
    empty = runner.invoke(app, [*TRAIN, "--out", ""])
    assert empty.exit_code == 2 and "--out is empty" in empty.output, empty.output


def test_a_second_train_of_one_out_is_refused_while_the_first_runs(tmp_path, thread_pools):
    # Issue 42, class 5: two identical `train --out tr/x` 1.5 s apart both trained from
    # zero and wrote every row twice. The trial directory's lock is held by the first.
    from orchestrator.rundir import TRIAL_LOCK_FILE

    out = tmp_path / "x"
    with RunLock(str(out), TRIAL_LOCK_FILE):  # as a running `train` holds it
        second = runner.invoke(app, [*TRAIN, "--out", str(out)])
        assert second.exit_code == 2 and "in use by another `icr-sweep train`" in second.output, second.output
        assert not (out / "result.json").exists()
    first = runner.invoke(app, [*TRAIN, "--out", str(out)])  # the lock released: it runs
    assert first.exit_code == 0, first.output
    again = runner.invoke(app, [*TRAIN, "--out", str(out)])  # and a finished trial's lock is no obstacle
    assert again.exit_code == 0, again.output


def test_a_trial_that_cannot_learn_is_named_so_with_what_caused_it(tmp_path, thread_pools):
    # Issue 42, class 7: `train --lr 1e6` ended with exit 0 and validation loss 3.0910
    # (ln 22, a uniform guess) at every evaluation, and no word; a NaN at the first
    # step was blamed on the rate.
    from icr_sweep import load_run

    out = tmp_path / "lr"
    run = runner.invoke(app, [*TRAIN[:10], "1024", "--batch-size", "32", "--eval-every", "512", "--val-samples", "16",
                              "--lr", "1e6", "--out", str(out)])
    assert run.exit_code == 0, run.output
    assert "learnt nothing: validation loss" in run.output and "a uniform guess over its 21 tokens" in run.output, run.output
    status = runner.invoke(app, ["status", str(out), "--format", "json"])
    assert "learnt nothing" in status.output, status.output
    assert "learnt nothing" in load_run(out, evaluations=False)["error"].iloc[0]
    nan = runner.invoke(app, ["train", "--arch", "rwkv7", "--size", "tiny", "--setup", "cot", "--n", "4", "--samples", "256",
                              "--batch-size", "32", "--eval-every", "256", "--val-samples", "8", "--dim", "head_dim=1",
                              "--out", str(tmp_path / "nan")])
    assert nan.exit_code == 2 and "at step 1" in nan.output and "the rate is not the cause" in nan.output, nan.output
    assert "tiny-headdim1" in nan.output


def test_launch_refuses_storage_without_room_for_a_checkpoint_per_running_trial(tmp_path, monkeypatch):
    # Issue 42, class 4: on a 2 MB tmpfs every trial of the laptop spec trained to its
    # first evaluation, failed there for lack of room for its checkpoint (~17 MiB
    # needed), and was retried from zero twice.
    import shutil
    from collections import namedtuple

    from orchestrator.cli import sweep as cli_sweep

    real = shutil.disk_usage
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage(2 << 20, 0, 2 << 20) if str(path).startswith(
        str(tmp_path)) else real(path))
    monkeypatch.setattr(cli_sweep, "_start_ray", lambda opts, spec: pytest.fail("Ray was started"))
    result = runner.invoke(app, ["launch", str(ROOT / "sweeps" / "istree_laptop.yaml"), "--storage", str(tmp_path / "runs"),
                                 "--num-cpus", "2"])
    assert result.exit_code == 2, result.output
    assert ("storage " + str(tmp_path / "runs" / "istree_laptop") + ": 2.0 MiB free, but the 2 trial(s) that run at once "
            "need about 17 MiB to keep their checkpoints") in result.output.replace("\n", " "), result.output
    assert not (tmp_path / "runs" / "istree_laptop").exists()  # nothing kept


def test_launch_refuses_a_trial_directory_and_a_place_inside_a_sweep(tmp_path):
    run_dir = _a_sweep_run(tmp_path)
    inside = runner.invoke(app, ["launch", MICRO, "--storage", str(run_dir)])
    assert inside.exit_code == 2 and f"lies inside the sweep run directory {run_dir}" in inside.output, inside.output
    (tmp_path / "solo").mkdir()
    (tmp_path / "solo" / "istree_micro").mkdir()
    (tmp_path / "solo" / "istree_micro" / "params.json").write_text("{}")
    solo = runner.invoke(app, ["launch", MICRO, "--storage", str(tmp_path / "solo")])
    assert solo.exit_code == 2 and "is the directory of one trial" in solo.output, solo.output


def test_a_driver_that_fails_mid_sweep_still_reports_and_says_how_to_resume(tmp_path, monkeypatch):
    """Issue 28, class 6: a disk that filled mid-sweep killed the driver with Tune's
    UnpicklingError: no report, no resume command. The trials' files are intact, so
    the command ends as a stop does: the report, the resume command, exit 130."""
    import errno
    import json as _json

    from orchestrator import tune as sweep
    from orchestrator.cli import sweep as cli_sweep

    def half_done(spec, resources):
        trial = next(iter(__import__("orchestrator.grid", fromlist=["expand"]).expand(spec)))
        d = Path(spec.run_dir()) / trial.name
        d.mkdir(parents=True)
        (d / "params.json").write_text(_json.dumps({"trial": trial.model_dump(mode="json")}))
        (d / "result.json").write_text(_json.dumps({"samples": 1024, "val_exact_match": 0.5, "final_eval": False}) + "\n")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(cli_sweep, "_start_ray", lambda opts, spec: {"cpu": 1, "gpu": 0})
    monkeypatch.setattr(sweep, "launch", half_done)
    result = runner.invoke(app, ["launch", MICRO, "--storage", str(tmp_path / "runs")])
    assert result.exit_code == 130, result.output
    assert "The sweep's driver stopped: OSError" in result.output and "the disk is full" in result.output
    assert f"icr-sweep resume {tmp_path / 'runs' / 'istree_micro'}" in result.output
    assert (tmp_path / "runs" / "istree_micro" / "report.md").exists()


def test_resume_sets_a_row_cut_short_aside_so_the_next_rows_are_read(tmp_path):
    """The CI run of issue 28's full-disk test lost an evaluation: its row was cut
    short by the full disk, the resumed trial appended the rows that followed onto
    that line, and the glued line read as no row at all. restore_rows (run by resume)
    keeps a result.json's intact rows, ending in a newline, and sets the file as it
    was aside under a name no earlier repair used."""
    import json

    from orchestrator.rundir import parse_rows, restore_rows

    trial = tmp_path / "run" / "transformer-cot-tiny-n5-lr3e-3-s0"
    trial.mkdir(parents=True)
    whole, cut = json.dumps({"samples": 1024, "evaluated": True}), json.dumps({"samples": 2048, "evaluated": True})[:20]
    results = trial / "result.json"
    for k, kept in ((1, "result-damaged.json"), (2, "result-damaged-2.json")):
        results.write_text(whole + "\n" + cut)
        assert list(restore_rows(str(tmp_path / "run"))) == [trial.name]
        assert results.read_text() == whole + "\n" and (trial / kept).read_text() == whole + "\n" + cut
        with open(results, "a") as f:  # as Tune appends the resumed trial's next row
            f.write(json.dumps({"samples": 2048, "evaluated": True}) + "\n")
        assert [r["samples"] for r in parse_rows(results.read_text())] == [1024, 2048]
    assert restore_rows(str(tmp_path / "run")) == {}  # an intact file is left alone


def test_a_ray_start_that_fails_is_one_line_and_leaves_no_run_directory(tmp_path, monkeypatch):
    """Issue 30: a Ray start that timed out printed a full traceback."""
    from orchestrator import cluster

    def timed_out(*args, **kwargs):
        raise TimeoutError("The current node timed out during startup. This could happen because ...\nmore lines")

    monkeypatch.setattr(cluster, "start_ray", timed_out)
    result = CliRunner().invoke(app, ["launch", MICRO, "--storage", str(tmp_path)])
    assert result.exit_code == 2, result.output
    assert "error: Ray did not start (TimeoutError: The current node timed out during startup." in result.output
    assert "Traceback" not in result.output and "more lines" not in result.output
    assert not (tmp_path / "istree_micro").exists()


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_stop_while_the_final_report_is_written_says_how_to_write_it(tmp_path, signum):
    """Issue 52, class 4: Ctrl-C or SIGTERM just after Tune's loop, while the report
    was written, ended the driver (exit 130 or 15) without a line after Tune's last:
    no report.md, and nothing said `icr-sweep report RUN` would write it."""
    script = f"""
import os, signal, time
from typer.testing import CliRunner
from orchestrator.cli import app, results, sweep

def sweep_ran(opts, spec):
    return {{"cpu": 1, "gpu": 0}}

def writing_the_report(run_dir, *args, **kwargs):
    os.kill(os.getpid(), {int(signum)})
    time.sleep(5)
    raise SystemExit("the signal did not stop the report")

sweep._start_ray = sweep_ran
import orchestrator.tune as tune
tune.launch = lambda spec, resources: None
import orchestrator.rundir.guard as guard
guard.Footprint.discard = lambda self: None  # as when trials ran: the run is kept
results.write_and_print_report = writing_the_report
result = CliRunner().invoke(app, ["launch", {MICRO!r}, "--storage", {str(tmp_path)!r}])
print("EXIT", result.exit_code)
print(result.output)
"""
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120)
    out = done.stdout + done.stderr
    assert done.returncode == 0 and "EXIT 130" in out, out[-2000:]
    assert "Stopped while the report was written" in out and f"icr-sweep report {tmp_path / 'istree_micro'}" in out


def test_a_sweep_whose_optuna_budget_is_not_all_started_ends_saying_so_with_the_resume_command(tmp_path, monkeypatch,
                                                                                                capsys):
    """Issue 83, class 1: an Optuna sweep whose last resume ran 3 of its 4 trials
    ended with exit 0 and no word of the fourth. Its run's count of trials not
    started (the plan's budget less the trials it holds) ends it with exit 130
    and the resume command, as trials left pending do."""
    import pandas as pd
    import typer

    from orchestrator.cli import results, sweep
    from orchestrator.rundir import Run

    trials = pd.DataFrame({"trial": ["a", "b", "c"], "state": ["finished"] * 3})
    run = Run(trials, plan={"method": "optuna", "trial_count": 4, "trials": {}})
    assert run.not_started == 1 and Run(trials, plan={"method": "grid", "trial_count": 4, "trials": {}}).not_started == 0
    finished = trials.copy()
    finished.attrs["not_started"] = run.not_started
    (tmp_path / "icr-sweep.log").write_text("")  # the driver's own log: its run directory is whole
    monkeypatch.setattr(results, "write_and_print_report", lambda run_dir: finished)
    with pytest.raises(typer.Exit) as ended:
        sweep._finish(str(tmp_path))
    said = capsys.readouterr().err
    assert ended.value.exit_code == 130
    assert "stopped with 1 of 4 trials unfinished (1 not started" in said and f"icr-sweep resume {tmp_path}" in said, said


def test_a_sigterm_while_ray_starts_stops_the_launch_as_a_ctrl_c_does(tmp_path):
    """Issue 83, class 7: ray.init installs its own SIGTERM handler (sys.exit(15))
    while it starts, and a SIGTERM then ended the launch with exit 15 and nothing
    said. It stops as any stop before a trial: said, nothing of the launch kept,
    exit 130."""
    script = f"""
import os, signal, sys, time
from typer.testing import CliRunner
from orchestrator import cluster
from orchestrator.cli import app

def ray_init_meets_a_sigterm(spec, **opts):
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(signum))  # what ray.init installs
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(5)
    raise SystemExit("the signal did not stop the start")

cluster.start_ray = ray_init_meets_a_sigterm
result = CliRunner().invoke(app, ["launch", {MICRO!r}, "--storage", {str(tmp_path / "runs")!r}])
print("EXIT", result.exit_code)
print(result.output)
"""
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120)
    out = done.stdout + done.stderr
    assert "EXIT 130" in out and "Stopped before any trial started: nothing of this launch was kept" in out, out[-2000:]
    assert not (tmp_path / "runs").exists()


def test_a_trial_without_room_for_its_checkpoint_is_told_where_to_free_space():
    """Issue 83, class 9: a checkpoint is made in the worker's temp folder first; a full
    temp folder was blamed on the storage ("free space on the storage")."""
    import pandas as pd

    from orchestrator.cli.sweep import advice_for_failures

    failed = pd.DataFrame({"state": ["error", "error"], "error": [
        "DiskSpaceError: no room for a checkpoint in /tmp/icr-trial-x1/checkpoint: 3 MiB free, about 40 MiB needed; "
        "free some space, then resume",
        "DiskSpaceError: no room for a checkpoint in /runs/s/t: 1 MiB free, about 40 MiB needed; free some space"]})
    advice = advice_for_failures(failed, "/runs/s")
    assert "2 trial(s) found no room for a checkpoint in /runs/s/t, /tmp/icr-trial-x1/checkpoint: free space there" \
        in advice and "on the storage" not in advice, advice


def test_a_run_directory_deleted_mid_sweep_is_said_lost_and_no_resume_is_advised(tmp_path, monkeypatch, capsys):
    """Issue 83, class 9: the run directory deleted while the sweep ran (Tune's sync
    made it anew, without the spec record): the closing lines advised a resume,
    which refused ("not a sweep run directory")."""
    import pandas as pd
    import typer

    from orchestrator.cli import results, sweep
    from orchestrator.rundir import write_spec_record
    from orchestrator.spec import load_spec

    trials = pd.DataFrame({"trial": ["a", "b"], "state": ["error", "pending"], "error": ["gone", ""]})
    monkeypatch.setattr(results, "write_and_print_report", lambda run_dir: trials)
    with pytest.raises(typer.Exit) as ended:
        sweep._finish(str(tmp_path))
    said = capsys.readouterr().err
    assert ended.value.exit_code == 1 and "no longer holds icr-sweep.json" in said and "resume" not in said.split(
        "(it would refuse)")[1], said
    write_spec_record(str(tmp_path), load_spec(MICRO).model_dump(mode="json"), {"cpu": 1, "gpu": 0})
    with pytest.raises(typer.Exit) as ended:
        sweep._finish(str(tmp_path))
    assert ended.value.exit_code == 130 and f"icr-sweep resume {tmp_path}" in capsys.readouterr().err
