"""A pytest plugin that measures each test's CPU time, every process the test starts
included (Ray's daemons and workers, which getrusage never sees): each pytest process
moves into a cgroup v2 folder of its own, and a test's time is that folder's
``cpu.stat`` usage across it. `bench/suite_cpu.py --per-test FILE` loads it; by hand:

    ICR_TEST_CPU_DIR=/tmp/cpu PYTHONPATH=bench python -m pytest -p pytest_cpu ...

writes one JSON line per test (nodeid, cpu_s, wall_s) to /tmp/cpu/<worker>.jsonl. A
process a test leaves running is counted in the tests after it, in the same worker.
Without a writable cgroup v2 hierarchy it measures nothing and says so once.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest


def _own_group(name: str) -> Path | None:
    """A cgroup v2 folder under this process's own, with this process moved into it."""
    line = next((x for x in Path("/proc/self/cgroup").read_text().splitlines() if x.startswith("0::")), None)
    for mount in (Path("/sys/fs/cgroup"), Path("/sys/fs/cgroup/unified")):
        if line is None or not (mount / "cgroup.procs").exists():
            continue
        group = mount / line[3:].lstrip("/") / name
        try:
            group.mkdir(exist_ok=True)
            (group / "cgroup.procs").write_text(str(os.getpid()))
        except OSError:
            continue
        if (group / "cpu.stat").exists():
            return group
    return None


def _usage(group: Path) -> float:
    stat = dict(line.split() for line in (group / "cpu.stat").read_text().splitlines())
    return int(stat["usage_usec"]) / 1e6


class PerTestCpu:
    def __init__(self, out_dir: Path):
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        self.group = _own_group(f"icr-test-{worker}-{os.getpid()}")
        self.out = out_dir / f"{worker}.jsonl"
        if self.group is None:
            print("pytest_cpu: no writable cgroup v2 folder; nothing measured", file=sys.stderr)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item, nextitem):
        if self.group is None:
            yield
            return
        cpu, wall = _usage(self.group), time.monotonic()
        yield
        row = {"test": item.nodeid, "cpu_s": round(_usage(self.group) - cpu, 2),
               "wall_s": round(time.monotonic() - wall, 2)}
        with self.out.open("a") as f:
            f.write(json.dumps(row) + "\n")

    def pytest_unconfigure(self, config):
        """Back into the parent folder, and this one removed (refused while a process a test left runs in it)."""
        if self.group is not None:
            try:
                (self.group.parent / "cgroup.procs").write_text(str(os.getpid()))
                self.group.rmdir()
            except OSError:
                pass


def pytest_configure(config):
    out = os.environ.get("ICR_TEST_CPU_DIR")
    is_master = config.getoption("numprocesses", None) and not os.environ.get("PYTEST_XDIST_WORKER")
    if out and not is_master:  # under xdist the workers run the tests; the master only hands them out
        Path(out).mkdir(parents=True, exist_ok=True)
        config.pluginmanager.register(PerTestCpu(Path(out)), "pytest_cpu_per_test")
