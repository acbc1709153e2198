"""bench/bench_levers.py keeps working between GPU sessions: its CPU path times each
lever's variants through a trial's real step and writes a row per variant."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parents[2]


def test_the_levers_bench_runs_each_variant_on_cpu_and_writes_its_rows(tmp_path):
    rows = {}
    for lever in ("graphs", "attention"):
        out = tmp_path / f"{lever}.json"
        subprocess.run([sys.executable, "bench/bench_levers.py", "--lever", lever, "--device", "cpu", "--steps", "5",
                        "--archs", "transformer", "mamba", "--sizes", "tiny", "--n", "5", "--out", str(out)],
                       cwd=ROOT, check=True, capture_output=True, timeout=300)
        result = json.loads(out.read_text())
        assert result["device"] == "cpu"
        rows[lever] = result["rows"]
    graphs = rows["graphs"]
    assert [(r["arch"], r["step_used"]) for r in graphs] == [("transformer", "plain"), ("transformer", "static"),
                                                              ("mamba", "plain"), ("mamba", "static")]
    assert [r["arch"] for r in rows["attention"]] == ["transformer", "transformer"]  # Mamba has no attention
    for row in graphs + rows["attention"]:
        assert row["steps"] == 5 and row["samples_per_s"] > 0 and row["useful_tokens_per_s"] > 0
    assert graphs[0]["speedup"] == 1.0
    assert abs(graphs[1]["speedup"] - graphs[1]["samples_per_s"] / graphs[0]["samples_per_s"]) < 0.01
