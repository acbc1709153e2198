"""What the end-to-end tests share: the command line of a sweep on an embedded
local Ray with 2 CPUs in a temp dir of its own, free ports, and the kill of one
test's Ray processes (never `ray stop`, which would end every Ray process of the
user). The `ray_temp` fixture is in conftest.py."""

import contextlib
import ipaddress
import os
import signal
import socket
import shutil
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path

import yaml

ROOT = Path(__file__).parents[2]
SWEEPS = ROOT / "sweeps"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def own_ray_temp():
    """A temp dir for one Ray of its own (short: Ray's unix sockets live under it and
    socket paths are limited to ~107 bytes); afterwards its Ray's processes are
    killed and the dir removed."""
    path = tempfile.mkdtemp(prefix="icr-ray-", dir="/tmp")
    try:
        yield path
    finally:
        kill_leftovers(path)
        shutil.rmtree(path, ignore_errors=True)


def kill_leftovers(temp_dir: str) -> None:
    """Ends the Ray processes of one test's cluster: those naming its temp dir on
    their command line, or holding a file under it open (Ray's agents rename
    themselves, ray::DashboardAgent, but keep their logs there)."""
    for pid in ray_processes(temp_dir):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def ray_processes(temp_dir: str) -> list[int]:
    """The processes of one test's cluster (the driver's included: its command
    line names the temp dir)."""
    out = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
            fds = os.listdir(f"/proc/{pid}/fd") if temp_dir not in cmdline else []
            if temp_dir in cmdline or any(temp_dir in _readlink(f"/proc/{pid}/fd/{fd}") for fd in fds):
                out.append(int(pid))
        except OSError:
            continue
    return out


def process_names(temp_dir: str) -> list[str]:
    """The names (comm) of the processes of one test's cluster."""
    names = []
    for pid in ray_processes(temp_dir):
        try:
            names.append(Path(f"/proc/{pid}/comm").read_text().strip())
        except OSError:
            continue
    return names


def listening(temp_dir: str) -> list[tuple[str, int, str]]:
    """(address, port, process name) of every TCP socket the processes of one
    test's cluster listen on, read from /proc (IPv4 and IPv6)."""
    inodes = {}
    for pid in ray_processes(temp_dir):
        try:
            name = Path(f"/proc/{pid}/comm").read_text().strip()
            for fd in os.listdir(f"/proc/{pid}/fd"):
                link = _readlink(f"/proc/{pid}/fd/{fd}")
                if link.startswith("socket:["):
                    inodes[link[8:-1]] = name
        except OSError:
            continue
    out = []
    for table, width in (("/proc/net/tcp", 4), ("/proc/net/tcp6", 16)):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] != "0A" or fields[9] not in inodes:  # 0A: LISTEN
                continue
            hex_address, hex_port = fields[1].split(":")
            raw = bytes.fromhex(hex_address)
            # /proc writes each 32-bit word of the address in host (little-endian) order
            address = b"".join(raw[i:i + 4][::-1] for i in range(0, width, 4))
            out.append((str(ipaddress.ip_address(address)), int(hex_port, 16), inodes[fields[9]]))
    return out


def on_loopback(address: str) -> bool:
    ip = ipaddress.ip_address(address)
    return ip.is_loopback or (ip.version == 6 and ip.ipv4_mapped is not None and ip.ipv4_mapped.is_loopback)


def _readlink(path: str) -> str:
    try:
        return os.readlink(path)
    except OSError:
        return ""


def cli(*args: str, ray_temp: str, port: int) -> list[str]:
    return [sys.executable, "-m", "orchestrator.cli", *args, *own_ray(ray_temp, port)]


def own_ray(ray_temp: str, port: int) -> list[str]:
    """The flags that give a launch or resume a Ray of its own in `ray_temp`."""
    return ["--temp-dir", ray_temp, "--dashboard-port", str(port), "--num-cpus", "2"]


def pasted(line: str, ray_temp: str, port: int) -> tuple[list[str], dict]:
    """(argv, environment) that run a command line as a user pastes it into the shell
    the tool was started from: bash at the repository's root, the project's
    environment not on PATH (scripts/icr-sweep puts it there for the tool alone),
    the flags of `own_ray` added."""
    ours = str(Path(sys.executable).parent)
    path = os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep) if p and p != ours)
    env = {k: v for k, v in os.environ.items() if k not in ("ICR_SWEEP_LAUNCHER", "ICR_SWEEP_SHELL_PATH")}
    return ["bash", "-c", " ".join([line, *own_ray(ray_temp, port)])], {**env, "PATH": path}


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


# The killme spec at half its training, for the tests that need no step between two
# evaluations: its evaluations every 512 samples, not 1024 (issue 63).
HALF_EVERY = 512


def killme_spec(tmp_path, name: str = "killme", samples: int = 12288, every: int = 1024, **training) -> Path:
    """Three seeds of one tiny trial, one at a time, each long enough to be caught midway:
    `samples` in evaluations every `every` (a test that needs no step between two
    evaluations halves both: the same rows at half the training); `training`: more
    of the protocol's fields."""
    spec = yaml.safe_load((SWEEPS / "istree_micro.yaml").read_text())
    spec.update(name=name, axes=dict(archs=["transformer"], setups=["cot"], sizes=["tiny"], n=[5], seeds=[0, 1, 2]))
    spec["training"].update(samples=samples, eval_every=every, **training)
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
