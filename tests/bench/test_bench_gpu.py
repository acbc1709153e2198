"""bench/bench_gpu.py keeps working between GPU sessions: its CPU path runs the
same steps and writes the same rows (without timing or memory figures)."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parents[2]


def test_gpu_bench_runs_its_steps_on_cpu_and_writes_its_rows(tmp_path):
    out = tmp_path / "gpu.json"
    subprocess.run([sys.executable, "bench/bench_gpu.py", "--device", "cpu", "--steps", "1", "--archs", "transformer",
                    "mamba", "--sizes", "tiny", "--n", "5", "--setups", "retrieval", "--precisions", "fp32", "--out",
                    str(out)], cwd=ROOT, check=True, capture_output=True, timeout=300)
    result = json.loads(out.read_text())
    assert result["device"] == "cpu" and len(result["rows"]) == 2
    for row in result["rows"]:
        assert row["tokens_per_step"] == 64 * (40 * 5 - 25 - 1)  # 64 trees, the longest samples
        assert row["estimate_gib"] > row["estimate_activations_gib"] > 0 and row["loss"] > 0
