"""Mamba's CPU selective scan as it is now against the same file at another git
revision, side by side in one run: the kernel alone, and a trial's training step.

    python bench/bench_scan.py --against REV [--archs mamba hybrid] [--setups cot retrieval]
        [--n 5] [--batch-size 16] [--steps 40] [--out bench/results/scan_cpu.json]

`workloads/models/mamba/selective_scan.py` at REV is loaded as a module of its own
beside today's. Kernel: the forward and the backward at the shape of a tiny Mamba
layer on retrieval n=5 (batch 16, 175 tokens, 64 channels, 16 states), the two
versions alternated, medians of 20 calls. Step: two Trials of one config (same
seed, same init) train the same stream of real batches step by step in turn, each
with its own version of the scan; the laptop protocol's cells by default (tiny,
batch 16). One thread, a trial's, throughout.
"""

import argparse
import importlib.util
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
SCAN_FILE = "workloads/models/mamba/selective_scan.py"


def scan_at(rev: str):
    """The scan module as it was at git revision `rev`."""
    text = subprocess.run(["git", "show", f"{rev}:{SCAN_FILE}"], cwd=ROOT, check=True, capture_output=True,
                          text=True).stdout
    folder = Path(tempfile.mkdtemp(prefix="icr-scan-"))
    path = folder / "selective_scan_then.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location("selective_scan_then", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _median_ms(call, repeats: int = 20) -> float:
    call()
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        call()
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1e3


def kernel_rows(versions: dict, shape=(16, 175, 64, 16)) -> list[dict]:
    import torch

    batch, length, d_inner, n_state = shape
    g = torch.Generator().manual_seed(0)
    u = torch.randn(batch, length, d_inner, generator=g, requires_grad=True)
    dt = (torch.rand(batch, length, d_inner, generator=g) * 0.1 + 1e-3).requires_grad_()
    A = (-torch.arange(1, n_state + 1, dtype=torch.float32).repeat(d_inner, 1)).requires_grad_()
    Bm = torch.randn(batch, length, n_state, generator=g, requires_grad=True)
    C = torch.randn(batch, length, n_state, generator=g, requires_grad=True)
    dy = torch.randn(batch, length, d_inner, generator=g)
    times = {name: {"forward": [], "backward": []} for name in versions}
    for _ in range(3):  # rounds, the versions alternated within each
        for name, module in versions.items():
            times[name]["forward"].append(_median_ms(lambda: module.scan_cpu(u, dt, A, Bm, C)))
            times[name]["backward"].append(_median_ms(
                lambda: torch.autograd.grad(module.scan_cpu(u, dt, A, Bm, C)[0], (u, dt, A, Bm, C), dy)))
    rows = []
    for name in versions:
        fwd, bwd = min(times[name]["forward"]), min(times[name]["backward"])  # backward: forward + backward
        rows.append(dict(part="kernel", version=name, shape=list(shape), forward_ms=round(fwd, 2),
                         forward_and_backward_ms=round(bwd, 2)))
    for row in rows:
        row["speedup"] = round(rows[0]["forward_and_backward_ms"] / row["forward_and_backward_ms"], 3)
        row["forward_speedup"] = round(rows[0]["forward_ms"] / row["forward_ms"], 3)
    return rows


def step_rows(versions: dict, arch: str, setup: str, n: int, batch_size: int, steps: int) -> list[dict]:
    from workloads.config import trial_config
    from workloads.models.mamba import layer
    from workloads.tasks import IsTreeConfig
    from workloads.train import Trial

    config = trial_config(arch, "tiny", IsTreeConfig(n=n, setup=setup), samples=10**7, batch_size=batch_size,
                          device="cpu")
    trials = {name: Trial(config) for name in versions}
    seconds = dict.fromkeys(versions, 0.0)
    first = next(iter(trials.values()))
    for step in range(steps + 1):  # step 0 warms up
        batch = first.task.batch(0, 0, step * batch_size, batch_size)
        for name, trial in trials.items():
            layer.scan_cpu = versions[name].scan_cpu
            started = time.perf_counter()
            trial.optimizer.zero_grad(set_to_none=True)
            loss = trial.backward(batch)
            trial.optimizer.step()
            if step:
                seconds[name] += time.perf_counter() - started
    base = seconds[next(iter(versions))]
    return [dict(part="step", version=name, arch=arch, setup=setup, n=n, batch=batch_size, steps=steps,
                 samples_per_s=round(steps * batch_size / s, 1), speedup=round(base / s, 3),
                 last_loss=round(float(loss), 4))
            for name, s in seconds.items()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--against", required=True, help="the git revision to compare today's scan with")
    parser.add_argument("--archs", nargs="+", default=["mamba", "hybrid"])
    parser.add_argument("--setups", nargs="+", default=["cot", "retrieval"])
    parser.add_argument("--n", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "scan_cpu.json")
    args = parser.parse_args()

    from workloads.threads import bound_threads

    bound_threads(1)
    import torch

    from workloads.models.mamba import selective_scan

    rev = subprocess.run(["git", "rev-parse", "--short", args.against], cwd=ROOT, check=True, capture_output=True,
                         text=True).stdout.strip()
    versions = {f"at {rev}": scan_at(args.against), "now": selective_scan}
    rows = kernel_rows(versions)
    for arch in args.archs:
        for setup in args.setups:
            rows += step_rows(versions, arch, setup, args.n, args.batch_size, args.steps)
    for row in rows:
        print(json.dumps(row), flush=True)
    command = "python bench/bench_scan.py " + " ".join(sys.argv[1:])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"device": "cpu", "threads": torch.get_num_threads(), "torch": torch.__version__,
                                    "command": command, "rows": rows}, indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
