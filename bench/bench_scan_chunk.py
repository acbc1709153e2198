"""A chunked mixer's CPU step time at each chunk size, to choose its default.

    python bench/bench_scan_chunk.py [--mixer kda] [--chunks 2 3 4 5 6 8 16 32]
        [--out bench/results/kda_chunk_cpu.json]

One mixer layer (width 64, 4 heads of 32 key channels: the 0.5M presets' shape),
forward and backward over a batch of 64 sequences of 200 tokens, two threads; the
median of `--repeats` steps after a warm-up, each chunk size in turn, then Gated
DeltaNet at its default chunk in the same run as the yardstick (ratios, not times,
carry across machines). The chunk changes no result (the chunked form equals the
recurrence: the mixer's tests), only the time and the memory.
"""

import argparse
import json
import statistics
import time
from pathlib import Path

import torch


def step_seconds(mixer, h, repeats: int) -> float:
    mixer(h).sum().backward()  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        mixer(h).sum().backward()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mixer", default="kda")
    parser.add_argument("--chunks", type=int, nargs="+", default=[2, 3, 4, 5, 6, 8, 16, 32])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "kda_chunk_cpu.json")
    args = parser.parse_args()
    from workloads.models.base import REGISTRY
    from workloads.models.gated_deltanet import GatedDeltaNetConfig

    torch.set_num_threads(2)
    torch.manual_seed(0)
    h = torch.randn(64, 200, 64)
    config = REGISTRY[args.mixer].config(heads=4, head_dim=32)
    rows = []
    for chunk in args.chunks:
        mixer = config.model_copy(update={"chunk": chunk, "scan": "chunked"}).build(64, n_layers=1, norm_eps=1e-5)
        rows.append({"chunk": chunk, "seconds": step_seconds(mixer, h, args.repeats)})
        print(f"{args.mixer} chunk {chunk:3d}: {rows[-1]['seconds']:.3f} s a step")
    yardstick = GatedDeltaNetConfig(heads=4, head_dim=32, expand_v=1, scan="chunked")
    gdn = step_seconds(yardstick.build(64, n_layers=1, norm_eps=1e-5), h, args.repeats)
    print(f"gated_deltanet chunk {yardstick.chunk}: {gdn:.3f} s a step")
    for row in rows:
        row["over_gated_deltanet"] = row["seconds"] / gdn
    best = min(rows, key=lambda r: r["seconds"])
    args.out.write_text(json.dumps({"mixer": args.mixer, "threads": 2, "batch": 64, "length": 200, "d_model": 64,
                                    "heads": 4, "head_dim": 32, "rows": rows, "fastest_chunk": best["chunk"],
                                    "gated_deltanet_seconds": gdn, "gated_deltanet_chunk": yardstick.chunk,
                                    "device": "CPU (2 threads)"}, indent=1))


if __name__ == "__main__":
    main()
