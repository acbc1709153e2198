"""torch.compile on a trial's training step against eager, side by side in one run,
with the compile time counted against a whole trial of the laptop protocol.

    python bench/bench_compile.py [--archs transformer mamba hybrid] [--setups cot retrieval]
        [--n 5] [--batch-size 16] [--steps 40] [--out bench/results/compile_cpu.json]

For each configuration two Trials of one config (same seed, same init) train the
same stream of real batches, step by step in turn: one eager, one whose model is
`torch.compile(model, dynamic=True)` (dynamic shapes: a batch's length changes
from step to step, and a static compile would recompile for each new length).
Its first two steps, the compile, are timed apart. Each configuration runs in a
process of its own with one thread (a trial's), and a fresh inductor cache
(`cold`, the first trial of a shape); a second process then compiles the same
model from that cache (`warm`, any later trial of the shape). The projected trial
is the laptop spec's budget for the setup (sweeps/istree_laptop.yaml) at each
rate, the compiled one with the warm compile added.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

LAPTOP_SPEC = Path(__file__).resolve().parents[1] / "sweeps" / "istree_laptop.yaml"


def budgets() -> dict[str, int]:
    """Training samples per setup in the laptop spec."""
    spec = yaml.safe_load(LAPTOP_SPEC.read_text())
    out = {setup: spec["training"]["samples"] for setup in spec["axes"]["setups"]}
    for rule in spec.get("training_overrides", []):
        for setup in rule.get("setups", out):
            out[setup] = rule.get("samples", out[setup])
    return out


def measure(arch: str, setup: str, n: int, batch_size: int, steps: int, warm_only: bool) -> dict:
    from workloads.threads import bound_threads

    bound_threads(1)
    import torch

    from workloads.config import trial_config
    from workloads.tasks import IsTreeConfig
    from workloads.train import Trial

    def trial():
        return Trial(trial_config(arch, "tiny", IsTreeConfig(n=n, setup=setup), samples=10**7,
                                  batch_size=batch_size, device="cpu"))

    def step(t, batch):
        t.optimizer.zero_grad(set_to_none=True)
        t.backward(batch)
        t.optimizer.step()

    compiled = trial()
    compiled.model = torch.compile(compiled.model, dynamic=True)
    batches = [compiled.task.batch(0, 0, i * batch_size, batch_size) for i in range(steps + 4)]
    started = time.perf_counter()
    step(compiled, batches[0])
    step(compiled, batches[1])
    compile_s = time.perf_counter() - started
    if warm_only:
        return dict(compile_s=round(compile_s, 1))
    eager = trial()
    step(eager, batches[0])
    step(eager, batches[1])
    seconds = {"eager": 0.0, "compiled": 0.0}
    for batch in batches[4:]:
        for name, t in (("eager", eager), ("compiled", compiled)):
            started = time.perf_counter()
            step(t, batch)
            seconds[name] += time.perf_counter() - started
    rate = {name: round(steps * batch_size / s, 1) for name, s in seconds.items()}
    return dict(arch=arch, size="tiny", n=n, setup=setup, batch=batch_size, steps=steps, threads=1,
                eager_samples_per_s=rate["eager"], compiled_samples_per_s=rate["compiled"],
                step_speedup=round(rate["compiled"] / rate["eager"], 3), cold_compile_s=round(compile_s, 1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--archs", nargs="+", default=["transformer", "mamba", "hybrid"])
    parser.add_argument("--setups", nargs="+", default=["cot", "retrieval"])
    parser.add_argument("--n", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--out", type=Path, default=Path("bench/results/compile_cpu.json"))
    parser.add_argument("--one", nargs=2, metavar=("ARCH", "SETUP"), help=argparse.SUPPRESS)
    parser.add_argument("--warm-only", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:  # a child process: one configuration, its row on stdout
        print(json.dumps(measure(*args.one, args.n, args.batch_size, args.steps, args.warm_only)))
        return
    samples = budgets()
    rows = []
    for arch in args.archs:
        for setup in args.setups:
            with tempfile.TemporaryDirectory() as cache:
                env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=cache)
                child = [sys.executable, __file__, "--one", arch, setup, "--n", str(args.n),
                         "--batch-size", str(args.batch_size), "--steps", str(args.steps)]
                row = json.loads(subprocess.run(child, env=env, check=True, capture_output=True,
                                                text=True).stdout.splitlines()[-1])
                warm = json.loads(subprocess.run(child + ["--warm-only"], env=env, check=True, capture_output=True,
                                                 text=True).stdout.splitlines()[-1])
            eager_s = samples[setup] / row["eager_samples_per_s"]
            compiled_s = warm["compile_s"] + samples[setup] / row["compiled_samples_per_s"]
            row.update(warm_compile_s=warm["compile_s"], trial_samples=samples[setup],
                       trial_eager_s=round(eager_s, 1), trial_compiled_s=round(compiled_s, 1),
                       trial_speedup=round(eager_s / compiled_s, 3))
            rows.append(row)
            print(json.dumps(row), flush=True)
    import torch

    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"device": "cpu", "torch": torch.__version__,
                                    "command": "python bench/bench_compile.py " + " ".join(sys.argv[1:]),
                                    "rows": rows}, indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
