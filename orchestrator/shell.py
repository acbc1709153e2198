"""How the user's shell runs what the tool prints: `icr-sweep` as the tool was
started (`scripts/icr-sweep`, `.venv/bin/icr-sweep`, or the bare name where the
user's PATH finds it), a viewer from the running environment before PATH, and
this environment's own installer in every install hint. No Ray import.

The user's shell may not be the driver's: `scripts/icr-sweep` puts the project's
environment first on PATH before it starts the tool, so it hands over the path
it was started as (LAUNCHER) and the PATH of the shell it was started from
(SHELL_PATH)."""

from __future__ import annotations

import importlib.util
import os
import shlex
import shutil
import sys
from pathlib import Path

LAUNCHER = "ICR_SWEEP_LAUNCHER"
SHELL_PATH = "ICR_SWEEP_SHELL_PATH"
TOOL = "icr-sweep"

def runnable(word: str) -> str:
    """What the user's shell runs for the command `word`: `icr-sweep` as the tool
    was started, another tool from this environment where it has it, else `word`."""
    if word == TOOL:
        return _as_typed(_launcher())
    here = _in_environment(word)
    return _as_typed(str(here)) if here else word


def installed(tool: str) -> bool:
    """Whether the user's shell can run `tool`: from this environment or its PATH
    (MLflow only with its UI, which mlflow-skinny lacks)."""
    if not (_in_environment(tool) or shutil.which(tool, path=_shell_path())):
        return False
    if tool == "mlflow":
        spec = importlib.util.find_spec("mlflow")
        return bool(spec and spec.origin and (Path(spec.origin).parent / "server" / "js" / "build").is_dir())
    return True


def missing(tool: str) -> str:
    """'' where the user's shell can run the viewer `tool`; else what installs it, as a
    hint: the viewers' extra, every viewer at its writer's version (MLflow's full
    package, whose UI mlflow-skinny, the tracker extra's, lacks)."""
    return "" if installed(tool) else f" (not installed here: `{install_extra('viewers')}` first)"


def install(*packages: str) -> str:
    """The command that installs `packages` into the environment the tool runs in."""
    python = _as_typed(sys.executable)
    if importlib.util.find_spec("pip") is not None:
        words = [python, "-m", "pip", "install", *packages]
    elif shutil.which("uv", path=_shell_path()):  # an environment uv made has no pip
        words = ["uv", "pip", "install", "--python", python, *packages]
    else:
        words = ["python3", "-m", "pip", "install", *packages]
    return " ".join(shlex.quote(w) for w in words)


def install_extra(extra: str, flags: tuple[str, ...] = ()) -> str:
    """The command that adds the project's optional dependencies `extra` to this
    environment: from the source checkout the tool runs from (editable), else
    from the package index."""
    root = Path(__file__).resolve().parents[1]
    if (root / "pyproject.toml").is_file() and (root / "orchestrator").is_dir():
        return install(*flags, "-e", f"{root}[{extra}]")
    return install(*flags, f"icr-sweep[{extra}]")


def _launcher() -> str:
    """The path the tool was started as: `scripts/icr-sweep`'s own, the console
    script's (argv[0]), else this environment's console script (a notebook, `python
    -m orchestrator.cli`), else the bare name."""
    if os.environ.get(LAUNCHER):
        return os.environ[LAUNCHER]
    if sys.argv and Path(sys.argv[0]).name == TOOL:
        return sys.argv[0]
    here = _in_environment(TOOL)
    return str(here) if here else TOOL


def _in_environment(tool: str) -> Path | None:
    """`tool`'s script in the environment's bin folder beside the running Python."""
    path = Path(sys.executable).parent / tool
    return path if path.is_file() and os.access(path, os.X_OK) else None


def _as_typed(path: str) -> str:
    """`path` as the user types it: its bare name where the shell's PATH finds that
    very file, else the path itself."""
    name = Path(path).name
    found = shutil.which(name, path=_shell_path())
    return name if found is not None and (path == name or _same(found, path)) else path


def _same(found: str, path: str) -> bool:
    """Whether `found` is `path`: the same path, or the same file where neither is a
    link. A venv's python is a link to the system's, and only the path started as
    it finds the venv (its pyvenv.cfg beside it): the system's python is another."""
    if os.path.abspath(found) == os.path.abspath(path):
        return True
    if os.path.islink(found) or os.path.islink(path):
        return False
    try:
        return os.path.samefile(found, path)
    except OSError:
        return False


def _shell_path() -> str:
    return os.environ.get(SHELL_PATH) or os.environ.get("PATH", os.defpath)
