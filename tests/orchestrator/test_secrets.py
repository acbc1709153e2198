"""A secret goes only where it belongs and is never printed; a tracker check refuses
what is not the service, within a bounded time; every command printed is quoted
for the shell (issue 65, classes 3, 4 and 8)."""

import shlex
import socket
import threading
import time
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from orchestrator.cli import app
from orchestrator.secrets import command, redact
from tests.orchestrator.conftest import replies

SWEEPS = Path(__file__).parents[2] / "sweeps"
KEY = "k" * 40


def _launch(tmp_path, monkeypatch, tracking: dict, env: dict, search: dict | None = None):
    monkeypatch.setenv("NETRC", str(tmp_path / "netrc"))
    monkeypatch.setenv("ICR_STORAGE_TIMEOUT_S", "2")
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    spec = yaml.safe_load((SWEEPS / "istree_micro.yaml").read_text())
    spec.update(tracking=tracking)
    if search:
        spec["search"] = search
        rates = {"distribution": "loguniform", "low": 1e-4, "high": 1e-2}
        spec["lr"] = {"transformer": dict(rates), "mamba": dict(rates)}
    (tmp_path / "t.yaml").write_text(yaml.safe_dump(spec))
    return CliRunner().invoke(app, ["launch", str(tmp_path / "t.yaml"), "--storage", str(tmp_path / "runs")])


def test_the_wandb_key_is_never_sent_to_the_host_a_redirect_names(tmp_path, monkeypatch, http_server):
    """Class 3a: a W&B host answering the key check with a 302 to another host: the
    key was sent there as basic auth."""
    elsewhere, seen_there = http_server(replies(200, b'{"data": {"viewer": {"id": "x"}}}'))
    other = elsewhere.replace("127.0.0.1", "localhost")  # another host name
    base, _ = http_server(replies(302, Location=f"{other}/graphql"))
    result = _launch(tmp_path, monkeypatch, dict(wandb=dict(project="p", mode="online")),
                     {"WANDB_API_KEY": KEY, "WANDB_BASE_URL": base})
    assert result.exit_code == 2, result.output
    assert "a redirect to localhost; the key is not sent on there" in result.output, result.output
    assert seen_there == []


@pytest.mark.parametrize("answer, said", [
    (replies(200, b"<html>welcome to nginx</html>"), "answered, but not as W&B's API does"),
    (replies(200, b'{"data": {}}'), "answered, but not as W&B's API does"),
    (replies(500, b"oops"), "answered HTTP 500: no W&B server that works now"),
    (replies(501, b""), "answered HTTP 501: no W&B server that works now"),
])
def test_a_wandb_host_that_is_not_a_working_wandb_server_is_refused(tmp_path, monkeypatch, http_server, answer, said):
    """Class 4: garbage and 500 passed the check."""
    base, _ = http_server(answer)
    result = _launch(tmp_path, monkeypatch, dict(wandb=dict(project="p", mode="online")),
                     {"WANDB_API_KEY": KEY, "WANDB_BASE_URL": base})
    assert result.exit_code == 2 and f"tracking.wandb.mode online: {base} {said}" in result.output, result.output
    assert not (tmp_path / "runs").exists()


def test_a_host_that_trickles_bytes_is_cut_off_within_the_wait(tmp_path, monkeypatch):
    """Class 4: a host sending a byte at a time gave no output for 200 s (each
    read's timeout restarted with every byte)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)

    def trickle():
        conn, _ = listener.accept()
        conn.recv(65536)
        with contextlib_suppress():
            for byte in b"HTTP/1.1 200 OK\r\nX-Slow: " + b"a" * 1000:
                conn.sendall(bytes([byte]))
                time.sleep(0.2)

    threading.Thread(target=trickle, daemon=True).start()
    started = time.monotonic()
    result = _launch(tmp_path, monkeypatch, dict(wandb=dict(project="p", mode="online")),
                     {"WANDB_API_KEY": KEY, "WANDB_BASE_URL": f"http://127.0.0.1:{listener.getsockname()[1]}"})
    assert time.monotonic() - started < 10
    assert result.exit_code == 2 and "did not answer within 2 s" in result.output, result.output
    listener.close()


class contextlib_suppress:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return exc[0] is not None and issubclass(exc[0], OSError)


@pytest.mark.parametrize("url", ["notaurl", "ftp://host/", "http://", "http://host:port/"])
def test_a_wandb_base_url_that_is_no_url_is_named(tmp_path, monkeypatch, url):
    """Class 4: WANDB_BASE_URL=notaurl ended in a Python traceback."""
    result = _launch(tmp_path, monkeypatch, dict(wandb=dict(project="p", mode="online")),
                     {"WANDB_API_KEY": KEY, "WANDB_BASE_URL": url})
    assert result.exit_code == 2 and f"WANDB_BASE_URL {url!r} " in result.output, result.output
    assert "Traceback" not in result.output


def test_a_password_in_a_tracking_uri_is_sent_to_its_host_as_basic_auth_and_never_printed(tmp_path, monkeypatch,
                                                                                          http_server):
    """Class 3b: `tracking_uri: http://user:PASSWORD@...` was printed in clear, with
    the wrong cause ("Name or service not known") for a server that answers."""
    base, seen = http_server(replies(200, b"OK"))
    uri = base.replace("http://", "http://alice:S3CRET-pw@")
    from orchestrator.trackers.mlflow import check_server

    check_server(uri)  # answers: taken
    assert seen[0][0] == "/health" and seen[0][1]["Authorization"] == "Basic YWxpY2U6UzNDUkVULXB3"
    down = "http://alice:S3CRET-pw@127.0.0.1:1"
    result = _launch(tmp_path, monkeypatch, dict(mlflow=dict(tracking_uri=down)), {})
    assert result.exit_code == 2 and "http://alice:***@127.0.0.1:1 cannot be reached" in result.output, result.output
    assert "S3CRET" not in result.output


def test_an_mlflow_server_that_refuses_the_credentials_or_fails_is_named(tmp_path, monkeypatch, http_server):
    for answer, said in ((replies(401), "refused the user and password given in it (HTTP 401)"),
                         (replies(503, b"down"), "answered HTTP 503 at /health"),
                         (replies(200, b"<html>"), "not as an MLflow server does")):
        base, _ = http_server(answer)
        result = _launch(tmp_path, monkeypatch,
                         dict(mlflow=dict(tracking_uri=base.replace("http://", "http://bob:hunter2@"))), {})
        assert result.exit_code == 2 and said in result.output and "hunter2" not in result.output, result.output


def test_passwords_in_an_optuna_storage_and_a_wandb_base_url_are_never_printed(tmp_path, monkeypatch, http_server):
    result = _launch(tmp_path, monkeypatch, {}, {},
                     search=dict(method="optuna", num_samples=2,
                                 storage="postgresql://optuna:T0PSECRET@127.0.0.1:1/studies"))
    assert result.exit_code == 2 and "search.storage" in result.output, result.output
    assert "T0PSECRET" not in result.output and "optuna:***@127.0.0.1:1" in result.output
    base, seen = http_server(replies(401))
    result = _launch(tmp_path, monkeypatch, dict(wandb=dict(project="p", mode="online")),
                     {"WANDB_API_KEY": KEY, "WANDB_BASE_URL": base.replace("http://", "http://me:PA55WORD@")})
    assert result.exit_code == 2 and "rejected the API key" in result.output and "PA55WORD" not in result.output
    assert all("PA55WORD" not in str(headers) for _, headers in seen)


def test_redact_and_command():
    assert redact("sqlite:///a.db and http://u:p@h:1/x, s3://bucket/k") == "sqlite:///a.db and http://u:***@h:1/x, s3://bucket/k"
    assert redact("postgresql+psycopg2://user:pa:ss@db/x") == "postgresql+psycopg2://user:***@db/x"
    assert command("icr-sweep", "resume", "runs/$(touch PWNED)") == "icr-sweep resume 'runs/$(touch PWNED)'"
    assert shlex.split(command("tensorboard", "--logdir", "my runs/it's")) == ["tensorboard", "--logdir", "my runs/it's"]


def test_a_wandb_failure_in_its_logging_actor_is_said_once_and_reported(tmp_path, capsys):
    """Class 4: a W&B server that answered 501 to the run's first request left the
    sweep logging nothing, and the console printed the W&B URL."""
    from orchestrator.trackers.wandb import Wandb
    from orchestrator.rundir import WANDB_FAILED

    actor_cls = Wandb._logger_actor_cls

    class FailingWandb:
        def init(self, *args, **kwargs):
            raise RuntimeError("HTTP 501: Not Implemented (http://u:secret@wandb.example/graphql)")

        def teardown(self):
            pass

    run_dir = tmp_path / "runs" / "s"
    for trial in ("transformer-cot-tiny-n5-lr3e-3-s0", "mamba-cot-tiny-n5-lr1e-2-s0"):
        (run_dir / trial).mkdir(parents=True)
        actor = object.__new__(actor_cls)
        actor._wandb, actor.args, actor.kwargs, actor._logdir = FailingWandb(), (), {}, str(run_dir / trial)
        actor.run()
    err = capsys.readouterr().err
    assert err.count("warning: W&B stopped logging") == 1, err
    assert "transformer-cot-tiny-n5-lr3e-3-s0 (RuntimeError: HTTP 501" in err and "secret" not in err
    assert (run_dir / WANDB_FAILED).read_text().startswith("RuntimeError: HTTP 501")


def test_a_printed_resume_line_runs_nothing_a_path_holds(tmp_path):
    """Class 8: `storage: "runs/$(touch PWNED)"` validates; the printed resume line
    and report.md's `tensorboard --logdir` ran the `touch` when pasted."""
    import subprocess

    from orchestrator.report import open_commands
    from orchestrator.rundir import Run

    where = str(tmp_path / "runs/$(touch PWNED)/s")
    (Path(where) / "t").mkdir(parents=True)
    (Path(where) / "t" / "events.out.tfevents.1").write_bytes(b"")
    run = Run.__new__(Run)
    run.spec = {"tracking": {"tensorboard": True, "mlflow": {}, "wandb": {"project": "p", "mode": "offline"}}}
    lines = open_commands(run, where, Path(where))
    pasted = [line.split("`")[1] for line in lines[1:]]
    assert pasted[0] == f"tensorboard --logdir '{where}'"
    for line in (*pasted, command("icr-sweep", "resume", where)):
        subprocess.run(["bash", "-n", "-c", line], check=True)  # parses
        subprocess.run(["bash", "-c", f"set -- {line.split(' ', 1)[1]}"], cwd=tmp_path, check=True)  # expands
    assert not (tmp_path / "PWNED").exists()


@pytest.mark.parametrize("given, shown", [
    ("s3://AKID:S3CRETKEY@bkt/runs", "s3://AKID:***@bkt/runs"),
    ("http://alice:pa@ssS3CRETKEY@host:5000/x", "http://alice:***@host:5000/x"),  # a password holding @
    ("http://S3CRETKEY@host", "http://***@host"),  # a token as the whole user part
    ("mysql://S3CRETKEY@db/studies", "mysql://***@db/studies"),
    ("see http://a:S3CRETKEY@h and http://c:S3CRETKEY@e/f?q=x@y", "see http://a:***@h and http://c:***@e/f?q=x@y"),
])
def test_every_form_of_a_url_secret_is_masked(given, shown):
    """Issue 83, class 6: a password holding @ kept its tail, a token-only user part
    was not masked."""
    assert redact(given) == shown and "S3CRETKEY" not in command("icr-sweep", "resume", given)


def test_no_command_prints_a_secret_a_storage_uri_or_a_spec_holds(tmp_path):
    """Issue 83, class 6: `--storage 's3://KEY:SECRET@bkt/runs'` printed the secret in
    every line naming the run directory, and a spec's validation error printed the
    whole URI. Every line a command prints goes through the console's guard."""
    spec = yaml.safe_load((SWEEPS / "istree_micro.yaml").read_text())
    (tmp_path / "s3.yaml").write_text(yaml.safe_dump({**spec, "storage": "s3://AKID:S3CRETKEY@bkt/runs"}))
    printed = CliRunner().invoke(app, ["validate", str(tmp_path / "s3.yaml")]).output
    assert "s3://AKID:***@bkt/runs/istree_micro" in printed and "S3CRETKEY" not in printed, printed
    spec["tracking"] = {"mlflow": {"tracking_uri": "ftp://alice:S3CRETKEY@host/x"}}
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(spec))
    refused = CliRunner().invoke(app, ["validate", str(tmp_path / "bad.yaml")])
    assert refused.exit_code == 2 and "tracking.mlflow.tracking_uri" in refused.output, refused.output
    assert "ftp://alice:***@host/x" in refused.output and "S3CRETKEY" not in refused.output, refused.output


def test_a_report_never_holds_a_secret_of_the_run_directorys_uri(tmp_path):
    """Issue 83, class 6: the report's notebook line named s3://KEY:SECRET@..."""
    import shutil

    from orchestrator.report import write_report
    from orchestrator.rundir import read_run

    run_dir = tmp_path / "istree_micro"
    shutil.copytree(Path(__file__).parents[1] / "fixtures" / "stored_run" / "istree_micro", run_dir)
    text = write_report(read_run(run_dir), run_dir, location="s3://AKID:S3CRETKEY@bkt/runs/istree_micro").text
    assert "load_run('s3://AKID:***@bkt/runs/istree_micro')" in text and "S3CRETKEY" not in text
    assert "S3CRETKEY" not in (run_dir / "report.md").read_text()


def test_the_spec_record_keeps_its_secrets_in_a_file_its_owner_alone_reads(tmp_path):
    """Issue 83, class 6: the run's icr-sweep.json, readable by every local user, kept
    the MLflow URI with its password. The secret is masked there and kept in
    .icr-secrets.json (mode 0600), which a resume reads; without it, resume names the
    field instead of sending a masked password."""
    import json

    from orchestrator.rundir import SECRETS_FILE, SPEC_FILE, spec_record, write_spec_record
    from orchestrator.spec import SweepSpec

    uri = "http://alice:pa@ssS3CRETKEY@127.0.0.1:1"
    spec = SweepSpec(name="s", storage=str(tmp_path), tracking=dict(mlflow=dict(tracking_uri=uri)),
                     search=dict(method="optuna", num_samples=2, storage="postgresql://optuna:T0PSECRET@db/studies"),
                     lr=dict(transformer=dict(distribution="loguniform", low=1e-4, high=1e-2),
                             mamba=dict(distribution="loguniform", low=1e-4, high=1e-2)))
    run_dir = tmp_path / "s"
    write_spec_record(str(run_dir), spec.model_dump(mode="json"), {"cpu": 1, "gpu": 0})
    public = (run_dir / SPEC_FILE).read_text()
    assert "S3CRETKEY" not in public and "T0PSECRET" not in public and "alice:***@127.0.0.1:1" in public
    assert (run_dir / SECRETS_FILE).stat().st_mode & 0o077 == 0
    stored = spec_record(run_dir)
    assert stored["tracking"]["mlflow"]["tracking_uri"] == uri
    assert stored["search"]["storage"] == "postgresql://optuna:T0PSECRET@db/studies"
    (run_dir / SECRETS_FILE).unlink()
    assert spec_record(run_dir)["tracking"]["mlflow"]["tracking_uri"] == "http://alice:***@127.0.0.1:1"
    refused = CliRunner().invoke(app, ["resume", str(run_dir)])
    assert refused.exit_code == 2 and "search.storage, tracking.mlflow.tracking_uri" in refused.output, refused.output
    assert SECRETS_FILE in refused.output and json.loads(public)["spec"]["name"] == "s"


def test_tunes_pickles_of_the_run_config_are_readable_by_their_owner_alone(tmp_path):
    """Issue 83, class 6: tuner.pkl pickles the run's callbacks, the MLflow URI with
    its password among them, and the searcher's state its Optuna storage URL; each
    was readable by every local user."""
    from orchestrator.tune import owner_only
    from orchestrator.unpromised import copy_whole

    run_dir, staging = tmp_path / "run", tmp_path / "staging"
    run_dir.mkdir()
    staging.mkdir()
    (run_dir / "tuner.pkl").write_bytes(b"an earlier version's")
    (run_dir / "tuner.pkl").chmod(0o644)
    with owner_only(str(run_dir)):
        (run_dir / "made-within").write_bytes(b"")
    for name in ("searcher-state-x.pkl", "search_gen_state-x.json", "experiment_state-x.json"):
        (staging / name).write_bytes(b"")
        (staging / name).chmod(0o644)
    copy_whole(str(staging), str(run_dir))
    modes = {p.name: p.stat().st_mode & 0o777 for p in run_dir.iterdir()}
    assert modes == {"tuner.pkl": 0o600, "made-within": 0o600, "searcher-state-x.pkl": 0o600,
                     "search_gen_state-x.json": 0o600, "experiment_state-x.json": 0o644}, modes


def test_the_drivers_log_never_holds_a_secret(tmp_path):
    import logging

    from orchestrator import progress

    with progress.console(False, tmp_path / "icr-sweep.log"):
        logging.getLogger("ray.tune").warning("syncing to s3://AKID:S3CRETKEY@bkt/runs failed")
    assert "s3://AKID:***@bkt/runs" in (tmp_path / "icr-sweep.log").read_text()
    assert "S3CRETKEY" not in (tmp_path / "icr-sweep.log").read_text()
