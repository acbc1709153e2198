"""bench/bench_models.py's new-mixer comparisons run and write their rows (tiny
batch, no timing asserted)."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parents[2]


def test_model_bench_compares_the_new_mixer_presets_with_the_transformer(tmp_path):
    out = tmp_path / "models.json"
    subprocess.run([sys.executable, "bench/bench_models.py", "--lengths", "16", "--batch", "2", "--min-seconds", "0",
                    "--pairs", "3", "4", "--memory-lengths", "--out", str(out)],
                   cwd=ROOT, check=True, capture_output=True, timeout=300)
    rows = json.loads(out.read_text())["rows"]
    assert [(r["a"], r["b"]) for r in rows] == [("ours-mamba2-0.5M", "ours-transformer-0.5M"),
                                                 ("ours-gated_deltanet-0.5M", "ours-transformer-0.5M")]
    assert all(r["a_samples_per_s"] > 0 and r["b_samples_per_s"] > 0 and r["steps"][r["a"]] >= 2 for r in rows)
