"""bench/bench_gpu_mixers.py's code path on CPU (both twins on our path there):
twins share their weights, agree exactly, and every row is written (no timing
asserted)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]


@pytest.mark.parametrize("mode", ["train", "forward"])
def test_mixer_bench_runs_its_twins_on_cpu_and_writes_its_rows(tmp_path, mode):
    out = tmp_path / "mixers.json"
    subprocess.run([sys.executable, "bench/bench_gpu_mixers.py", "--device", "cpu", "--archs", "mamba2", "gated_deltanet",
                    "--size", "tiny", "--lengths", "40", "--batch", "2", "--precisions", "tf32", "bf16",
                    "--min-seconds", "0", "--mode", mode, "--out", str(out)],
                   cwd=ROOT, check=True, capture_output=True, timeout=300)
    data = json.loads(out.read_text())
    assert data["device"] == "cpu"
    rows = data["rows"]
    assert [(r["arch"], r["precision"]) for r in rows] == [("mamba2", "tf32"), ("mamba2", "bf16"),
                                                           ("gated_deltanet", "tf32"), ("gated_deltanet", "bf16")]
    for row in rows:
        assert row["ours_tokens_per_s"] > 0 and row["kernel_tokens_per_s"] > 0 and row["ours_steps"] >= 3, row
        assert row["mode"] == mode and row["kernel"] == "chunked" and "ours_peak_gib" not in row
    checked = [r for r in rows if r["precision"] == "tf32"]
    assert all(r["logits_max_abs_diff"] == 0 for r in checked)  # the same weights on the same path
    assert all(r.get("grad_max_rel_diff", 0) == 0 for r in checked) and ("grad_max_rel_diff" in checked[0]) == (mode == "train")
