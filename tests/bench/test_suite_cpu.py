"""bench/suite_cpu.py counts the CPU time of every process a command starts, those
whose parent never waits for them included (as Ray's raylet leaves its workers to
the kernel): what `time` and getrusage miss."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

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


def test_each_tests_cpu_time_holds_the_children_no_one_waits_for(tmp_path):
    # --per-test: each pytest process in a cgroup folder of its own, a test's time that folder's.
    test_file = tmp_path / "test_probe.py"
    test_file.write_text("import subprocess, sys\n"
                         f"CHILD = {UNWAITED_CHILD!r}\n"
                         "def test_spins(tmp_path):\n"
                         "    subprocess.run([sys.executable, '-c', CHILD, str(tmp_path / 'done')], check=True)\n"
                         "def test_idle():\n"
                         "    pass\n")
    per_test = tmp_path / "tests.json"
    result = subprocess.run([sys.executable, "bench/suite_cpu.py", "--per-test", str(per_test), "--",
                             sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
                             "-n", "0", str(test_file)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    if "no writable cgroup v2 folder" in result.stderr:
        pytest.skip("no writable cgroup v2 hierarchy here: the plugin measures nothing, as it says")
    record = json.loads(per_test.read_text())
    rows = {r["test"].split("::")[1]: r for r in record["rows"]}
    assert record["tests"] == 2 and [r["test"].split("::")[1] for r in record["rows"]] == ["test_spins", "test_idle"]
    assert rows["test_spins"]["cpu_s"] >= 0.5 > rows["test_idle"]["cpu_s"], rows
    assert list(record["by_file"].values()) == [record["cpu_s"]]  # one file: its sum is the whole
    assert "left in place" not in result.stderr, result.stderr  # the plugin's folders and the command's removed
