"""bench/bench_arrays.py and bench/profile_step.py run and write their rows (tiny
models, no timing asserted): the GPU check (bench/gpu_check.sh) runs both."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parents[2]


def _run(*args):
    subprocess.run([sys.executable, *args], cwd=ROOT, check=True, capture_output=True, timeout=300)


def test_the_array_bench_writes_a_row_per_arch_n_and_k(tmp_path):
    out = tmp_path / "arrays.json"
    _run("bench/bench_arrays.py", "--archs", "transformer", "hybrid", "--n", "4", "--k", "1", "2", "--size", "tiny",
         "--min-seconds", "0", "--out", str(out))
    result = json.loads(out.read_text())
    assert result["device"].startswith("cpu") and "--k 1 2" in result["command"]
    assert [(r["arch"], r["k"]) for r in result["rows"]] == [("transformer", 1), ("transformer", 2), ("hybrid", 1), ("hybrid", 2)]
    assert all(r["separate_samples_per_s"] > 0 and r["array_samples_per_s"] > 0 for r in result["rows"])


def test_the_step_profile_names_its_top_operators(tmp_path):
    out = tmp_path / "profile.json"
    _run("bench/profile_step.py", "--archs", "mamba", "--n", "4", "--size", "tiny", "--steps", "1", "--out", str(out))
    (row,) = json.loads(out.read_text())["rows"]
    assert row["arch"] == "mamba" and row["samples_per_s"] > 0 and 0 <= row["data_share"] <= 1
    assert row["top"] and all(t["ms_per_step"] >= 0 for t in row["top"])
