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
    """With `--against`, another arrays.py (here today's own) is a third side of each row."""
    out = tmp_path / "arrays.json"
    _run("bench/bench_arrays.py", "--archs", "transformer", "hybrid", "--n", "4", "--k", "1", "2", "--size", "tiny",
         "--min-seconds", "0", "--against", "workloads/arrays.py", "--out", str(out))
    result = json.loads(out.read_text())
    assert result["device"].startswith("cpu") and "--k 1 2" in result["command"]
    assert [(r["arch"], r["k"]) for r in result["rows"]] == [("transformer", 1), ("transformer", 2), ("hybrid", 1), ("hybrid", 2)]
    assert all(r["separate_samples_per_s"] > 0 and r["array_samples_per_s"] > 0 and r["against_samples_per_s"] > 0
               for r in result["rows"])


def test_the_step_profile_names_its_top_operators(tmp_path):
    """A lone trial's step, then an array's of each `--array-k`."""
    out = tmp_path / "profile.json"
    _run("bench/profile_step.py", "--archs", "mamba", "--n", "4", "--size", "tiny", "--steps", "1", "--array-k", "2",
         "--out", str(out))
    lone, array = json.loads(out.read_text())["rows"]
    assert (lone["k"], array["k"]) == ("lone", 2) and 0 <= lone["data_share"] <= 1
    for row in (lone, array):
        assert row["arch"] == "mamba" and row["samples_per_s"] > 0
        assert row["top"] and all(t["ms_per_step"] >= 0 for t in row["top"])


def test_the_gpu_paths_slice_is_three_arrays_of_four_of_the_papers_grid(tmp_path):
    """bench/gpu_path.py's slice (the device check launches it, stops, resumes and
    reports it): the grid's trials at retrieval n=16, 0.5M, as one array of four seeds
    per architecture, each at its paper's rate."""
    import argparse
    import importlib.util

    import yaml

    from orchestrator.arrays import arrays
    from orchestrator.grid import planned_trials
    from orchestrator.spec import load_spec

    spec_of = importlib.util.spec_from_file_location("gpu_path", ROOT / "bench" / "gpu_path.py")
    gpu_path = importlib.util.module_from_spec(spec_of)
    spec_of.loader.exec_module(gpu_path)
    args = argparse.Namespace(name="gpu_path", archs=["transformer", "mamba", "hybrid"], setup="retrieval", size="0.5M",
                              n=16, seeds=4, fuse=4, samples=32768, eval_every=8192, val_samples=1000,
                              warmup_samples=2048, device="auto")
    (tmp_path / "slice.yaml").write_text(yaml.safe_dump(gpu_path.slice_spec(args)))
    spec = load_spec(tmp_path / "slice.yaml")
    trials = planned_trials(spec)
    assert len(trials) == 12 and {t["task"]["n"] for t in trials.values()} == {16}
    groups = arrays(list(trials.values()), spec.resources.fuse)
    assert sorted(len(g["members"]) for g in groups) == [4, 4, 4], groups
    assert {t["train"]["lr"] for t in trials.values() if t["model"]["arch"] == "transformer"} == {1e-3}
