"""The embedded Ray's private folder, its start lock, and the sessions this tool
started in it: what `start_ray` needs to end only what it started.

    <tmp>/icr-sweep-<uid>/  (or --temp-dir DIR)   this user's alone: 0700, never a link
        ray/                     Ray's own temp dir: its sessions, logs and sockets
        ray-start.lock           one embedded Ray start at a time for this user (the folder's in
                                 /tmp, whatever --temp-dir or TMPDIR say: start_lock_folder)
        sessions/<pid>-<start>.json   a driver of this tool that started a Ray here: its pid,
                                 the time it started (clock ticks since boot) and the boot,
                                 and, once Ray is up, its session's folder

A driver killed with SIGKILL leaves Ray's dashboard and runtime-env agents running.
The next start ends them, and only them: the Ray processes of a session some driver
of this tool started here (a record says so), whose driver is gone (its pid dead, or
reused by a process started later), this user's, started after that driver, and
Ray's own (a program of Ray's package, or a process Ray renamed `ray::...`). A
cluster started by hand (`ray start --temp-dir` on the same folder) has no record and
is never touched; a process that only names the folder (a `tail -f` of a log) is
named and left."""

import contextlib
import errno
import fcntl
import functools
import json
import os
import signal
import stat
import tempfile
import time
from pathlib import Path
from typing import Callable, Optional


class PrivateFolderError(RuntimeError):
    """The private folder cannot be used: a link, a file, another user's."""


SESSIONS = "sessions"
START_LOCK = "ray-start.lock"
LOCK_TMP = "/tmp"  # the start lock's folder's parent, whatever TMPDIR says (start_lock_folder)
START_WAIT_S = 180.0  # a Ray start takes seconds; a start lock held longer is another start that hung


def private_base(temp_dir: Optional[str], tmp: Optional[str] = None) -> Path:
    """The folder above Ray's temp dir: `temp_dir`, or <tmp>/icr-sweep-<uid> (`tmp`:
    the system's temp folder, TMPDIR's), made 0700 where missing. The default one,
    in a folder every user may write, must be this user's own folder, not a link
    (another user could plant one to a folder of theirs, or of this user's):
    PrivateFolderError names what is wrong."""
    if temp_dir:
        base = Path(temp_dir)
        made = not base.exists()
        base.mkdir(mode=0o700, parents=True, exist_ok=True)
        if made:
            os.chmod(base, 0o700)  # a folder we made: private whatever the umask
        return base
    base = Path(tmp or tempfile.gettempdir()) / f"icr-sweep-{os.getuid()}"
    with contextlib.suppress(FileExistsError):
        os.mkdir(base, 0o700)
    info = os.lstat(base)
    instead = "remove it, or start with --temp-dir DIR, a folder of your own"
    if stat.S_ISLNK(info.st_mode):
        raise PrivateFolderError(f"{base} is a link (to {os.readlink(base)}), not the private folder this tool makes "
                                 f"for Ray's files: {instead}")
    if not stat.S_ISDIR(info.st_mode):
        raise PrivateFolderError(f"{base} is a file, not the private folder this tool makes for Ray's files: {instead}")
    if info.st_uid != os.getuid():
        raise PrivateFolderError(f"{base} belongs to another user; start with --temp-dir DIR, a folder of your own")
    fd = os.open(base, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        os.fchmod(fd, 0o700)
    finally:
        os.close(fd)
    return base


def start_lock_folder(temp_dir: Optional[str]) -> Path:
    """Where the start lock lies: this user's private folder in /tmp, whatever
    --temp-dir or TMPDIR say, so that two starts of the same user with other temp
    dirs still choose their dashboard ports one after the other (two launches with
    other TMPDIRs met at port 8265, and one failed: issue 83, class 9); TMPDIR's, or
    the given temp dir, only where that one cannot be used (a link or a file
    planted there)."""
    for tmp in (LOCK_TMP, None):
        try:
            return private_base(None, tmp)
        except (PrivateFolderError, OSError):
            continue
    if not temp_dir:
        return private_base(None)  # raises, naming what is wrong
    return private_base(temp_dir)


@contextlib.contextmanager
def one_start_at_a_time(base: Path, say: Callable[[str], None], wait_s: float = START_WAIT_S):
    """Holds the start lock of `base` while one command starts an embedded Ray there
    (the kernel releases it if the command dies). It lies in the private folder,
    opened without following a link: no other user can plant or hold it. A lock
    held by another start is waited for, saying whose, at most `wait_s` seconds."""
    path = base / START_LOCK
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        deadline, said = time.monotonic() + wait_s, False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as e:
                if e.errno not in (errno.EWOULDBLOCK, errno.EACCES):
                    raise
            holder = _holder(fd)
            if time.monotonic() > deadline:
                raise PrivateFolderError(f"another icr-sweep ({holder}) has held {path} for over {wait_s:g} s while "
                                         "starting Ray (a start takes seconds: it hangs); end it, then launch again. "
                                         "Every start of yours on this machine waits for that lock, whatever "
                                         "--temp-dir says")
            if not said:
                say(f"Waiting for another icr-sweep ({holder}) to finish starting its Ray ...")
                said = True
            time.sleep(0.2)
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        yield
    finally:
        os.close(fd)  # releases the lock


def _holder(fd: int) -> str:
    text = os.pread(fd, 32, 0).decode(errors="replace").strip()
    return f"pid {text}" if text.isdigit() else "pid unknown"


def started(pid: int) -> Optional[int]:
    """When process `pid` started, in clock ticks since boot (/proc/<pid>/stat's 22nd
    field); None where it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(text.rpartition(")")[2].split()[19])  # the fields after the name, which may hold spaces


def boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


class Session:
    """The record of one driver's embedded Ray, written before Ray starts (so that a
    driver killed during the start is known) and given its session's folder once up."""

    def __init__(self, base: Path):
        pid = os.getpid()
        self.data = {"driver_pid": pid, "driver_start": started(pid), "boot": boot_id(), "session_dir": None}
        folder = base / SESSIONS
        folder.mkdir(mode=0o700, exist_ok=True)
        self.path = folder / f"{pid}-{self.data['driver_start']}.json"
        self._write()

    def started_ray(self, session_dir: Optional[str]) -> None:
        self.data["session_dir"] = session_dir
        self._write()

    def _write(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.data))
        os.replace(tmp, self.path)


def end_orphans(ray_temp: str) -> tuple[int, list[str]]:
    """Ends the Ray processes of the sessions this tool started under `ray_temp`
    whose driver is gone (module docstring); returns how many it ended, and a note
    for each process it found naming such a session but left (not Ray's own, or not
    provably started by that driver). A record whose session has nothing left
    running is removed."""
    folder = Path(ray_temp).parent / SESSIONS
    ended, notes = 0, []
    for record in sorted(folder.glob("*.json")) if folder.is_dir() else ():
        data = _read(record)
        if data is None or driver_alive(data):
            continue
        session = _session_dir(Path(ray_temp), data)
        left = 0
        for pid, argv in processes_naming(session) if session is not None else []:
            if _rays(argv, pid) and (started(pid) or -1) >= (data.get("driver_start") or 0):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                    ended += 1
                continue
            left += 1
            notes.append(f"Left running: pid {pid} ({' '.join(argv)[:200]}), which names the Ray session of a killed "
                         f"icr-sweep ({session}) but is not one of the Ray processes that icr-sweep started.")
        if not left:
            record.unlink(missing_ok=True)  # nothing of it runs now
    return ended, notes


def _read(record: Path) -> Optional[dict]:
    try:
        data = json.loads(record.read_text())
        return data if isinstance(data, dict) and isinstance(data.get("driver_pid"), int) else None
    except (OSError, ValueError):
        return None


def driver_alive(data: dict) -> bool:
    """The recorded driver runs still: same boot, its pid alive and started when it did."""
    if data.get("boot") != boot_id():
        return False
    return started(data["driver_pid"]) == data.get("driver_start")


def _session_dir(ray_temp: Path, data: dict) -> Optional[str]:
    """The session's folder: recorded, or for a driver killed while Ray started, the
    one Ray names after the process that started it (session_<date>_<pid>)."""
    if data.get("session_dir"):
        return str(data["session_dir"])
    suffix = f"_{data['driver_pid']}"
    found = [s for s in ray_temp.glob("session_2*") if s.name.endswith(suffix) and s.is_dir() and not s.is_symlink()]
    return str(found[0]) if len(found) == 1 else None


def processes_naming(session: str) -> list[tuple[int, list[str]]]:
    """This user's processes (not this one) whose command line or an open file names `session`."""
    out = []
    for pid in (int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) != os.getpid()):
        try:
            if os.stat(f"/proc/{pid}").st_uid != os.getuid():
                continue
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
            argv = [a for a in argv if a]
            if any(session in text for text in (" ".join(argv), *_links(pid))):
                out.append((pid, argv))
        except OSError:  # gone meanwhile, or not ours to read
            continue
    return out


def _links(pid: int) -> list[str]:
    out = []
    with contextlib.suppress(OSError):
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                out.append(os.readlink(f"/proc/{pid}/fd/{fd}"))
    return out


@functools.cache
def _ray_package() -> str:
    """Where Ray's installed package lies (found once, not per process looked at)."""
    import importlib.util

    return importlib.util.find_spec("ray").submodule_search_locations[0]


def _rays(argv: list[str], pid: int) -> bool:
    """Whether a process is one of Ray's own: renamed by Ray (`ray::...`), or running a
    program of Ray's package (its daemons, agents, workers)."""
    package = _ray_package()
    if argv and argv[0].startswith("ray::"):
        return True
    try:
        exe = os.readlink(f"/proc/{pid}/exe")
    except OSError:
        exe = ""
    return exe.startswith(package) or any(arg.startswith(package) for arg in argv)
