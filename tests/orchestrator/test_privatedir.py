"""The embedded Ray's private folder, its start lock and the ending of what a killed
driver left (issue 65, classes 2 and 5): only the Ray processes of a session a driver
of this tool started, never a cluster started by hand or a process that merely names
the folder; a start lock and a folder no other user can plant or hold.

Ray's processes are stood in for by processes Ray would have made: renamed
`ray::...` (its workers and agents), naming their session's folder."""

import fcntl
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from orchestrator import privatedir
from orchestrator.privatedir import PrivateFolderError, Session, end_orphans, one_start_at_a_time, private_base


def _session(base: Path, pid: int = 4242) -> Path:
    session = base / "ray" / f"session_2026-11-28_10-00-00_000000_{pid}"
    (session / "logs").mkdir(parents=True)
    (session / "logs" / "raylet.out").write_text("raylet\n")
    return session


def _process(argv0: str, *args: str) -> subprocess.Popen:
    """A process whose command line is `argv0 args...` (bash's exec -a), sleeping;
    returned once it is: its argv[0] is `argv0`. (Bash's own command line holds
    `argv0` too, in its script: a wait for that returned before the exec, and under
    load the test looked at bash, not Ray's process; seen once in CI, issue 63.)"""
    script = f'exec -a "{argv0}" {sys.executable} -c "import time; time.sleep(120)" ' + " ".join(f'"{a}"' for a in args)
    proc = subprocess.Popen(["bash", "-c", script])
    deadline = time.time() + 10
    while time.time() < deadline and Path(f"/proc/{proc.pid}/cmdline").read_bytes().split(b"\0")[0] != argv0.encode():
        time.sleep(0.05)
    return proc


def _killed_driver_record(base: Path, session: Path) -> dict:
    """A driver of this tool that started a Ray in `base`, then died (a SIGKILL)."""
    code = ("import sys; from pathlib import Path; from orchestrator.privatedir import Session; "
            f"Session(Path({str(base)!r})).started_ray({str(session)!r})")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).parents[2])
    (record,) = (base / "sessions").glob("*.json")
    import json

    return json.loads(record.read_text())


def _alive(proc: subprocess.Popen) -> bool:
    return proc.poll() is None


@pytest.fixture
def procs():
    started = []
    yield started
    for proc in started:
        proc.kill()
        proc.wait()


def test_a_cluster_started_by_hand_in_the_folder_is_never_ended(tmp_path, procs):
    """Class 2a: `ray start --head --temp-dir <the tool's folder>/ray` by hand (its
    starter exits at once, so no driver of it is alive): no record of this tool's
    names its session, and none of its processes is touched."""
    session = _session(tmp_path)
    procs += [_process("ray::DashboardAgent", str(session)), _process("ray::IDLE", f"--session-dir={session}")]
    assert end_orphans(str(tmp_path / "ray")) == (0, [])
    assert all(_alive(p) for p in procs)


def test_a_killed_drivers_ray_is_ended_and_a_users_tail_of_its_log_is_named_and_left(tmp_path, procs):
    """Class 2b: the Ray processes a killed driver left are ended; the user's
    `tail -f` of that session's raylet.out names the session too, but is no
    process of that Ray: it is left, and named."""
    session = _session(tmp_path)
    _killed_driver_record(tmp_path, session)
    ray_agent = _process("ray::DashboardAgent", str(session))
    tail = subprocess.Popen(["tail", "-f", str(session / "logs" / "raylet.out")], stdout=subprocess.DEVNULL)
    procs += [ray_agent, tail]
    time.sleep(0.2)
    ended, notes = end_orphans(str(tmp_path / "ray"))
    assert ended == 1, notes
    ray_agent.wait(timeout=10)
    assert _alive(tail)
    assert len(notes) == 1 and f"pid {tail.pid} (tail -f {session}" in notes[0], notes
    assert "is not one of the Ray processes that icr-sweep started" in notes[0]


def test_a_process_older_than_the_driver_is_not_taken_for_its_own(tmp_path, procs):
    """A Ray process that was running before the recorded driver started cannot be
    one that driver started: it is left, and named."""
    session = _session(tmp_path)
    older = _process("ray::IDLE", str(session))
    procs.append(older)
    time.sleep(0.05)
    _killed_driver_record(tmp_path, session)
    ended, notes = end_orphans(str(tmp_path / "ray"))
    assert ended == 0 and _alive(older) and f"pid {older.pid}" in notes[0]


def test_a_live_driver_and_a_reused_pid_are_told_apart(tmp_path, procs):
    """A record whose driver runs is left alone; one whose pid now belongs to a
    process started later (the pid reused) is a dead driver's."""
    session = _session(tmp_path)
    agent = _process("ray::DashboardAgent", str(session))
    procs.append(agent)
    record = Session(tmp_path)  # this process: a live driver
    record.started_ray(str(session))
    assert end_orphans(str(tmp_path / "ray")) == (0, []) and _alive(agent)
    record.data["driver_start"] -= 1  # the same pid, started at another time: not that driver
    record._write()
    assert end_orphans(str(tmp_path / "ray"))[0] == 1
    agent.wait(timeout=10)


def test_a_driver_killed_while_ray_started_is_known_by_its_session_name(tmp_path, procs):
    """A record written before Ray started, without its session: Ray names the
    session after the process that started it (session_<date>_<pid>)."""
    code = "from pathlib import Path; from orchestrator.privatedir import Session; import os; " \
           f"Session(Path({str(tmp_path)!r})); print(os.getpid())"
    pid = int(subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True,
                             cwd=Path(__file__).parents[2]).stdout)
    session = _session(tmp_path, pid)
    _session(tmp_path, pid + 1)  # another session, another starter
    agent = _process("ray::IDLE", str(session))
    procs.append(agent)
    assert end_orphans(str(tmp_path / "ray"))[0] == 1
    agent.wait(timeout=10)


def test_foreign_entries_in_rays_folder_are_passed_over(tmp_path):
    """Class 5e: a folder `session_..._123.bak`, or one with a 20-digit suffix, made
    every launch fail (ValueError, OverflowError)."""
    for name in ("session_2026-11-28_10-00-00_000000_123.bak", "session_2026-11-28_10-00-00_000000_" + "9" * 20):
        (tmp_path / "ray" / name).mkdir(parents=True)
    Session(tmp_path)
    assert end_orphans(str(tmp_path / "ray")) == (0, [])


def test_the_default_folder_must_be_the_users_own_folder(tmp_path, monkeypatch):
    """Class 5c and 5d: <tmp>/icr-sweep-<uid> a link (to a folder of the user's, or
    planted by another user), or a file: refused by name, and nothing is changed
    where the link points."""
    monkeypatch.setattr("tempfile.gettempdir", lambda: str(tmp_path))
    base = tmp_path / f"icr-sweep-{os.getuid()}"
    mine = tmp_path / "my-project"
    mine.mkdir(mode=0o755)
    os.symlink(mine, base)
    if os.getuid() == 0:
        os.lchown(base, 1234, 1234)  # planted by another user
    with pytest.raises(PrivateFolderError, match=rf"{base} is a link \(to {mine}\)"):
        private_base(None)
    assert mine.stat().st_mode & 0o777 == 0o755 and list(mine.iterdir()) == []
    base.unlink()
    base.write_text("not a folder")
    with pytest.raises(PrivateFolderError, match=rf"{base} is a file, not the private folder"):
        private_base(None)
    base.unlink()
    assert private_base(None) == base and base.stat().st_mode & 0o777 == 0o700


def test_the_start_lock_lies_in_the_private_folder_and_is_never_followed(tmp_path):
    """Class 5a: the lock was a file in the shared temp folder, which another user
    could make a link to a file of theirs (root then created what it named)."""
    target = tmp_path / "elsewhere"
    os.symlink(target, tmp_path / privatedir.START_LOCK)
    with pytest.raises(OSError):
        with one_start_at_a_time(tmp_path, print):
            pass
    assert not target.exists()


def test_a_held_start_lock_is_waited_for_a_bounded_time_naming_its_holder(tmp_path):
    """Class 5b: a start lock held elsewhere gave no output for 75 s; now the wait
    says whose it is, and ends."""
    holder = subprocess.Popen([sys.executable, "-c", (
        "import fcntl, os, sys, time; fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600); "
        "os.write(fd, str(os.getpid()).encode()); fcntl.flock(fd, fcntl.LOCK_EX); print('held', flush=True); "
        "time.sleep(60)"), str(tmp_path / privatedir.START_LOCK)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        said = []
        started = time.monotonic()
        with pytest.raises(PrivateFolderError, match=rf"another icr-sweep \(pid {holder.pid}\) has held .* for over 1 s"):
            with one_start_at_a_time(tmp_path, said.append, wait_s=1):
                pass
        assert time.monotonic() - started < 5
        assert said == [f"Waiting for another icr-sweep (pid {holder.pid}) to finish starting its Ray ..."]
    finally:
        holder.kill()
        holder.wait()
    with one_start_at_a_time(tmp_path, said.append, wait_s=1):  # released with its holder
        fd = os.open(tmp_path / privatedir.START_LOCK, os.O_RDONLY)
        with pytest.raises(OSError):
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.close(fd)


@pytest.mark.parametrize("seen", ["held", "logged"])
def test_a_dashboard_port_taken_while_ray_started_is_named(tmp_path, monkeypatch, seen):
    """Class 5f: two launches of different users (or TMPDIRs) at once; the loser
    said "Ray did not start (Exception: The last 20 lines of .../dashboard.log)".
    The port is named where another program still holds it, and (issue 83, class 9)
    where it was free again by the time Ray said so, the other between its tries:
    the dashboard's log names the clash."""
    import ray
    import yaml

    from orchestrator import cluster
    from orchestrator.spec import load_spec

    spec_path = tmp_path / "s.yaml"
    spec_path.write_text(yaml.safe_dump({"name": "s", "axes": {"archs": ["transformer"], "setups": ["cot"],
                                                                "sizes": ["tiny"], "n": [5]}}))
    taken, log = [], tmp_path / "ray" / "session_x" / "logs" / "dashboard.log"

    def the_port_is_taken(**kwargs):
        if seen == "held":  # another user's Ray holds it
            s = socket.socket()
            s.bind((kwargs["dashboard_host"], kwargs["dashboard_port"]))
            taken.append(s)
        else:  # the dashboard met it in use; free again now
            log.parent.mkdir(parents=True)
            log.write_text(f"Exception: Failed to find a valid port for dashboard after 0 retries: [Errno 98] error "
                           f"while attempting to bind on address ('127.0.0.1', {kwargs['dashboard_port']}): address "
                           "already in use\n")
        raise Exception(f"The last 20 lines of {log} (it contains the error message from the dashboard)")

    monkeypatch.setattr(ray, "init", the_port_is_taken)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(cluster.ClusterError) as e:
        cluster.start_ray(load_spec(spec_path), None, str(tmp_path), "127.0.0.1", port, None)
    assert f"port {port} on 127.0.0.1, free when this launch chose it, was taken meanwhile" in str(e.value)
    for s in taken:
        s.close()


@pytest.mark.skipif(os.getuid() != 0, reason="needs root, to act as a second user")
def test_another_user_can_neither_plant_nor_hold_the_start_lock(monkeypatch):
    """Class 5a and 5b with a second user: the lock lies in this user's private
    folder (0700), which another user cannot enter to make a link there or to take
    a lock on the file; in the shared temp folder itself, they can (the control)."""
    import tempfile

    python = shutil.which("python3", path="/usr/bin:/bin")  # one another user may run (not root's own)
    if python is None:
        pytest.skip("no system python3 for the second user")
    shared = Path(tempfile.mkdtemp(dir="/tmp", prefix="icr-shared-"))  # its parents open to every user, as /tmp's
    try:
        os.chmod(shared, 0o1777)
        monkeypatch.setattr("tempfile.gettempdir", lambda: str(shared))
        base = private_base(None)
        with one_start_at_a_time(base, print):
            pass
        probe = ("import fcntl, os, sys\n"
                 "lock, shared = sys.argv[1:]\n"
                 "for attempt in (lambda: os.symlink('/etc/passwd', lock + '.planted'),\n"
                 "                lambda: fcntl.flock(os.open(lock, os.O_RDONLY), fcntl.LOCK_SH),\n"
                 "                lambda: os.symlink('/etc/passwd', os.path.join(shared, 'planted'))):\n"
                 "    try:\n"
                 "        attempt(); print('done')\n"
                 "    except PermissionError:\n"
                 "        print('refused')\n")
        out = subprocess.run([python, "-c", probe, str(base / privatedir.START_LOCK), str(shared)], user=1234,
                             group=1234, capture_output=True, text=True, check=True, cwd="/")
        assert out.stdout.split() == ["refused", "refused", "done"], out
    finally:
        shutil.rmtree(shared, ignore_errors=True)


def test_starts_with_other_temp_dirs_share_one_start_lock(tmp_path, monkeypatch):
    """Two launches of one user with other --temp-dir, or other TMPDIRs, choose their
    dashboard ports one after the other: the lock is the private folder's in /tmp
    (issue 83, class 9: two launches with other TMPDIRs met at port 8265, and one
    failed). Only where that folder cannot be used does TMPDIR's, then a --temp-dir,
    take its own."""
    from orchestrator.privatedir import start_lock_folder

    fixed, tmpdir = tmp_path / "tmp", tmp_path / "TMPDIR"
    fixed.mkdir()
    tmpdir.mkdir()
    monkeypatch.setattr(privatedir, "LOCK_TMP", str(fixed))
    default = fixed / f"icr-sweep-{os.getuid()}"
    for other in ("one", "another"):
        monkeypatch.setattr("tempfile.gettempdir", lambda: str(tmp_path / other))
        assert start_lock_folder(str(tmp_path / "a")) == start_lock_folder(str(tmp_path / "b")) == default
    monkeypatch.setattr("tempfile.gettempdir", lambda: str(tmpdir))
    default.rmdir()
    default.write_text("planted")
    assert start_lock_folder(str(tmp_path / "a")) == tmpdir / f"icr-sweep-{os.getuid()}"
    (tmpdir / f"icr-sweep-{os.getuid()}").rmdir()
    (tmpdir / f"icr-sweep-{os.getuid()}").write_text("planted")
    assert start_lock_folder(str(tmp_path / "a")) == tmp_path / "a"
    with pytest.raises(PrivateFolderError):
        start_lock_folder(None)


def test_a_start_lock_held_too_long_is_not_said_to_move_with_the_temp_dir(tmp_path):
    """Issue 83, class 9: the timeout advised --temp-dir, which does not move the lock."""
    holder = subprocess.Popen([sys.executable, "-c", (
        "import fcntl, os, sys, time; fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600); "
        "fcntl.flock(fd, fcntl.LOCK_EX); print('held', flush=True); time.sleep(60)"),
        str(tmp_path / privatedir.START_LOCK)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(PrivateFolderError) as e:
            with one_start_at_a_time(tmp_path, lambda line: None, wait_s=0.5):
                pass
    finally:
        holder.kill()
        holder.wait()
    assert "start with --temp-dir" not in str(e.value) and "whatever --temp-dir says" in str(e.value), str(e.value)
