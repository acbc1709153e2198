"""A trial's final evaluation, with and without teacher forcing deciding generation.

    python bench/bench_eval.py [--arch hybrid] [--size tiny] [--setup retrieval] [--n 6]
        [--samples 60000] [--lr 3e-3] [--val-samples 2000] [--repeats 2] [--device cpu|cuda]
        [--workdir DIR] [--out bench/results/eval_<device>.json]

First trains the trial (`run_trial`, kept in --workdir so a second run reuses it),
then times the evaluation a trial runs at its end, alternating the two ways:
`quick`, as trials now run it (rows whose generation teacher forcing decides are
scored from their own tokens, the rest decoded), and `full`, every row decoded.
Both must give the same generation accuracy; the figures are the seconds of each,
their ratio, the part of evaluation spent in teacher forcing, and how many rows
were decoded.
"""

import argparse
import json
import tempfile
import time
from pathlib import Path

from bench_gpu import device_name, write_rows  # bench/, the script's own folder

import torch

from workloads.config import trial_config
from workloads.evaluate import generation_accuracy, settled_rows, teacher_forced
from workloads.tasks import IsTreeConfig
from workloads.checkpoint import CHECKPOINT_FILE
from workloads.train import Checkpoints, Hooks, Trial, run_trial


def _timed(fn, device):
    if device.type == "cuda":
        torch.cuda.synchronize()
    started = time.perf_counter()
    value = fn()
    if device.type == "cuda":
        torch.cuda.synchronize()
    return value, time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--arch", default="hybrid")
    parser.add_argument("--size", default="tiny")
    parser.add_argument("--setup", default="retrieval")
    parser.add_argument("--n", type=int, default=6)
    parser.add_argument("--samples", type=int, default=60_000)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--val-samples", type=int, default=2_000)
    parser.add_argument("--eval-batch-size", type=int, default=250)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--device", default="cpu", choices=["cuda", "cpu"])
    parser.add_argument("--workdir", type=Path)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    name = device_name(args.device)
    config = trial_config(args.arch, args.size, IsTreeConfig(n=args.n, setup=args.setup), lr=args.lr,
                          samples=args.samples, warmup_samples=min(2_000, args.samples // 10),
                          eval_every=args.samples, val_samples=args.val_samples,
                          eval_batch_size=args.eval_batch_size, device=args.device)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="icr-bench-eval-"))
    checkpoint = workdir / config.name
    trial = Trial(config)
    if not (checkpoint / CHECKPOINT_FILE).exists():
        print(f"training {config.name} ({args.samples:,} samples) into {checkpoint}", flush=True)
        run_trial(config, Hooks(), Checkpoints(dir=checkpoint))
    trial.restore(checkpoint)
    trial.model.eval()
    batches = trial.validation_batches()
    model, task, autocast = trial.model, trial.task, trial.autocast
    quick_s, full_s, teacher_s = [], [], []
    with torch.no_grad():
        for _ in range(args.repeats):
            predictions = []
            metrics, seconds = _timed(lambda: teacher_forced(model, batches, autocast, predictions), trial.device)
            quick, gen_seconds = _timed(lambda: generation_accuracy(model, task, batches, autocast, predictions),
                                        trial.device)
            teacher_s.append(seconds)
            quick_s.append(seconds + gen_seconds)
            full, seconds = _timed(lambda: (teacher_forced(model, batches, autocast),
                                            generation_accuracy(model, task, batches, autocast))[1], trial.device)
            full_s.append(seconds)
            if quick != full:
                raise SystemExit(f"generation accuracy differs: {quick} with teacher forcing deciding, {full} without")
    settled = sum(int(settled_rows(task, b, p).sum()) for b, p in zip(batches, predictions))
    row = dict(trial=config.name, val_samples=args.val_samples, eval_batch_size=args.eval_batch_size,
               val_exact_match=metrics["val_exact_match"], gen_accuracy=quick, rows_decoded=args.val_samples - settled,
               quick_s=round(min(quick_s), 3), full_s=round(min(full_s), 3), teacher_forced_s=round(min(teacher_s), 3),
               speedup=round(min(full_s) / min(quick_s), 2), threads=torch.get_num_threads())
    print(json.dumps(row), flush=True)
    write_rows(args.out or Path("bench/results") / f"eval_{name.replace(' ', '_')}.json", name, [row])


if __name__ == "__main__":
    main()
