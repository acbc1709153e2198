"""Samples/s of IsTree batch generation on one core, per setup, family and n.

    python bench/bench_data.py [--seconds 1.0] [--out bench/results/data.json]

Each figure is batches of 64 built into padded torch tensors, as a trial gets
them. Peak RSS is read before and after streaming every configuration, to show
that memory does not grow with the number of samples drawn.
"""

import argparse
import json
import platform
import resource
import time
from pathlib import Path

import torch

from workloads.tasks import IsTreeConfig, IsTreeTask


def rate(task: IsTreeTask, seconds: float, batch: int = 64) -> tuple[float, float]:
    task.batch(0, 0, 0, batch)  # compile / warm up
    start, drawn, tokens = time.perf_counter(), 0, 0
    while time.perf_counter() - start < seconds:
        b = task.batch(0, 0, drawn, batch)
        drawn += batch
        tokens += int(b.lengths.sum())
    elapsed = time.perf_counter() - start
    return drawn / elapsed, tokens / drawn


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=1.0)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "data.json")
    args = parser.parse_args()
    torch.set_num_threads(1)
    rows = []
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    drawn_total = 0
    for setup in ("vanilla", "cot", "retrieval"):
        for family in ("binary", "random"):
            for n in (16, 32, 64):
                task = IsTreeTask(IsTreeConfig(n=n, setup=setup, family=family))
                samples_per_s, mean_tokens = rate(task, args.seconds)
                drawn_total += int(samples_per_s * args.seconds)
                rows.append(dict(setup=setup, family=family, n=n, samples_per_s=round(samples_per_s), mean_tokens=round(mean_tokens, 1)))
                print(f"{setup:9s} {family:6s} n={n:<3d} {samples_per_s:>12,.0f} samples/s  {mean_tokens:7.1f} tokens/sample")
    rss_after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(f"peak RSS {rss_before / 1024:.0f} MiB before, {rss_after / 1024:.0f} MiB after ~{drawn_total:,} samples")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(dict(
        machine=platform.processor() or platform.machine(), threads=1, rows=rows,
        peak_rss_mib_before=rss_before / 1024, peak_rss_mib_after=rss_after / 1024, samples_drawn=drawn_total,
    ), indent=1))


if __name__ == "__main__":
    main()
