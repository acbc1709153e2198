"""A trial's training step as `run_trial` takes it, one way against another, side by side.

    python bench/bench_step.py [--archs transformer mamba hybrid] [--sizes 0.5M] [--n 16 64]
        [--setups cot retrieval] [--groups 1 4] [--steps 6] [--device cpu|cuda]
        [--out bench/results/step_<device>.json]

For each configuration, one Trial per value of --groups (`length_groups`: 1 is one
batch padded to its longest row, as before; more is length-grouped micro-batches)
trains the same stream of real batches (the training stream from sample 0, so
trees and non-trees mix as they do in a trial), the variants interleaved step by
step so that a noisy machine slows each alike. Figures per variant: samples/s and
useful (unpadded) tokens/s over the timed steps after one warm-up step, the tokens
computed padding included, and the speed ratio to the first variant.
"""

import argparse
import time
from pathlib import Path

import torch

from bench_gpu import device_name, grid_arguments, measure_all  # bench/, the script's own folder
from workloads.batching import group_rows, padded_tokens
from workloads.config import trial_config
from workloads.tasks import IsTreeConfig
from workloads.train import Trial


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def measure(arch: str, size: str, n: int, setup: str, groups: list[int], steps: int, device: str,
            batch_size: int = 64) -> list[dict]:
    trials = [Trial(trial_config(arch, size, IsTreeConfig(n=n, setup=setup), samples=10**7, batch_size=batch_size,
                                 device=device, length_groups=g)) for g in groups]
    seconds = [0.0] * len(trials)
    useful = computed = samples = 0
    for step in range(steps + 1):
        batch = trials[0].task.batch(0, 0, step * batch_size, batch_size)
        lengths = batch.lengths.numpy()
        if step:
            useful += int(lengths.sum())
            samples += batch_size
        for i, trial in enumerate(trials):
            _sync(trial.device)
            started = time.perf_counter()
            trial.optimizer.zero_grad(set_to_none=True)
            trial.backward(batch)
            trial.optimizer.step()
            _sync(trial.device)
            if step:
                seconds[i] += time.perf_counter() - started
        if step:
            computed += padded_tokens(lengths, group_rows(lengths, max(groups), trials[-1].group_overhead))
    rows = []
    for g, s in zip(groups, seconds):
        rows.append(dict(arch=arch, size=size, n=n, setup=setup, batch=batch_size, length_groups=g, steps=steps,
                         samples_per_s=round(samples / s, 2), useful_tokens_per_s=round(useful / s),
                         speedup=round(seconds[0] / s, 3)))
    rows[-1]["computed_tokens"] = computed
    rows[-1]["useful_tokens"] = useful
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    grid_arguments(parser, sizes=["0.5M"], steps=6, device="cpu")
    parser.add_argument("--groups", nargs="+", type=int, default=[1, 4])
    parser.add_argument("--batch-size", type=int, default=64)
    args = parser.parse_args()
    name = device_name(args.device)
    measure_all(args, lambda arch, size, n, setup: measure(arch, size, n, setup, args.groups, args.steps, args.device,
                                                           args.batch_size),
                args.out or Path("bench/results") / f"step_{name.replace(' ', '_')}.json", name)


if __name__ == "__main__":
    main()
