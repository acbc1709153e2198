"""The commands the tool prints run as printed in the user's shell (issue 79): the
tool as it was started, a viewer from the running environment before PATH, and
the environment's own installer in every hint."""

import importlib.util
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator import shell
from orchestrator.secrets import command

OURS = Path(sys.executable).parent


def _without_the_environment() -> str:
    return os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep) if p and p != str(OURS))


@pytest.fixture
def users_shell(monkeypatch):
    """The tool started from a shell whose PATH lacks the project's environment."""
    for name in (shell.LAUNCHER, shell.SHELL_PATH):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PATH", _without_the_environment())
    return os.environ["PATH"]


def _runs(line: str, path: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", line], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PATH": path})


def test_the_tool_is_printed_as_it_was_started(monkeypatch, users_shell):
    monkeypatch.setattr(sys, "argv", [str(OURS / "icr-sweep"), "launch"])
    assert command("icr-sweep", "resume", "runs/x") == f"{OURS / 'icr-sweep'} resume runs/x"
    monkeypatch.setattr(sys, "argv", [".venv/bin/icr-sweep", "launch"])
    assert command("icr-sweep", "resume", "runs/x") == ".venv/bin/icr-sweep resume runs/x"
    # scripts/icr-sweep hands over how it was started and its shell's PATH
    monkeypatch.setenv(shell.LAUNCHER, "scripts/icr-sweep")
    monkeypatch.setenv(shell.SHELL_PATH, users_shell)
    monkeypatch.setenv("PATH", f"{OURS}{os.pathsep}{users_shell}")
    assert command("icr-sweep", "resume", "runs/x") == "scripts/icr-sweep resume runs/x"
    # found on the user's PATH as the very script that runs: the bare name
    monkeypatch.delenv(shell.LAUNCHER)
    monkeypatch.setenv(shell.SHELL_PATH, f"{OURS}{os.pathsep}{users_shell}")
    monkeypatch.setattr(sys, "argv", [str(OURS / "icr-sweep"), "launch"])
    assert command("icr-sweep", "resume", "runs/x") == "icr-sweep resume runs/x"
    # started as `python -m orchestrator.cli` or from a notebook: the environment's own script
    monkeypatch.setattr(sys, "argv", ["-m"])
    monkeypatch.setenv(shell.SHELL_PATH, users_shell)
    assert command("icr-sweep", "report", "r") == f"{OURS / 'icr-sweep'} report r"


def test_each_printed_command_and_install_hint_runs_in_a_shell_without_the_environment(users_shell, tmp_path,
                                                                                      monkeypatch):
    """`wandb` is in the project's environment, not on this shell's PATH: printed
    from the environment, it runs; so do the tool itself and each install hint's
    installer (asked for its help, not to install), the environment's python even
    where the shell's PATH has a `python` that the environment's links to."""
    system = tmp_path / "bin"
    system.mkdir()
    (system / "python").symlink_to(os.path.realpath(sys.executable))  # what a venv's python links to
    users_shell = f"{system}{os.pathsep}{users_shell}"
    monkeypatch.setenv("PATH", users_shell)
    for line in (command("wandb", "--version"), command("icr-sweep", "--help")):
        done = _runs(line, users_shell)
        assert done.returncode == 0, (line, done.stderr[-2000:])
    assert not shell.missing("wandb")
    hints = (shell.install("tensorboard"), shell.install_extra("track"),
             shell.install_extra("cuda", ("--no-build-isolation",)))
    for hint in hints:
        words = shlex.split(hint)
        assert words[:3] == [sys.executable, "-m", "pip"], hint  # this environment's pip, never a bare `pip`
        done = _runs(shlex.join([*words[:words.index("install") + 1], "--help"]), users_shell)
        assert done.returncode == 0, (hint, done.stderr[-2000:])
    assert shlex.split(shell.install_extra("track"))[-1] == f"{Path(__file__).parents[2]}[track]"  # this checkout's


def test_a_viewer_is_looked_for_in_the_environment_before_path_and_hinted_with_its_installer(tmp_path, monkeypatch,
                                                                                             users_shell):
    """Issue 64 and 79: `tensorboard --logdir ...` was printed where nothing runs it,
    and `wandb` called not installed where the environment has it but PATH does not."""
    from orchestrator.report import open_commands
    from orchestrator.rundir import Run

    env_bin, path_bin = tmp_path / "env" / "bin", tmp_path / "path"
    env_bin.mkdir(parents=True)
    path_bin.mkdir()
    monkeypatch.setattr(sys, "executable", str(env_bin / "python"))
    monkeypatch.setenv("PATH", str(path_bin))
    where = tmp_path / "run"
    (where / "t").mkdir(parents=True)
    (where / "t" / "events.out.tfevents.1").write_bytes(b"")
    run = Run.__new__(Run)
    run.spec = {"tracking": {"tensorboard": True, "mlflow": {}, "wandb": {"project": "p", "mode": "offline"}},
                "search": {"method": "optuna", "storage": "sqlite:////tmp/o.db"}}
    tools = {"TensorBoard": "tensorboard", "MLflow": "mlflow", "W&B (offline)": "wandb", "Optuna": "optuna-dashboard"}

    def shown() -> dict:
        return dict(line.split(": ", 1) for line in open_commands(run, str(where), where)[1:])

    viewers = shell.install_extra("viewers")  # nowhere: the viewers' extra, with this environment's installer
    assert viewers.startswith(f"{env_bin / 'python'} -m pip install -e ") and viewers.endswith("[viewers]'")
    for tool in tools:
        assert shown()[tool].endswith(f"(not installed here: `{viewers}` first)")
    for program in tools.values():
        (env_bin / program).write_text("#!/bin/sh\n")
        (env_bin / program).chmod(0o755)
        (path_bin / program).write_text("#!/bin/sh\n")  # another one on PATH: the environment's comes first
        (path_bin / program).chmod(0o755)
    mlflow_ui = (Path(importlib.util.find_spec("mlflow").origin).parent / "server" / "js" / "build").is_dir()
    for tool, program in tools.items():
        line = shown()[tool]
        assert f"`{env_bin / program} " in line, line
        assert ("not installed here" in line) == (program == "mlflow" and not mlflow_ui), line  # mlflow-skinny: no UI
