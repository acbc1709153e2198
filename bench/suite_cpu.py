"""The CPU time of a command and of every process it starts, daemons included.

    python bench/suite_cpu.py [--out bench/results/suite_cpu.json] [--label L] -- scripts/test

`time` and ``getrusage(RUSAGE_CHILDREN)`` count a process only once its parent waits
for it, and Ray's raylet ignores SIGCHLD: its workers are reaped by the kernel and
their CPU time reaches no one (a one-test sweep: 36 core-seconds by getrusage against
63 by the machine's own counters). So the command runs in a cgroup of its own, whose
accounting holds every process and thread started inside it: a cgroup v2 folder where
one can be made (its ``cpu.stat``), else cgroup v1's cpuacct (``cpuacct.stat``); where
neither can be made (no root, no delegation), the machine's counters in /proc/stat,
which hold every other process's time too: run nothing else meanwhile (the record
says which was used). The record is appended to ``--out``: user, system and total
core-seconds, wall seconds, the command's exit status and the machine's CPU count.
``--per-test FILE`` also loads bench/pytest_cpu.py into every pytest the command
runs (through PYTEST_ADDOPTS) and writes each test's CPU time to FILE, the costliest
first, with their sum per file.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import uuid
from collections import defaultdict
from pathlib import Path

V2 = Path("/sys/fs/cgroup")
V1_CPUACCT = Path("/sys/fs/cgroup/cpuacct")


class Counter:
    """User and system seconds of what runs in `group` (None: the whole machine)."""

    def __init__(self):
        self.group, self.kind = self._make_group()

    @staticmethod
    def _make_group() -> tuple[Path | None, str]:
        name = f"icr-suite-{uuid.uuid4().hex[:8]}"
        for root, kind, stat in ((V2, "cgroup v2 cpu.stat", "cpu.stat"),
                                 (V2 / "unified", "cgroup v2 cpu.stat", "cpu.stat"),
                                 (V1_CPUACCT, "cgroup v1 cpuacct.stat", "cpuacct.stat")):
            try:
                group = root / name
                group.mkdir()
            except OSError:
                continue
            if (group / stat).exists():
                return group, kind
            group.rmdir()
        return None, "/proc/stat (the whole machine)"

    def read(self) -> tuple[float, float]:
        if self.group is None:
            fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
            user, nice, system, _idle, _iowait, irq, softirq = (int(f) for f in fields[:7])
            tick = os.sysconf("SC_CLK_TCK")
            return (user + nice) / tick, (system + irq + softirq) / tick
        if (self.group / "cpu.stat").exists():
            stat = dict(line.split() for line in (self.group / "cpu.stat").read_text().splitlines())
            return int(stat["user_usec"]) / 1e6, int(stat["system_usec"]) / 1e6
        stat = dict(line.split() for line in (self.group / "cpuacct.stat").read_text().splitlines())
        tick = os.sysconf("SC_CLK_TCK")
        return int(stat["user"]) / tick, int(stat["system"]) / tick

    def enter(self) -> None:
        """Puts this process in the group: what it starts from here is counted."""
        if self.group is not None:
            (self.group / "cgroup.procs").write_text(str(os.getpid()))

    def remove(self) -> None:
        if self.group is None:
            return
        parent = self.group.parent / "cgroup.procs"
        try:
            parent.write_text(str(os.getpid()))
            for child in sorted((d for d in self.group.rglob("*") if d.is_dir()), key=lambda d: -len(d.parts)):
                child.rmdir()  # the per-test plugin's folders, deepest first
            self.group.rmdir()  # refused while a leftover process runs in it: then it stays
        except OSError as e:
            print(f"suite_cpu: {self.group} left in place ({e})", file=sys.stderr)


def measure(command: list[str], env: dict | None = None) -> dict:
    counter = Counter()
    try:
        counter.enter()
        user0, system0 = counter.read()
        start = time.monotonic()
        status = subprocess.call(command, env=env)
        wall = time.monotonic() - start
        user1, system1 = counter.read()
    finally:
        counter.remove()
    user, system = user1 - user0, system1 - system0
    return {
        "command": " ".join(command),
        "counted_by": counter.kind,
        "exit_status": status,
        "user_s": round(user, 1),
        "system_s": round(system, 1),
        "cpu_s": round(user + system, 1),
        "wall_s": round(wall, 1),
        "cpus": os.cpu_count(),
        "machine": platform.node(),
    }


def per_test_env(out_dir: Path) -> dict:
    """The environment that loads bench/pytest_cpu.py into every pytest run, writing to out_dir."""
    env = dict(os.environ, ICR_TEST_CPU_DIR=str(out_dir))
    env["PYTEST_ADDOPTS"] = " ".join(filter(None, [env.get("PYTEST_ADDOPTS"), "-p pytest_cpu"]))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(Path(__file__).parent), env.get("PYTHONPATH")]))
    return env


def per_test_record(out_dir: Path, label: str) -> dict:
    """Each test's CPU and wall seconds from the plugin's files, the costliest first, and per file."""
    rows = [json.loads(line) for path in sorted(out_dir.glob("*.jsonl")) for line in path.read_text().splitlines()]
    rows.sort(key=lambda r: -r["cpu_s"])
    by_file = defaultdict(float)
    for r in rows:
        by_file[r["test"].split("::")[0]] += r["cpu_s"]
    return {"label": label, "tests": len(rows), "cpu_s": round(sum(r["cpu_s"] for r in rows), 1),
            "by_file": {f: round(c, 1) for f, c in sorted(by_file.items(), key=lambda kv: -kv[1])}, "rows": rows}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=None, help="JSON file the record is appended to")
    parser.add_argument("--label", default="", help="what was measured (a fresh clone, a branch)")
    parser.add_argument("--per-test", type=Path, default=None, help="JSON file each test's CPU time is written to")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the command after --")
    with tempfile.TemporaryDirectory() as tests_dir:
        env = per_test_env(Path(tests_dir)) if args.per_test else None
        record = {"label": args.label, **measure(command, env)}
        if args.per_test:
            args.per_test.write_text(json.dumps(per_test_record(Path(tests_dir), args.label), indent=1) + "\n")
    print(json.dumps(record, indent=2), file=sys.stderr)
    if args.out is not None:
        records = json.loads(args.out.read_text()) if args.out.exists() else []
        records.append(record)
        args.out.write_text(json.dumps(records, indent=2) + "\n")
    return record["exit_status"]


if __name__ == "__main__":
    sys.exit(main())
