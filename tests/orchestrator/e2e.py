"""What the end-to-end tests share: the command line of a sweep on an embedded
local Ray with 2 CPUs in a temp dir of its own, free ports, and the kill of one
test's Ray processes (never `ray stop`, which would end every Ray process of the
user). The `ray_temp` fixture is in conftest.py."""

import os
import signal
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import yaml

SWEEPS = Path(__file__).parents[2] / "sweeps"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def kill_leftovers(temp_dir: str) -> None:
    """Ends the Ray processes of one test's cluster: those naming its temp dir on
    their command line, or holding a file under it open (Ray's agents rename
    themselves, ray::DashboardAgent, but keep their logs there)."""
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
            fds = os.listdir(f"/proc/{pid}/fd") if temp_dir not in cmdline else []
            holds = temp_dir in cmdline or any(temp_dir in _readlink(f"/proc/{pid}/fd/{fd}") for fd in fds)
        except OSError:
            continue
        if holds:
            try:
                os.kill(int(pid), signal.SIGKILL)
            except ProcessLookupError:
                pass


def _readlink(path: str) -> str:
    try:
        return os.readlink(path)
    except OSError:
        return ""


def cli(*args: str, ray_temp: str, port: int) -> list[str]:
    return [sys.executable, "-m", "orchestrator.cli", *args, "--temp-dir", ray_temp,
            "--dashboard-port", str(port), "--num-cpus", "2"]


def dashboard_answers(port: int) -> bool:
    token = (Path.home() / ".ray" / "auth_token").read_text().strip()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/api/version", headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(req, timeout=2) as r:
            return r.status == 200 and b"ray_version" in r.read()
    except (OSError, FileNotFoundError):
        return False


def results_so_far(trial_dir: Path) -> list[dict]:
    """A trial's rows as stored so far: read while the trial writes, its last line may
    be half written (CI saw one), and is left out as the run directory's reader does."""
    from orchestrator.rundir import parse_rows

    path = trial_dir / "result.json"
    if not path.exists():
        return []
    return parse_rows(path.read_text())


def killme_spec(tmp_path, name: str = "killme", samples: int = 12288) -> Path:
    """Three seeds of one tiny trial, one at a time, each long enough to be caught midway."""
    spec = yaml.safe_load((SWEEPS / "istree_micro.yaml").read_text())
    spec.update(name=name, axes=dict(archs=["transformer"], setups=["cot"], sizes=["tiny"], n=[5], seeds=[0, 1, 2]))
    spec["training"].update(samples=samples, eval_every=1024)
    spec["resources"].update(max_concurrent=1)
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def launch_to_the_end(spec: dict, tmp_path: Path, ray_temp: str, env: dict | None = None) -> tuple[Path, Path]:
    """Writes `spec` and launches it into tmp_path/runs (`env`: more environment);
    asserts the sweep finished. Returns the spec's path and the storage; the console
    is kept in tmp_path/console.txt."""
    spec_path, storage = tmp_path / f"{spec['name']}.yaml", tmp_path / "runs"
    spec_path.write_text(yaml.safe_dump(spec))
    result = subprocess.run(cli("launch", str(spec_path), "--storage", str(storage), ray_temp=ray_temp, port=free_port()),
                            capture_output=True, text=True, timeout=900, env={**os.environ, **(env or {})})
    (tmp_path / "console.txt").write_text(result.stdout + result.stderr)
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    return spec_path, storage
