"""One training step per architecture, profiled: where its time goes before anything is
built on a guess (issue 50, item 4).

    python bench/profile_step.py [--archs transformer mamba hybrid] [--setup retrieval] [--n 16 64]
        [--size 0.5M] [--steps 3] [--array-k 8 ...] [--device auto] [--out bench/results/profile_<device>.json]

For each architecture and n, after two warm-up steps, `--steps` steps of a lone
trial's loop (workloads.train: length groups, AdamW, LambdaLR) under torch.profiler,
and of an array of each `--array-k` members (workloads.arrays.TrialArray.step):
- wall seconds per step, and on CUDA the GPU's busy share (the union of its
  kernels' spans over the wall time) and so its idle share;
- the top kernels (CUDA) or operators (CPU) by self time;
- host-device syncs per step (cudaStreamSynchronize, cudaDeviceSynchronize,
  cudaMemcpy to the host: each stalls the launch queue) and kernels per step;
- the data path (lone trials): a step that builds its batch against the same step on a batch
  already built (`data_share`: what building the batch costs; its copy to the
  device, made by the trainer per length group, is in both).
"""

import json
import platform
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

from step_common import array_configs, device_of, lone_run, step_arguments, step_config, sync
from workloads.arrays import TrialArray
from workloads.tasks.base import TRAIN_STREAM

# Calls that block the host until the GPU catches up. cudaMemcpyAsync is left out: the
# batch's copies to the device are asynchronous (pinned memory), and counting them (as
# this bench did on 2026-11-28) reads each length group's copies as syncs; a copy to the
# host (`.item()`, `.cpu()`) shows as the cudaStreamSynchronize that follows it.
SYNCS = {"cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaMemcpy"}


def _busy_share(events, wall_us: float) -> float:
    """The union of the kernels' spans over the wall time (overlapping kernels counted once)."""
    spans = sorted((e.time_range.start, e.time_range.end) for e in events if e.device_type.name == "CUDA")
    busy, end = 0.0, float("-inf")
    for start, stop in spans:
        if stop > end:
            busy += stop - max(start, end)
            end = stop
    return busy / wall_us if wall_us else 0.0


def _profile(config, steps: int, k: int = 0) -> dict:
    """A lone trial's step profiled (k = 0), or an array's of k members (rates and seeds differ)."""
    if k:
        array = TrialArray(array_configs(config, k))
        array.model.train()
        step, device, samples = array.step, array.trials[0].device, config.train.batch_size * k
    else:
        run = lone_run(config)
        step, device, samples = run.train_step, run.trial.device, config.train.batch_size
    for _ in range(2):
        step()
    sync(device)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    started = time.perf_counter()
    with profile(activities=activities) as prof:
        for _ in range(steps):
            step()
        sync(device)
    wall = (time.perf_counter() - started) / steps
    cuda = device.type == "cuda"
    table = prof.key_averages()
    top = sorted(table, key=lambda e: e.self_device_time_total if cuda else e.self_cpu_time_total, reverse=True)[:10]
    row = dict(seconds_per_step=round(wall, 4), samples_per_s=round(samples / wall, 1),
               top=[dict(name=e.key[:80], ms_per_step=round((e.self_device_time_total if cuda else e.self_cpu_time_total)
                                                            / 1e3 / steps, 3), calls_per_step=e.count // steps) for e in top])
    if cuda:
        row["gpu_idle_share"] = round(1 - _busy_share(prof.events(), wall * steps * 1e6), 3)
        row["syncs_per_step"] = sum(e.count for e in table if e.key in SYNCS) / steps
        row["kernels_per_step"] = sum(1 for e in prof.events() if e.device_type.name == "CUDA") / steps
    if not k:
        row["data_share"] = _data_share(run, run.trial, steps)
    return row


def _data_share(run, trial, steps: int) -> float:
    """1 - (a step on a batch already built) / (a step that builds its batch): what
    building the batch costs. The copy to the device stays in both: the trainer moves
    each length group as it reaches it (Trial.backward takes the batch on the CPU)."""
    tc, device = trial.config.train, trial.device
    built = trial.task.batch(tc.seed, TRAIN_STREAM, trial.samples, tc.batch_size)

    def timed(step):
        sync(device)
        started = time.perf_counter()
        for _ in range(steps):
            step()
        sync(device)
        return time.perf_counter() - started

    def ready():
        trial.optimizer.zero_grad(set_to_none=True)
        trial.backward(built)
        trial.optimizer.step()
        trial.scheduler.step()

    full = timed(run.train_step)
    return round(max(0.0, 1 - timed(ready) / full), 3)


def main():
    ap = step_arguments("One training step per architecture, profiled.")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--array-k", nargs="*", type=int, default=[],
                    help="also profile an array of each of these member counts (rates and seeds differ)")
    args = ap.parse_args()
    device, name = device_of(args.device)
    out = Path(args.out or f"bench/results/profile_{name.replace(' ', '_')}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    rows = []
    for arch in args.archs:
        for n in args.n:
            config = step_config(arch, args.setup, n, args.size, device.type)
            for k in [0, *args.array_k]:
                rows.append(dict(arch=arch, setup=args.setup, n=n, size=args.size, k=k or "lone",
                                 **_profile(config, args.steps, k)))
                print(json.dumps({key: v for key, v in rows[-1].items() if key != "top"}), flush=True)
                # written after every row: a run cut short keeps what it measured
                out.write_text(json.dumps({"device": name, "host": platform.node(), "date": time.strftime("%Y-%m-%d"),
                                           "torch": torch.__version__, "rows": rows}, indent=1) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
