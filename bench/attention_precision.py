"""What attention in bf16 (training.attention_precision) does to learning: short
trials' validation curves and final exact match, fp32 attention against bf16, side
by side, on the same seeds.

The design, fixed before any run: the tiny Transformer and the tiny hybrid (its one
attention layer), IsTree retrieval at n = 4 (the laptop calibration's smallest cell
these models solve: sweeps/calibration/), 20,000 samples at batch 16 and rate 3e-3,
1,000 validation samples, an evaluation every 5,000, seeds 0 and 1; two trials at a
time, one thread each (bf16 attention runs on a CPU through PyTorch's own kernel).

    python bench/attention_precision.py [--out bench/results/attention_precision_cpu.json]
"""

import argparse
import json
import multiprocessing as mp
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

ARCHS = ("transformer", "hybrid")
PRECISIONS = ("fp32", "bf16")
SEEDS = (0, 1)
DESIGN = dict(setup="retrieval", n=4, samples=20_000, batch_size=16, lr=3e-3, val_samples=1000, eval_every=5000)


def _cpu_name() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines() if Path("/proc/cpuinfo").exists() else []:
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "cpu"


def trial(job: tuple[str, str, int]) -> dict:
    """One trial's curve: validation loss and exact match at each evaluation."""
    from workloads.threads import bound_threads

    bound_threads(1)
    from workloads.config import trial_config
    from workloads.tasks import IsTreeConfig
    from workloads.train import Hooks, run_trial

    arch, precision, seed = job
    d = DESIGN
    config = trial_config(arch, "tiny", IsTreeConfig(n=d["n"], setup=d["setup"]), lr=d["lr"], seed=seed,
                          samples=d["samples"], batch_size=d["batch_size"], warmup_samples=d["samples"] // 10,
                          eval_every=d["eval_every"], val_samples=d["val_samples"], device="cpu",
                          attention_precision=precision)
    curve = []
    started = time.perf_counter()
    run_trial(config, Hooks(report=lambda m, _: curve.append(
        {"samples": m["samples"], "val_loss": m["val_loss"], "val_exact_match": m["val_exact_match"]})
        if m.get("evaluated") else None))
    return {"arch": arch, "attention_precision": precision, "seed": seed, "curve": curve,
            "seconds": round(time.perf_counter() - started, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="bench/results/attention_precision_cpu.json")
    ap.add_argument("--processes", type=int, default=2)
    args = ap.parse_args()
    jobs = [(arch, precision, seed) for arch in ARCHS for seed in SEEDS for precision in PRECISIONS]
    with mp.get_context("spawn").Pool(args.processes) as pool:
        trials = pool.map(trial, jobs)
    pairs = []
    for arch in ARCHS:
        for seed in SEEDS:
            by = {t["attention_precision"]: t for t in trials if t["arch"] == arch and t["seed"] == seed}
            fp32, bf16 = by["fp32"]["curve"], by["bf16"]["curve"]
            pairs.append({"arch": arch, "seed": seed,
                          "final_exact_match": {"fp32": fp32[-1]["val_exact_match"], "bf16": bf16[-1]["val_exact_match"]},
                          "val_loss_ratio_bf16_over_fp32": [round(b["val_loss"] / a["val_loss"], 4) for a, b in zip(fp32, bf16)],
                          "seconds": {"fp32": by["fp32"]["seconds"], "bf16": by["bf16"]["seconds"]}})
    record = {"device": _cpu_name(), "design": DESIGN, "threads_per_trial": 1, "processes": args.processes,
              "pairs": pairs, "trials": trials}
    Path(args.out).write_text(json.dumps(record, indent=1) + "\n")
    for p in pairs:
        print(p["arch"], "seed", p["seed"], "exact match fp32 / bf16:", p["final_exact_match"]["fp32"], "/",
              p["final_exact_match"]["bf16"], " val-loss ratios:", p["val_loss_ratio_bf16_over_fp32"])


if __name__ == "__main__":
    main()
