"""A run directory damaged by hand (issue 65, class 6): a trial or array whose
checkpoints are gone says it starts over and never writes a row twice; a lock or a
result.json that is a directory is named before Ray starts, never a traceback or a
resume that asks for another resume."""

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from typer.testing import CliRunner

from orchestrator.cli import app
from orchestrator.rundir import STARTED_OVER_FILE, load_trials, parse_rows, read_results
from tests.orchestrator.e2e import SWEEPS, cli, free_port, results_so_far

ROOT = Path(__file__).parents[2]
STORED = ROOT / "tests" / "fixtures" / "stored_run" / "istree_micro"
runner = CliRunner()


MEMBERS = ["transformer-cot-tiny-n5-lr3e-3-s0", "transformer-cot-tiny-n5-lr3e-3-s1"]


def _array_launched(tmp_path, ray_temp, name: str, samples: int, until, **resources):
    """Launches an array of the two MEMBERS (tiny, n=5, fuse 2) and waits until
    `until(run)` (True ends the wait); returns the driver's process and the run."""
    spec = yaml.safe_load((SWEEPS / "istree_micro.yaml").read_text())
    spec.update(name=name, axes=dict(archs=["transformer"], setups=["cot"], sizes=["tiny"], n=[5], seeds=[0, 1]))
    spec["training"].update(samples=samples, length_groups=1)
    spec["resources"].update(fuse=2, **resources)
    spec_path, storage = tmp_path / f"{name}.yaml", tmp_path / "runs"
    spec_path.write_text(yaml.safe_dump(spec))
    run = storage / name
    proc = subprocess.Popen(cli("launch", str(spec_path), "--storage", str(storage), ray_temp=ray_temp, port=free_port()),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    deadline = time.time() + 600
    while time.time() < deadline and proc.poll() is None and not until(run):
        time.sleep(0.1)
    return proc, run


def _stored_copy(tmp_path) -> Path:
    run = tmp_path / "runs" / "istree_micro"
    shutil.copytree(STORED, run)
    return run


def test_a_lock_file_that_is_a_directory_is_named_not_a_traceback(tmp_path):
    run = _stored_copy(tmp_path)
    (run / ".icr-sweep.lock").mkdir()
    result = runner.invoke(app, ["resume", str(run)])
    assert result.exit_code == 2, result.output
    assert f"{run}/.icr-sweep.lock is a directory, not the lock file icr-sweep keeps there" in result.output
    assert "Traceback" not in result.output


def test_a_result_json_that_is_a_directory_is_named_before_ray_starts(tmp_path, monkeypatch):
    """The resume stopped with "Interrupted" at the trial's first row, and asked for
    another resume, which did the same."""
    from orchestrator.cli import sweep as cli_sweep

    run = _stored_copy(tmp_path)
    trial = run / "mamba-cot-tiny-n5-lr1e-2-s0"
    (trial / "result.json").rename(trial / "result.json.kept")
    (trial / "result.json").mkdir()
    monkeypatch.setattr(cli_sweep, "_start_ray", lambda opts, spec: pytest.fail("Ray started"))
    result = runner.invoke(app, ["resume", str(run)])
    assert result.exit_code == 2, result.output
    assert f"{trial}/result.json is not a file (it holds the trial's results)" in result.output, result.output
    assert "Move each away" in result.output


def test_a_trial_without_a_checkpoint_but_with_rows_starts_over_saying_so(tmp_path, capsys):
    """A lone trial whose checkpoints were deleted restarted from 0 without a word
    (the worker's side: orchestrator/worker.py); the driver then sets its earlier
    rows aside at its first row (trial_files.TrialFilesCallback), so none is written
    twice."""
    import pyarrow.fs

    from orchestrator.rundir import STARTED_OVER, TrialFiles
    from orchestrator.trial_files import TrialFilesCallback
    from orchestrator.worker import _starts_over

    trial = tmp_path / "transformer-cot-tiny-n5-lr3e-3-s0"
    files = TrialFiles(trial)
    files.write_config({"trial": {}})
    for samples in (1024, 2048):
        files.append({"samples": samples, "evaluated": True, "train_loss": 1.0})
    mark = _starts_over((pyarrow.fs.LocalFileSystem(), str(trial)), trial.name, tried=0)
    assert mark == {STARTED_OVER: 2048}
    said = capsys.readouterr().err
    assert (f"icr-sweep: {trial.name}: STARTING OVER from sample 0: no checkpoint of it is left, though its results "
            "had reached 2,048 samples; those rows are set aside") in said, said
    assert _starts_over((pyarrow.fs.LocalFileSystem(), str(tmp_path / "new")), "new", tried=0) == {}

    class Trial:
        local_path = str(trial)
        config = {"trial": {}}
        checkpoint = None
        storage = SimpleNamespace(storage_filesystem=pyarrow.fs.LocalFileSystem(), trial_fs_path=str(trial))

        def init_local_path(self):
            pass

    callback = TrialFilesCallback()
    callback.files[Trial] = TrialFiles(trial)
    callback.log_trial_result(1, Trial, {"samples": 1024, "evaluated": True, "train_loss": 2.0, **mark})
    callback.log_trial_result(2, Trial, {"samples": 2048, "evaluated": True, "train_loss": 1.5})
    assert [r["train_loss"] for r in parse_rows((trial / "result.json").read_text())] == [2.0, 1.5]
    assert [r["samples"] for r in parse_rows((trial / STARTED_OVER_FILE).read_text())] == [1024, 2048]
    assert [r["train_loss"] for r in read_results(trial)] == [2.0, 1.5]


def test_a_start_over_sets_its_rows_aside_where_the_run_keeps_them_replacing_no_file(tmp_path):
    """Issue 83, class 4: the driver writes a trial's rows into Ray's staging folder,
    which Tune's sync copies over the run directory; a trial that started over set its
    rows aside there, under a name free in the staging folder alone, and the sync
    replaced the run directory's result-before-start-over.json (an earlier set-aside,
    or a user's file). Now they are set aside in the run directory, under a free name,
    with the rows from before a rebuild."""
    import pyarrow.fs

    from orchestrator.rundir import EARLIER_RESULTS, STARTED_OVER, TrialFiles
    from orchestrator.trial_files import TrialFilesCallback
    from orchestrator.unpromised import copy_whole

    name = "transformer-cot-tiny-n5-lr3e-3-s0"
    stored, staging = tmp_path / "run" / name, tmp_path / "staging" / name
    TrialFiles(stored).write_config({"trial": {}})
    (stored / STARTED_OVER_FILE).write_text("a user's notes\n")
    TrialFiles(stored).append({"samples": 1024, "evaluated": True, "train_loss": 3.0})
    os.replace(stored / "result.json", stored / EARLIER_RESULTS)  # its rows from before a rebuild
    TrialFiles(stored).append({"samples": 2048, "evaluated": True, "train_loss": 2.0})

    class Trial:
        local_path, config, checkpoint = str(staging), {"trial": {}}, None
        storage = SimpleNamespace(storage_filesystem=pyarrow.fs.LocalFileSystem(), trial_fs_path=str(stored))

        def init_local_path(self):
            staging.mkdir(parents=True, exist_ok=True)

    callback, trial = TrialFilesCallback(), Trial()
    callback.log_trial_start(trial)
    callback.log_trial_result(1, trial, {"samples": 1024, "evaluated": True, "train_loss": 1.0, STARTED_OVER: 2048})
    copy_whole(str(staging.parent), str(stored.parent))  # Tune's sync
    assert (stored / STARTED_OVER_FILE).read_text() == "a user's notes\n"
    assert [r["train_loss"] for r in parse_rows((stored / "result-before-start-over-2.json").read_text())] == [3.0]
    assert [r["train_loss"] for r in parse_rows((stored / "result-before-start-over-3.json").read_text())] == [2.0]
    assert [r["train_loss"] for r in read_results(stored)] == [1.0]


@pytest.mark.slow
def test_an_array_whose_worker_was_killed_is_retried_and_one_whose_checkpoints_are_gone_starts_over(tmp_path,
                                                                                                   ray_temp):
    """Two damages of one array, each resumed (issue 63: one launch for both).
    Issue 65, class 7: its worker killed (max_failures: 0) left every member an
    error.txt; resume said they "failed before", trained nothing, exited 1, and advised
    another resume. A member's own failure stays; its array's is retried, from its
    checkpoint. Then the reproduction of the other: an interrupted array whose
    array-<first>/ folder is deleted trained its members again from 0, their
    result.json holding the first rows twice, with a message that it continued "from
    the newest intact checkpoint"."""
    members = MEMBERS
    # Killed after its first evaluation: five more are left to catch it midway, twice.
    kill_the_array, killed = _array_killed(members)
    proc, run = _array_launched(tmp_path, ray_temp, "damaged", 6144, kill_the_array, max_failures=0)
    out, _ = proc.communicate(timeout=300)
    assert killed and proc.returncode == 1, out[-3000:]
    states = load_trials(run).set_index("trial")["state"]
    assert (states == "error").all(), states
    assert "Retry them from their checkpoints with:" in out, out[-3000:]

    proc = subprocess.Popen(cli("resume", str(run), ray_temp=ray_temp, port=free_port()), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    deadline = time.time() + 600
    while time.time() < deadline and proc.poll() is None and not all(
            sum(bool(r.get("evaluated")) for r in results_so_far(run / m)) >= 3 for m in members):
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 130 and "failed before" not in out, out[-3000:]
    assert (load_trials(run).set_index("trial")["state"] == "interrupted").all(), out[-3000:]
    for m in members:  # retried from the checkpoint of its first evaluation: each evaluation once
        evaluations = [r["samples"] for r in read_results(run / m) if r.get("evaluated", True)]
        assert len(evaluations) >= 3, evaluations
        assert evaluations == list(range(1024, 1024 * len(evaluations) + 1, 1024)), evaluations

    (array,) = run.glob("array-*")
    shutil.rmtree(array)
    before = {m: max(r["samples"] for r in read_results(run / m)) for m in members}
    result = subprocess.run(cli("resume", str(run), ray_temp=ray_temp, port=free_port()), capture_output=True,
                            text=True, timeout=900)
    console = result.stdout + result.stderr
    assert result.returncode == 0, console[-3000:]
    assert "continuing from the newest intact checkpoint in its directory, where one is left" in console
    for m in members:
        assert f"{m}: STARTING OVER from sample 0" in console and f"reached {before[m]:,} samples" in console, \
            (m, console[-3000:])
        rows = parse_rows((run / m / "result.json").read_text())
        evaluated = [r["samples"] for r in rows if r.get("evaluated", True)]
        assert evaluated == sorted(set(evaluated)), (m, evaluated)  # no row twice
        assert [r["samples"] for r in read_results(run / m) if r.get("evaluated", True)] == list(range(1024, 6145, 1024))
        kept = parse_rows((run / m / STARTED_OVER_FILE).read_text())
        assert max(r["samples"] for r in kept) == before[m]  # the earlier rows, set aside
        assert not (run / m / "error.txt").exists()
    assert (load_trials(run)["state"] == "finished").all()


def _array_killed(members: list[str]):
    """(`until` for _array_launched, the pids it killed): once every member has
    evaluated, SIGKILLs the array's worker (Tune runs a trial in a working directory
    named after it)."""
    import os

    killed = []

    def kill_the_array(run) -> bool:
        if not all(any(r.get("evaluated") for r in results_so_far(run / m)) for m in members):
            return False
        for pid in (p for p in os.listdir("/proc") if p.isdigit()):
            try:
                if os.readlink(f"/proc/{pid}/cwd").endswith("/array-transformer-cot-tiny-n5-lr3e-3-s0"):
                    os.kill(int(pid), signal.SIGKILL)
                    killed.append(pid)
            except OSError:
                continue
        return bool(killed)

    return kill_the_array, killed


def test_a_members_own_failure_is_marked_to_stay_and_its_arrays_is_not(tmp_path):
    """What resume reads (orchestrator/worker.py, trackers.common.Members): a member whose
    own loss went non-finite stays failed; one that failed with its array is retried."""
    from types import SimpleNamespace

    import pyarrow.fs

    from orchestrator.rundir import ERROR_FILE, MEMBER_FAILED
    from orchestrator.trial_files import TrialFilesCallback

    callback = TrialFilesCallback()
    for name, own in (("diverged", True), ("crashed", False)):
        member = SimpleNamespace(local_path=str(tmp_path / name), storage=SimpleNamespace(
            storage_filesystem=pyarrow.fs.LocalFileSystem(), trial_fs_path=str(tmp_path / name)))
        callback.member_failed(member, f"{name}: the error", own=own)
        assert (tmp_path / name / ERROR_FILE).read_text() == f"{name}: the error\n"
        assert (tmp_path / name / MEMBER_FAILED).exists() == own


def test_a_trial_fetches_its_stored_rows_at_its_start_whether_or_not_tune_knew_a_checkpoint(tmp_path, monkeypatch,
                                                                                          capsys):
    """CI, 2026-12-02: a trial of an S3 run resumed with its last row alone. A trial
    whose directory is kept elsewhere (a remote run's) fetched its stored rows only
    where Tune's state knew a checkpoint of it; the trial finds its checkpoints in
    storage itself, so one Tune did not know of continued into a new result.json,
    which then replaced the stored one. Now every trial fetches them, the store
    asked again where it misses a request."""
    from types import SimpleNamespace

    import pyarrow.fs

    from orchestrator import trial_files
    from orchestrator.trackers import common
    from orchestrator.rundir import TrialFiles

    name = "mamba-cot-tiny-n5-lr3e-3-s0"
    stored, local = tmp_path / "bucket" / name, tmp_path / "node" / name
    stored.mkdir(parents=True)
    TrialFiles(stored).append({"samples": 1024, "evaluated": True, "train_loss": 2.0})
    misses = []
    real_copy = pyarrow.fs.copy_files

    def flaky_copy(*args, **kwargs):
        if len(misses) < common.FETCH_TRIES - 1:
            misses.append(1)
            raise OSError("the store did not answer in time")
        return real_copy(*args, **kwargs)

    monkeypatch.setattr(pyarrow.fs, "copy_files", flaky_copy)
    monkeypatch.setattr(common.time, "sleep", lambda s: None)

    class Trial:
        local_path, config, checkpoint = str(local), {"trial": {}}, None
        storage = SimpleNamespace(storage_filesystem=pyarrow.fs.LocalFileSystem(), trial_fs_path=str(stored))

        def init_local_path(self):
            local.mkdir(parents=True, exist_ok=True)

    callback = trial_files.TrialFilesCallback()
    callback.log_trial_result(1, Trial(), {"samples": 2048, "evaluated": True, "train_loss": 1.5})
    assert [r["samples"] for r in parse_rows((local / "result.json").read_text())] == [1024, 2048]
    assert len(misses) == common.FETCH_TRIES - 1 and "could not be fetched" not in capsys.readouterr().err


def test_what_a_killed_driver_left_half_written_is_removed_by_a_resume_and_nothing_else(tmp_path):
    """Issue 83, class 3: each driver left `.experiment_state-*.json.writing` behind;
    a copy killed midway leaves a hidden part. A resume removes both, and only them."""
    from orchestrator.rundir import remove_half_written

    (tmp_path / "t").mkdir()
    for name in (".experiment_state-2026-12-03_00-00-00.json.writing", ".tuner.pkl.icr-sync", "t/.result.json.icr-sync",
                 "experiment_state-2026-12-03_00-00-00.json", "t/result.json", ".my-notes"):
        (tmp_path / name).write_text("x")
    assert remove_half_written(str(tmp_path)) == [".experiment_state-2026-12-03_00-00-00.json.writing",
                                                   ".tuner.pkl.icr-sync", "t/.result.json.icr-sync"]
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file()) == [
        ".my-notes", "experiment_state-2026-12-03_00-00-00.json", "t/result.json"]
