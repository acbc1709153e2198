"""bench/suite_cpu.py counts the CPU time of every process a command starts, those
whose parent never waits for them included (as Ray's raylet leaves its workers to
the kernel): what `time` and getrusage miss."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parents[2]

# A parent that ignores SIGCHLD (its children are reaped by the kernel, their CPU time
# given to no one) starts a child that spins until it has used half a CPU-second.
UNWAITED_CHILD = """
import os, signal, sys, time
signal.signal(signal.SIGCHLD, signal.SIG_IGN)
done = sys.argv[1]
if os.fork() == 0:
    while time.process_time() < 0.5:
        pass
    open(done, "w").close()
    os._exit(0)
while not os.path.exists(done):
    time.sleep(0.05)
time.sleep(0.1)  # the child's exit
"""


def test_the_cpu_time_of_a_child_no_one_waits_for_is_counted(tmp_path):
    out = tmp_path / "cpu.json"
    result = subprocess.run([sys.executable, "bench/suite_cpu.py", "--label", "probe", "--out", str(out), "--",
                             sys.executable, "-c", UNWAITED_CHILD, str(tmp_path / "done")], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    (record,) = json.loads(out.read_text())
    assert record["label"] == "probe" and record["exit_status"] == 0
    assert record["cpu_s"] >= 0.5, record  # the child's half second at least
    assert abs(record["cpu_s"] - record["user_s"] - record["system_s"]) <= 0.15, record  # each rounded to 0.1
