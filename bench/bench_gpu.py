"""GPU training throughput and peak memory per family, size, graph size and precision,
beside the peak-memory estimate that `plan` and `gpus_per_trial: auto` use.

    python bench/bench_gpu.py [--archs transformer mamba hybrid] [--sizes 0.5M 1M 2M]
        [--n 16 64] [--setups cot retrieval] [--precisions fp32 tf32 bf16]
        [--steps 20] [--out bench/results/gpu_<device>.json]

Each configuration runs real training steps of `icr-sweep train` (the Trial's
model, optimiser and autocast; batches of 64 at the longest sample of the task,
the batch that sets the peak) in one process, one after another: fp32 is plain
fp32 (TF32 off), tf32 is the default of fp32 trials on CUDA, bf16 is autocast.
Figures: tokens/s over the timed steps (after two warm-up steps, synchronised),
torch.cuda.max_memory_allocated and max_memory_reserved, and the estimate.
`--device cpu --steps 1` runs the same code on CPU without timing or memory
figures (the test suite does, so that the script keeps working).
"""

import argparse
import itertools
import json
import time
from pathlib import Path

import torch

from workloads.config import trial_config
from workloads.evaluate import supervised_loss
from workloads.memory import GiB, trial_estimate
from workloads.tasks import IsTreeConfig
from workloads.train import Trial


def longest_batch(trial: Trial, batch_size: int):
    """A batch of `batch_size` trees (all of the longest length), from the training stream."""
    task, rows, start = trial.task, [], 0
    while len(rows) < batch_size:
        batch = task.batch(0, 0, start, 256)
        rows += [i + start for i in range(256) if int(batch.lengths[i]) == trial.config.task.longest_sample]
        start += 256
    picked = [task.batch(0, 0, i, 1) for i in rows[:batch_size]]
    return type(picked[0])(*(torch.cat([getattr(b, f) for b in picked]) for f in ("tokens", "supervised", "lengths", "labels")))


def measure(arch: str, size: str, n: int, setup: str, precision: str, steps: int, device: str) -> dict:
    config = trial_config(arch, size, IsTreeConfig(n=n, setup=setup), samples=10**6, batch_size=64, device=device,
                          precision="bf16" if precision == "bf16" else "fp32")
    cuda = device == "cuda"
    if cuda:
        torch.cuda.empty_cache()
    trial = Trial(config)
    if cuda:
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = precision == "tf32"
        torch.cuda.reset_peak_memory_stats()
    batch = longest_batch(trial, config.train.batch_size).to(trial.device)
    timed, started = 0, None
    for step in range(steps + 2):
        if step == 2:
            if cuda:
                torch.cuda.synchronize()
            started = time.perf_counter()
        with trial.autocast():
            logits = trial.model(batch.tokens[:, :-1])
        loss = supervised_loss(logits, batch)
        trial.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        trial.optimizer.step()
        timed += step >= 2
    if cuda:
        torch.cuda.synchronize()
    seconds = time.perf_counter() - started
    estimate = trial_estimate(config)
    row = dict(arch=arch, size=size, n=n, setup=setup, precision=precision, batch=config.train.batch_size,
               tokens_per_step=int(batch.tokens[:, :-1].numel()), loss=float(loss),
               estimate_gib=round(estimate.total / GiB, 2), estimate_activations_gib=round(estimate.activations / GiB, 2))
    if cuda and timed:
        row.update(tokens_per_s=round(timed * row["tokens_per_step"] / seconds),
                   peak_allocated_gib=round(torch.cuda.max_memory_allocated() / GiB, 2),
                   peak_reserved_gib=round(torch.cuda.max_memory_reserved() / GiB, 2))
        row["estimate_over_reserved"] = round(row["estimate_gib"] / row["peak_reserved_gib"], 2)
    del trial, batch, logits, loss
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    grid_arguments(parser, sizes=["0.5M", "1M", "2M"], steps=20, device="cuda")
    parser.add_argument("--precisions", nargs="+", default=["fp32", "tf32", "bf16"], choices=["fp32", "tf32", "bf16"])
    args = parser.parse_args()
    name = device_name(args.device)
    rows = []
    for arch, size, n, setup in configurations(args):
        for precision in args.precisions:
            row = measure(arch, size, n, setup, precision, args.steps, args.device)
            rows.append(row)
            print(json.dumps(row), flush=True)
    write_rows(args.out or Path("bench/results") / f"gpu_{name.replace(' ', '_')}.json", name, rows)


def grid_arguments(parser, sizes: list[str], steps: int, device: str) -> None:
    """The options every training bench shares: the grid of configurations, steps, device and output."""
    parser.add_argument("--archs", nargs="+", default=["transformer", "mamba", "hybrid"])
    parser.add_argument("--sizes", nargs="+", default=sizes)
    parser.add_argument("--n", nargs="+", type=int, default=[16, 64])
    parser.add_argument("--setups", nargs="+", default=["cot", "retrieval"])
    parser.add_argument("--steps", type=int, default=steps)
    parser.add_argument("--device", default=device, choices=["cuda", "cpu"])
    parser.add_argument("--out", type=Path)


def configurations(args) -> list[tuple[str, str, int, str]]:
    """(arch, size, n, setup) for every combination of a bench's --archs, --sizes, --n and --setups."""
    return list(itertools.product(args.archs, args.sizes, args.n, args.setups))


def device_name(device: str) -> str:
    """The GPU's name (what result files are named after), or "cpu"; on a machine
    without CUDA, `cuda` stops the bench with a pointer to `--device cpu`."""
    if device == "cpu":
        return "cpu"
    if not torch.cuda.is_available():
        raise SystemExit("no CUDA GPU here; --device cpu runs this bench's code path without figures")
    return torch.cuda.get_device_name(0)


def measure_all(args, measure, out: Path, name: str) -> None:
    """Runs `measure(arch, size, n, setup)` (a list of rows, or None to pass one over)
    for every configuration of `args`, printing each row as it comes, then writes them
    with the device and the threads torch ran on."""
    rows = []
    for arch, size, n, setup in configurations(args):
        for row in measure(arch, size, n, setup) or []:
            rows.append(row)
            print(json.dumps(row), flush=True)
    write_rows(out, name, [dict(row, threads=torch.get_num_threads()) for row in rows])


def write_rows(out: Path, device: str, rows: list[dict]) -> None:
    """The bench's figures with the device and torch they were measured on."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"device": device, "torch": torch.__version__, "rows": rows}, indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
