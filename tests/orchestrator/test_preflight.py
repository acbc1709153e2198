"""Faults that used to pass validation and fail later: models whose shapes cannot run,
trials too large for the machine, values of the wrong type, storage typos and
storage that never answers, and messages that misled."""

import json

import pytest
import yaml
from typer.testing import CliRunner

import workloads.models
import workloads.train  # noqa: F401  (binds the real build_model before a test patches it)
from orchestrator.cli import app
from workloads.naming import significant
from orchestrator.spec import SpecError, load_spec
from workloads.config import trial_config
from workloads.models.config import CPU_ARCHS
from workloads.preflight import check_models
from workloads.tasks import IsTreeConfig

runner = CliRunner()


def _write(tmp_path, **spec):
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump({"name": "pf", "storage": str(tmp_path / "runs"), **spec}))
    return path


def test_every_preset_builds_and_runs_a_step():
    trials = [trial_config(arch, "tiny", IsTreeConfig(n=6, setup="retrieval"), device="cpu") for arch in CPU_ARCHS]
    assert check_models(trials) == []


def test_a_mixer_without_a_cpu_path_is_refused_on_a_cpu_naming_why_and_left_to_its_gpu_elsewhere():
    """Mamba-3 exists only as mamba-ssm's CUDA kernels: where trials run on a CPU
    it is refused before anything is built, saying why and what to use instead;
    where they run on GPUs it is not built here (its trial's start checks it)."""
    trials = [trial_config(arch, "tiny", IsTreeConfig(n=6, setup="retrieval"), device="cpu")
              for arch in ("mamba3", "mamba3_hybrid", "mamba2")]
    problems = check_models(trials, on_cpu=True)
    assert len(problems) == 2 and all("runs only on CUDA" in p and "on a CPU use mamba2 or log_linear_mamba2" in p
                                      for p in problems), problems
    assert problems[0].startswith(trials[0].name)
    assert check_models(trials, on_cpu=False) == []


def test_launch_refuses_mamba3_on_this_cpu_naming_why_before_anything_starts(tmp_path):
    spec = _write(tmp_path, axes=dict(archs=["mamba3", "transformer"], setups=["cot"], sizes=["tiny"], n=[5]),
                  resources=dict(device="cpu"), training=dict(samples=1000, warmup_samples=10))
    result = runner.invoke(app, ["launch", str(spec)])
    assert result.exit_code == 2, result.output
    assert "no trial was started" in result.output and "mamba3-cot-tiny-n5" in result.output
    assert "mamba3 runs only on CUDA" in " ".join(result.output.split()), result.output
    assert "transformer-cot-tiny-n5" not in result.output  # the Transformer can run here
    assert not list((tmp_path / "runs").glob("pf/*/params.json"))


def test_launch_refuses_a_sweep_whose_model_cannot_run_before_anything_starts(tmp_path, monkeypatch):
    def broken(cfg, vocab):
        raise RuntimeError("shapes do not fit")

    monkeypatch.setattr(workloads.models, "build_model", broken)
    spec = _write(tmp_path, axes=dict(archs=["transformer"], setups=["cot"], sizes=["tiny"], n=[5]),
                  resources=dict(device="cpu"), training=dict(samples=1000, warmup_samples=10))
    result = runner.invoke(app, ["launch", str(spec)])
    assert result.exit_code == 2, result.output
    assert "no trial was started" in result.output and "transformer-cot-tiny-n5" in result.output
    assert "RuntimeError: shapes do not fit" in result.output
    assert not list((tmp_path / "runs").glob("pf/*/params.json"))


def test_launch_refuses_a_cpu_trial_larger_than_the_machine(tmp_path):
    spec = _write(tmp_path, axes=dict(archs=["transformer"], setups=["retrieval"], sizes=["2M"], n=[64]),
                  resources=dict(device="cpu"), training=dict(samples=10**7, batch_size=200_000, warmup_samples=10))
    result = runner.invoke(app, ["launch", str(spec)])
    assert result.exit_code == 2, result.output
    assert "more than this machine's" in result.output and "lower training.batch_size" in result.output


@pytest.mark.parametrize("text, fragments", [
    ("axes: {archs: [transformer], sizes: [tiny], model: {d_model: [30]}}",
     ["axes.model with transformer", "heads of 15 channels", "must be even"]),
    ("axes: {archs: [hybrid], sizes: [tiny], model: {n_layers: [1]}}",
     ["axes.model with hybrid", "no recurrent layer", "at least 2"]),
    ("training: {samples: true}", ["training.samples", "not the YAML boolean true"]),
    ("lr: {transformer: true}", ["lr.transformer", "not the YAML boolean true"]),
    ("axes: {n: [true, 8]}", ["axes.n", "not YAML booleans"]),
    ("resources: {gpu_memory_gb: .inf}", ["resources.gpu_memory_gb", "finite"]),
    ("training: {checkpoint_every_s: .inf}", ["training.checkpoint_every_s", "finite"]),
    ("storage: 's3:/bucket/runs'", ["storage", "slash missing", "s3://bucket/runs"]),
])
def test_specs_that_could_not_run_are_refused_by_path(tmp_path, text, fragments):
    path = tmp_path / "spec.yaml"
    path.write_text("name: x\n" + text + "\n")
    with pytest.raises(SpecError) as err:
        load_spec(path)
    for fragment in fragments:
        assert fragment in str(err.value), (fragment, str(err.value))


def test_a_boolean_where_one_is_meant_is_kept(tmp_path):
    path = tmp_path / "spec.yaml"
    path.write_text("name: x\ntraining: {gen_every_eval: true}\n")
    assert load_spec(path).training.gen_every_eval is True


def test_learning_rates_that_differ_late_get_their_own_trial_names():
    names = {trial_config("transformer", "tiny", IsTreeConfig(n=6), lr=lr).name for lr in (1.0e-3, 1.0001e-3, 1.00012e-3)}
    assert len(names) == 3
    assert trial_config("transformer", "tiny", IsTreeConfig(n=6), lr=1e-3).name.endswith("-lr1e-3-s0")  # names kept


def test_status_and_report_of_a_path_that_does_not_exist_say_so(tmp_path):
    for command in ("status", "report"):
        result = runner.invoke(app, [command, str(tmp_path / "nowhere")])
        assert result.exit_code == 2 and "no such run directory" in result.output, result.output


def test_a_run_uri_with_a_slash_missing_is_refused():
    result = runner.invoke(app, ["status", "s3:/bucket/runs/x"])
    assert result.exit_code == 2 and "write s3://bucket/runs/x" in result.output


def test_help_keeps_bracketed_text_and_reads_each_architectures_rate_from_the_registry():
    from workloads.models.config import DEFAULT_LR

    text = " ".join(runner.invoke(app, ["train", "--help"]).output.split())
    listed = ", ".join(f"{arch} {significant(rate, 3)}" for arch, rate in DEFAULT_LR.items())
    assert f"[default: the architecture's, {listed}]" in text
    assert "rwkv7 3e-4" in listed and "transformer 1e-3" in listed


def test_storage_that_never_answers_fails_within_the_timeout(tmp_path, monkeypatch, silent_server):
    import time

    import orchestrator.storage as storage

    monkeypatch.setenv("AWS_ENDPOINT_URL", silent_server())
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "x")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "x")
    monkeypatch.setenv("ICR_STORAGE_TIMEOUT_S", "2")
    monkeypatch.setattr(storage, "_answered", set())
    started = time.monotonic()
    result = runner.invoke(app, ["status", "s3://bucket/runs/x"])
    assert time.monotonic() - started < 15
    assert result.exit_code == 2 and "did not answer within 2 s" in result.output, result.output


TRAIN = ["train", "--arch", "mamba", "--size", "tiny", "--setup", "cot", "--n", "4", "--samples", "256",
         "--batch-size", "32", "--eval-every", "256", "--val-samples", "16"]


@pytest.mark.parametrize("args, message", [
    (["--val-samples", "100000000000"], "(most of it its validation set): lower training.val_samples"),
    (["--dim", "d_model=100000"], "(most of it its weights and optimizer state)"),
    # Issue 42, class 9: told to lower the batch size, which no batch size cures.
    (["--arch", "gated_deltanet", "--dim", "head_dim=100000"],
     "lower the model's dimensions (its size preset, or the --dim / axes.model values given): even one sample per batch"),
    (["--task", "ar", "--setup", "vanilla", "--set", "values=100000000000"],
     "the task's vocabulary would be 100,000,000,262 tokens, more than the 1,048,576"),
    (["--device", "cuda"] if not __import__("torch").cuda.is_available() else ["--device", "tpu"],
     "--device"),
    (["--lr", "1e6"], "the training diverged; lower --lr (this trial's: 1e+06)"),
])
def test_train_with_what_cannot_run_is_refused_in_one_line(tmp_path, args, message, thread_pools):
    """Issue 28, class 10: each of these ended in a traceback, or built a validation
    set or a vocabulary for minutes. Nothing but the refusal is left behind."""
    out = tmp_path / "t"
    result = runner.invoke(app, [*TRAIN, "--out", str(out), *args])
    assert result.exit_code == 2 and message in result.output, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.output


@pytest.mark.parametrize("args, message", [
    (["--dashboard-port", "99999"], "'--dashboard-port'"),
    (["--dashboard-host", "999.1.1.1"], "--dashboard-host 999.1.1.1: not an address of this machine"),
    (["--num-cpus", "-1"], "'--num-cpus'"),
    (["--temp-dir", __file__], "is a file, not a directory"),
])
def test_launch_with_ray_options_that_cannot_work_is_refused_before_anything_starts(tmp_path, args, message):
    result = runner.invoke(app, ["launch", str(_write(tmp_path)), *args])
    assert result.exit_code == 2 and message in result.output, result.output
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("host", ["0.0.0.0", "::"])
def test_a_dashboard_on_the_network_without_ray_token_is_refused_before_anything_starts(tmp_path, monkeypatch, host):
    """Issue 52, class 2: with RAY_AUTH_MODE=disabled and 0.0.0.0, Ray's job API ran
    anyone's command, while the console said the dashboard asks for a token."""
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    result = runner.invoke(app, ["launch", str(_write(tmp_path)), "--dashboard-host", host, "--dashboard"])
    assert result.exit_code == 2, result.output
    assert f"--dashboard-host {host} with RAY_AUTH_MODE=disabled" in result.output
    assert "Unset RAY_AUTH_MODE" in result.output and "127.0.0.1" in result.output
    assert not (tmp_path / "runs").exists()


def test_loopback_is_told_from_the_network():
    from orchestrator.cluster import is_loopback

    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("::") and not is_loopback("192.0.2.7")


def test_resume_of_a_read_only_run_directory_is_refused_by_name(tmp_path):
    """Issue 28, class 10: a traceback before. Needs root's mount (skipped elsewhere)."""
    import shutil
    import subprocess

    run, view = tmp_path / "run", tmp_path / "ro"
    run.mkdir()
    view.mkdir()
    (run / "icr-sweep.json").write_text(json.dumps({"spec": {"name": "pf"}}))
    if subprocess.run(["mount", "--bind", str(run), str(view)], capture_output=True).returncode:
        pytest.skip("mount --bind needs root here")
    try:
        if subprocess.run(["mount", "-o", "remount,ro,bind", str(view)], capture_output=True).returncode:
            pytest.skip("a read-only remount is refused here")
        result = runner.invoke(app, ["resume", str(view)])
        assert result.exit_code == 2 and "cannot be written (Read-only file system)" in result.output, result.output
        assert "copy the run directory somewhere writable" in result.output
    finally:
        subprocess.run(["umount", str(view)], capture_output=True)
    shutil.rmtree(run)
