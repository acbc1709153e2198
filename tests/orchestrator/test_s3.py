"""Sweeps stored on S3: launch, status, report and resume against a real S3 server
(moto's, on 127.0.0.1), through the filesystem layer Ray Tune itself uses."""

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from orchestrator.rundir import RunDirError, check_storage
from orchestrator.rundir import SPEC_FILE, STARTED_OVER_FILE
from orchestrator.spec import load_spec, run_spec
from orchestrator.storage import download_run, read_file
from tests.orchestrator.e2e import HALF_EVERY, SWEEPS, cli, free_port, kill_leftovers, killme_spec

BUCKET = "icr-sweep-test"


@pytest.fixture(scope="module")
def s3():
    """A real S3 endpoint on 127.0.0.1 with one bucket; the environment points
    boto3, pyarrow (and so Ray Tune) and child processes at it."""
    from moto.server import ThreadedMotoServer

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    env = dict(AWS_ENDPOINT_URL=f"http://127.0.0.1:{port}", AWS_ACCESS_KEY_ID="testing",
               AWS_SECRET_ACCESS_KEY="testing", AWS_DEFAULT_REGION="us-east-1")
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    import boto3

    client = boto3.client("s3")
    client.create_bucket(Bucket=BUCKET)
    yield client
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    server.stop()


def command(*args: str) -> list[str]:
    return [sys.executable, "-m", "orchestrator.cli", *args]


def _keys(client, prefix: str) -> list[str]:
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix)
    return [o["Key"] for page in pages for o in page.get("Contents", [])]


def test_storage_is_probed_with_a_real_write(s3):
    check_storage(f"s3://{BUCKET}/probe/run")
    assert not [k for k in _keys(s3, "probe/") if k.endswith(".icr-sweep-probe")]  # the probe is gone again
    with pytest.raises(RunDirError, match=r"s3://no-such-bucket-icr/run cannot be written .*credentials"):
        check_storage("s3://no-such-bucket-icr/run")


def test_a_launch_to_a_missing_bucket_starts_nothing(s3, tmp_path, ray_temp):
    result = subprocess.run(cli("launch", str(SWEEPS / "istree_micro.yaml"), "--storage", "s3://no-such-bucket-icr/runs",
                                ray_temp=ray_temp, port=free_port()), capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and "s3://no-such-bucket-icr/runs/istree_micro cannot be written" in result.stderr
    assert not list(Path(ray_temp).rglob("session_*")), "Ray was started for a sweep that could not be stored"


def test_a_store_that_accepts_and_never_answers_is_given_up_on_within_the_wait(tmp_path, silent_server):
    """Issue 42, class 3: `status s3://...` against such an endpoint said "did not
    answer within 20 s" after 102 s: pyarrow held the process at exit for the
    request still waiting."""
    env = {**os.environ, "AWS_ENDPOINT_URL": silent_server(), "AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "y",
           "AWS_DEFAULT_REGION": "us-east-1", "ICR_STORAGE_TIMEOUT_S": "2"}
    for args in (("status", f"s3://{BUCKET}/run"), ("report", f"s3://{BUCKET}/run")):
        # (A hang, not a speed: before, the command held on for ~100 s after giving up.)
        result = subprocess.run(command(*args), capture_output=True, text=True, timeout=45, env=env, cwd=tmp_path)
        assert result.returncode == 2 and "did not answer within 2 s" in result.stderr, result.stderr[-2000:]


@pytest.fixture
def pausable_s3(tmp_path):
    """moto's S3 server in a process of its own, which a test can pause (SIGSTOP):
    a store that accepts connections and stops answering mid-sweep. Returns
    (process, boto3 client, environment for the commands)."""
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    env = {**os.environ, "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}", "AWS_ACCESS_KEY_ID": "testing",
           "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1", "ICR_STORAGE_TIMEOUT_S": "6"}
    import boto3

    client = boto3.client("s3", endpoint_url=env["AWS_ENDPOINT_URL"], aws_access_key_id="testing",
                          aws_secret_access_key="testing", region_name="us-east-1")
    deadline = time.time() + 30
    while True:
        try:
            client.create_bucket(Bucket=BUCKET)
            break
        except Exception:
            if time.time() > deadline:
                raise
            time.sleep(0.3)
    yield server, client, env
    server.send_signal(signal.SIGCONT)
    server.kill()
    server.wait()


def _checkpoints_by_trial(client, prefix: str) -> dict[str, set[str]]:
    """The checkpoint folders each trial of a run has in the bucket so far."""
    by_trial: dict[str, set[str]] = {}
    for key in _keys(client, prefix):
        trial, part = (key.split("/") + [""])[2:4]
        if part.startswith("checkpoint_"):
            by_trial.setdefault(trial, set()).add(part)
    return by_trial


@pytest.mark.slow
def test_an_s3_run_is_stopped_read_resumed_falls_silent_and_resumes_to_the_end(pausable_s3, tmp_path, ray_temp,
                                                                               monkeypatch):
    """One run on S3 through what a remote run meets (issue 63: two launches were one
    scenario): Ctrl-C in its second trial; status, report and load_run read it from
    the bucket; a resume, during which the store falls silent (issue 52, class 5: the
    driver retried its state saves for good, still running 5 minutes later): it
    stops, says why and how to go on; a second resume finishes, each finished trial
    kept as it was and the stopped one continued from its checkpoint."""
    server, client, env = pausable_s3
    for name in ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION"):
        monkeypatch.setenv(name, env[name])  # this process reads the bucket too
    spec_path = killme_spec(tmp_path, name="s3run", samples=12 * HALF_EVERY, every=HALF_EVERY)
    run = f"s3://{BUCKET}/runs/s3run"

    def start(*args: str) -> subprocess.Popen:
        return subprocess.Popen(cli(*args, ray_temp=ray_temp, port=free_port()), stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, start_new_session=True, cwd=tmp_path, env=env)

    def wait_until(proc, ready) -> None:
        deadline = time.time() + 600
        while (time.time() < deadline and proc.poll() is None
               and not ready(_checkpoints_by_trial(client, "runs/s3run/"))):
            time.sleep(0.5)
        assert proc.poll() is None, f"the sweep ended before the moment awaited: {proc.communicate()[0][-3000:]}"

    # cwd: a remote run's local report copy goes to ./reports/NAME. Workers upload each
    # checkpoint straight to the bucket: a second trial with its second checkpoint
    # (the driver has recorded its first).
    proc = start("launch", str(spec_path), "--storage", f"s3://{BUCKET}/runs")
    wait_until(proc, lambda by_trial: len(by_trial) >= 2 and all(len(parts) >= 2 for parts in by_trial.values()))
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 130 and f"icr-sweep resume {run}" in out, out[-3000:]
    kill_leftovers(ray_temp)
    before, finished, midway = _read_the_stopped_s3_run(run, spec_path, client, tmp_path, env)

    proc = start("resume", run)  # until the third trial has checkpointed: then the store falls silent
    wait_until(proc, lambda by_trial: len(by_trial) >= 3)
    server.send_signal(signal.SIGSTOP)
    try:
        out, _ = proc.communicate(timeout=300)  # a hang, not a speed: before, it never ended
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        server.send_signal(signal.SIGCONT)
        kill_leftovers(ray_temp)
    assert proc.returncode == 130, out[-3000:]
    assert f"The storage of {run} stopped answering" in out and f"icr-sweep resume {run}" in out, out[-3000:]
    assert "The report waits: the storage does not answer" in out, out[-3000:]

    resumed = subprocess.run(cli("resume", run, ray_temp=ray_temp, port=free_port()), capture_output=True, text=True,
                             timeout=900, cwd=tmp_path, env=env)
    assert resumed.returncode == 0, (resumed.stdout + resumed.stderr)[-3000:]
    after = download_run(run, tmp_path / "after")
    for name in finished:
        assert (after / name / "result.json").read_text() == (before / name / "result.json").read_text(), name
    samples = [json.loads(line)["samples"] for line in (after / midway / "result.json").read_text().splitlines()]
    # Continued from a checkpoint, not from scratch. With S3 storage the driver may
    # have logged a result whose checkpoint it had not yet recorded when stopped:
    # that one evaluation window is trained again (seen, evaluating every 1024: 1024, 2048, 2048, 3072, ...).
    evaluations = list(range(HALF_EVERY, 12 * HALF_EVERY + 1, HALF_EVERY))
    assert samples.count(HALF_EVERY) == 1 and sorted(set(samples)) == evaluations, samples
    assert len(samples) - len(set(samples)) <= 1, f"{midway} redid more than one window: {samples}"
    assert not (after / midway / STARTED_OVER_FILE).exists(), f"{midway} started over from sample 0"
    _report_of_the_finished_s3_run(run, client, tmp_path, env)


def _read_the_stopped_s3_run(run: str, spec_path: Path, client, tmp_path: Path, env: dict) -> tuple[Path, list, str]:
    """The stopped run as status, the notebook API and a download read it from the
    bucket. Returns (its download, the finished trials, the interrupted one)."""
    assert run_spec(run) == load_spec(spec_path).model_copy(update={"storage": f"s3://{BUCKET}/runs"})
    assert read_file(f"{run}/report.md") is not None  # the launch's own report went beside the trials
    status = subprocess.run(command("status", run), capture_output=True, text=True, timeout=120, cwd=tmp_path, env=env)
    assert status.returncode == 0, status.stderr[-3000:]
    assert status.stdout.count("finished") >= 1 and "pending" in status.stdout + status.stderr
    # The driver stopped: its trials are interrupted, not running (issue 52: Tune's last record said running).
    assert "interrupted" in status.stdout and "running" not in status.stdout, status.stdout
    assert ".icr-driver.json" in {Path(k).name for k in _keys(client, "runs/s3run/")}

    before = download_run(run, tmp_path / "before")
    finished = [d.name for d in before.iterdir() if (d / "result.json").exists()
                and '"final_eval": true' in (d / "result.json").read_text()]
    midway = [d.name for d in before.iterdir() if (d / "result.json").exists() and d.name not in finished]
    assert finished and len(midway) == 1, "the launch was not stopped between trials' checkpoints"
    # The notebook API reads the same run from the bucket: every evaluation of each trial.
    from icr_sweep import load_run

    frame = load_run(run)
    for name in finished + midway:
        rows = [json.loads(line) for line in (before / name / "result.json").read_text().splitlines()]
        evaluated = [r["samples"] for r in rows if r.get("evaluated", True)]
        mine = frame[frame["trial"] == name]
        assert mine["samples"].tolist() == evaluated and mine["evaluation"].tolist() == list(range(len(evaluated)))
        assert (mine["state"] == ("finished" if name in finished else mine["state"].iloc[0])).all()
    assert set(frame.loc[frame["state"] == "finished", "trial"]) == set(finished)
    return before, finished, midway[0]


def _report_of_the_finished_s3_run(run: str, client, tmp_path: Path, env: dict) -> None:
    report = subprocess.run(command("report", run, "--out", str(tmp_path / "local")), capture_output=True,
                            text=True, timeout=120, cwd=tmp_path, env=env)
    assert report.returncode == 0, report.stderr[-3000:]
    assert "3 trials: 3 finished." in read_file(f"{run}/report.md").decode()
    assert (tmp_path / "local" / "report.md").read_text() == read_file(f"{run}/report.md").decode()
    assert read_file(f"{run}/best.csv") and [k for k in _keys(client, "runs/s3run/exact_match_")]
    assert (tmp_path / "reports" / "s3run" / "report.md").exists()  # launch's and resume's default local copy
    assert SPEC_FILE in {Path(k).name for k in _keys(client, "runs/s3run/")}


def test_status_of_a_storage_root_names_its_runs_without_copying_them(s3, tmp_path):
    """Issue 65, class 9: `status s3://bucket/prefix` of a folder holding runs
    copied every run down to say "no trials yet"."""
    from typer.testing import CliRunner

    from orchestrator.cli import app

    for run in ("alpha", "beta"):
        s3.put_object(Bucket=BUCKET, Key=f"roots/{run}/icr-sweep.json", Body=b"{}")
    s3.put_object(Bucket=BUCKET, Key="roots/notes.txt", Body=b"mine")
    result = CliRunner().invoke(app, ["status", f"s3://{BUCKET}/roots"])
    assert result.exit_code == 2, result.output
    assert (f"s3://{BUCKET}/roots is a storage folder holding the runs alpha, beta; name one: "
            f"s3://{BUCKET}/roots/alpha") in result.output, result.output
    s3.put_object(Bucket=BUCKET, Key="empty-ish/notes.txt", Body=b"mine")
    result = CliRunner().invoke(app, ["status", f"s3://{BUCKET}/empty-ish"])
    assert result.exit_code == 2 and "holds no run of icr-sweep" in result.output and "notes.txt" in result.output


def test_a_storage_folder_on_s3_is_named_as_such_not_read_as_an_empty_run(s3):
    """Issue 83, class 9: `load_run('s3://bucket/runs')`, the storage folder above the
    sweeps, returned an empty frame (locally it said "holds no run")."""
    from icr_sweep import load_run

    stored = Path(__file__).parents[1] / "fixtures" / "stored_run" / "istree_micro"
    for path in (p for p in stored.rglob("*") if p.is_file()):
        s3.put_object(Bucket=BUCKET, Key=f"root/istree_micro/{path.relative_to(stored)}", Body=path.read_bytes())
    assert set(load_run(f"s3://{BUCKET}/root/istree_micro")["trial"]) == {p.name for p in stored.iterdir() if p.is_dir()}
    with pytest.raises(FileNotFoundError, match=rf"s3://{BUCKET}/root is a storage folder holding the run directories "
                                                rf"of the sweeps istree_micro: load one of them"):
        load_run(f"s3://{BUCKET}/root")
    with pytest.raises(FileNotFoundError, match="no such run directory"):
        load_run(f"s3://{BUCKET}/nothing-here")
