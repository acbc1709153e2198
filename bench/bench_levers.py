"""A lone trial's step with a lever on against off, side by side (issue 77's levers).

    python bench/bench_levers.py --lever graphs|attention [--archs transformer mamba hybrid]
        [--sizes 0.5M] [--n 16 64] [--setups retrieval] [--steps 40] [--device cuda]
        [--out bench/results/levers_<lever>_<device>.json]

`graphs`: training.cuda_graphs off (the plain step) against on (the static step,
captured as CUDA graphs on a GPU after its uncaptured first steps; uncaptured on a
CPU). `attention`: training.attention_precision fp32 against bf16 (archs without
attention are passed over). Each variant is a Trial's real step (`_Run.train_step`:
batch, step, schedule), on the same stream of batches; the variants take turns in
blocks of 5 steps, the device synchronised around each block, after warm-up steps
that include the capture. Figures per variant: samples/s, useful (unpadded)
tokens/s, the step it ran (plain, static, graph) and the speed ratio to the first
variant.
"""

import argparse
import time
from pathlib import Path

from bench_gpu import device_name, grid_arguments, measure_all  # bench/, the script's own folder
from step_common import lone_run, step_config, sync
from workloads import static_step

LEVERS = {
    "graphs": [("plain", {"cuda_graphs": "off"}), ("graph", {"cuda_graphs": "on"})],
    "attention": [("fp32 attention", {"attention_precision": "fp32"}), ("bf16 attention", {"attention_precision": "bf16"})],
}
BLOCK = 5


def measure(lever: str, arch: str, size: str, n: int, setup: str, steps: int, device: str) -> list[dict]:
    base = step_config(arch, setup, n, size, device)
    runs = [lone_run(base.model_copy(update={"train": base.train.model_copy(update=update)}))
            for _, update in LEVERS[lever]]
    torch_device = runs[0].trial.device
    for run in runs:  # warm-up: on a GPU past the static step's capture
        for _ in range(static_step.EAGER_STEPS + 2 if torch_device.type == "cuda" else 1):
            run.train_step()
    seconds, samples = [0.0] * len(runs), [0] * len(runs)
    useful = [0] * len(runs)
    for _ in range(max(1, steps // BLOCK)):
        for i, run in enumerate(runs):
            before, tokens = run.trial.samples, run.train_tokens
            sync(torch_device)
            started = time.perf_counter()
            for _ in range(BLOCK):
                run.train_step()
            sync(torch_device)
            seconds[i] += time.perf_counter() - started
            samples[i] += run.trial.samples - before
            useful[i] += run.train_tokens - tokens
    rows = []
    for (variant, update), run, s, k, u in zip(LEVERS[lever], runs, seconds, samples, useful):
        rows.append(dict(lever=lever, variant=variant, **update, arch=arch, size=size, n=n, setup=setup,
                         step_used=run.trial.resolved()["step_used"], steps=k // base.train.batch_size,
                         samples_per_s=round(k / s, 2), useful_tokens_per_s=round(u / s),
                         speedup=round((k / s) / (samples[0] / seconds[0]), 3)))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    grid_arguments(parser, sizes=["0.5M"], steps=40, device="cuda")
    parser.add_argument("--lever", choices=sorted(LEVERS), required=True)
    parser.set_defaults(setups=["retrieval"])
    args = parser.parse_args()
    name = device_name(args.device)

    def rows(arch, size, n, setup):
        if args.lever == "attention" and not step_config(arch, setup, n, size, "cpu").model.attn_layer_idx:
            return None  # no attention to cast
        return measure(args.lever, arch, size, n, setup, args.steps, args.device)

    measure_all(args, rows, args.out or Path("bench/results") / f"levers_{args.lever}_{name.replace(' ', '_')}.json", name)


if __name__ == "__main__":
    main()
