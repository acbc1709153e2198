"""Where a command's CPU time goes, by kind of process: pytest, the tool's drivers,
trial workers, W&B's actors, Ray's daemons (each by name), anything else by name.

    sudo python bench/suite_processes.py [--out suite_processes.json] -- scripts/test

Every process that exits while the command runs is counted by the kernel's process
accounting (acct(2), root only), whose record holds its CPU time but, for a
threaded process, the name of its last thread: so /proc is read every 0.3 s
meanwhile for each process's own name and command line (Ray renames its workers:
`ray::ImplicitFunc`, `ray::IDLE`), joined by pid and start time. A process that
lived less than 0.3 s keeps the record's name. The machine's other processes are
counted too: run nothing else meanwhile. Writes each kind's process count and
core-seconds, largest first.
"""

from __future__ import annotations

import argparse
import collections
import ctypes
import json
import os
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

RECORD = struct.Struct("<BBHIIIIIIf8H16s")  # struct acct_v3 (Linux), 64 bytes
TICKS = os.sysconf("SC_CLK_TCK")


def _comp(value: int) -> int:
    """A comp_t (13-bit mantissa, 3-bit base-8 exponent) as an int."""
    return (value & 0x1FFF) << (3 * ((value >> 13) & 7))


def kind(name: str, cmdline: str) -> str:
    """The kind of a process by its name and command line."""
    if name.startswith("ray::ImplicitFu") or cmdline.rstrip().endswith(".train"):  # Tune's actor, named after its trial or not
        return "trial worker"
    if name.startswith("ray::Actor") or "W&B" in name:
        return "W&B logging actor"
    if "_QueueActo" in name:
        return "Ray queue actor"
    if name.startswith("wandb"):
        return "W&B service"
    if "orchestrator.cli" in cmdline or "bin/icr-sweep" in cmdline:
        return "icr-sweep driver"
    if "pytest" in cmdline or "execnet" in cmdline or "xdist" in cmdline:
        return "pytest"
    if name in ("raylet", "gcs_server") or name.startswith("ray::"):
        return f"Ray: {name}"
    for script in ("dashboard.py", "log_monitor.py", "monitor.py", "setup_worker.py"):
        if script in cmdline:
            return f"Ray: {script}"
    return f"other: {name}"


class Names(threading.Thread):
    """Each process's name and command line, by (pid, start time in ticks), read
    from /proc until stopped."""

    def __init__(self):
        super().__init__(daemon=True)
        self.seen: dict[tuple[int, int], tuple[str, str]] = {}
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            for entry in os.listdir("/proc"):
                if not entry.isdigit():
                    continue
                try:
                    name = Path(f"/proc/{entry}/comm").read_text().strip()
                    started = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[19])
                    key = (int(entry), started)
                    known = self.seen.get(key)
                    if known and (known[0] == name or known[0].startswith("ray::") and name == "ray::IDLE"):
                        continue
                    cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                except (OSError, ValueError, IndexError):
                    continue
                # A Ray worker's name of its task (ray::ImplicitFunc) is kept over its idle one.
                if not (known and known[0].startswith("ray::") and known[0] != "ray::IDLE" and name == "ray::IDLE"):
                    self.seen[key] = (name, cmdline or (known[1] if known else ""))
            self.stop.wait(0.3)


def tally(log: bytes, names: dict[tuple[int, int], tuple[str, str]], boot: float) -> dict[str, dict]:
    """Core-seconds and process count per kind, from acct records and the names seen."""
    by_pid = collections.defaultdict(list)
    for (pid, started), named in names.items():
        by_pid[pid].append((boot + started / TICKS, named))
    kinds: dict[str, dict] = collections.defaultdict(lambda: {"processes": 0, "cpu_s": 0.0})
    for offset in range(0, len(log) - RECORD.size + 1, RECORD.size):
        fields = RECORD.unpack_from(log, offset)
        pid, began = fields[6], fields[8]
        cpu = (_comp(fields[10]) + _comp(fields[11])) / 100  # acct's AHZ
        named = [n for at, n in by_pid.get(pid, []) if abs(at - began) < 3]
        name, cmdline = named[0] if named else (fields[18].split(b"\0")[0].decode(errors="replace"), "")
        k = kinds[kind(name, cmdline)]
        k["processes"] += 1
        k["cpu_s"] += cpu
    return {name: {**k, "cpu_s": round(k["cpu_s"], 1)}
            for name, k in sorted(kinds.items(), key=lambda item: -item[1]["cpu_s"])}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("suite_processes.json"))
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the command after --")
    libc = ctypes.CDLL(None, use_errno=True)
    boot = next(float(line.split()[1]) for line in open("/proc/stat") if line.startswith("btime"))
    with tempfile.NamedTemporaryFile(prefix="icr-acct-") as log:
        if libc.acct(log.name.encode()) != 0:
            print(f"process accounting could not be turned on ({os.strerror(ctypes.get_errno())}): it needs root",
                  file=sys.stderr)
            return 2
        names = Names()
        names.start()
        try:
            status = subprocess.call(command)
        finally:
            libc.acct(None)
            names.stop.set()
            names.join()
        kinds = tally(Path(log.name).read_bytes(), names.seen, boot)
    record = {"command": " ".join(command), "exit_status": status,
              "cpu_s": round(sum(k["cpu_s"] for k in kinds.values()), 1), "kinds": kinds}
    args.out.write_text(json.dumps(record, indent=2) + "\n")
    for name, k in kinds.items():
        print(f"{k['cpu_s']:9.1f} {k['processes']:6d}  {name}", file=sys.stderr)
    return status


if __name__ == "__main__":
    sys.exit(main())
