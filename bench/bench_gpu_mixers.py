"""Our pure-PyTorch recurrent mixers against their CUDA kernels, on one GPU.

    python bench/bench_gpu_mixers.py [--archs mamba2 gated_deltanet rwkv7 ...] [--size 0.5M]
        [--lengths 200 1000 4000] [--batch 64] [--precisions tf32 bf16] [--min-seconds 3]
        [--mode train|forward] [--out bench/results/gpu_mixers_<mode>_<device>.json]

Per architecture preset (any registered mixer's), two models with the same
weights: one on our path (the mixer's chunked form; for Mamba, which has none, the
step-by-step reference scan, our only path on a GPU), one on the kernel (`scan:
auto`: mamba-ssm's, flash-linear-attention's). Per length and precision: training-step tokens/s of each, measured
in alternation (forward, cross-entropy over every position, backward, Adam;
synchronised), peak GPU memory of a step of each, and how far the kernel's
logits and gradients are from ours (largest absolute logit difference; largest
gradient difference over the gradient's largest entry). tf32 is what fp32 trials
run on CUDA; bf16 is autocast, as `precision: bf16`. `--mode forward` times the
forward alone without gradients (evaluation's prefill), for a kernel whose
backward does not run on the GPU at hand (fla's on Hopper with Triton < 3.7.1).
`--device cpu` runs the same code on CPU, where both twins take our path, without
memory figures (the test suite does, so that the script keeps working).
"""

import argparse
import json
import statistics
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from bench_gpu import device_name, write_rows  # bench/, the script's own folder

from workloads.models import build_model, preset
from workloads.models.base import REGISTRY

VOCAB = 75  # IsTree at n=64
ARCHS = sorted(m.arch for m in REGISTRY.values())  # every registered mixer, alone


def our_path(mixer: str) -> str:
    """Our path on a GPU: the mixer's chunked form where it has one, else its
    step-by-step reference scan (Mamba's). The kernel's is `auto`, which every
    mixer's config resolves to its CUDA kernel on a GPU."""
    return "chunked" if "chunked" in REGISTRY[mixer].config.scans() else "reference"


def twins(arch: str, size: str, device: str):
    """(ours, kernel): the same weights, the two paths."""
    cfg = preset(arch, size)
    path = our_path(cfg.mixer.name)
    torch.manual_seed(0)
    mine = build_model(cfg.with_fields(scan=path), VOCAB).to(device)
    kernel = build_model(cfg.with_fields(scan="auto" if device == "cuda" else path), VOCAB).to(device)
    kernel.load_state_dict(mine.state_dict())
    return mine, kernel


class Stepper:
    def __init__(self, model, x: torch.Tensor, precision: str, mode: str):
        self.model, self.x, self.precision, self.mode = model, x, precision, mode
        self.opt = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=1e-4)

    def loss(self):
        with torch.autocast(self.x.device.type, dtype=torch.bfloat16, enabled=self.precision == "bf16"):
            logits = self.model(self.x[:, :-1])
        return logits, F.cross_entropy(logits.float().reshape(-1, VOCAB), self.x[:, 1:].reshape(-1))

    def sync(self) -> None:
        if self.x.is_cuda:
            torch.cuda.synchronize()

    def step(self) -> float:
        self.sync()
        start = time.perf_counter()
        if self.mode == "forward":
            with torch.no_grad():
                self.loss()
        else:
            _, loss = self.loss()
            self.opt.zero_grad(set_to_none=True)
            loss.backward()
            self.opt.step()
        self.sync()
        return time.perf_counter() - start

    def peak_gib(self) -> float | None:
        if not self.x.is_cuda:
            self.step()
            return None
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        self.step()
        return torch.cuda.max_memory_allocated() / 2**30


def agreement(ours, kernel, x: torch.Tensor, mode: str) -> dict:
    """Logits (and in train mode gradients) of one batch in plain fp32 (TF32 off),
    before any step."""
    tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    out = {}
    for name, model in (("ours", ours), ("kernel", kernel)):
        model.zero_grad(set_to_none=True)
        with torch.set_grad_enabled(mode == "train"):
            logits = model(x[:, :-1])
        if mode == "train":
            F.cross_entropy(logits.reshape(-1, VOCAB), x[:, 1:].reshape(-1)).backward()
        out[name] = logits.detach(), {k: p.grad.detach().clone() for k, p in model.named_parameters() if p.grad is not None}
        model.zero_grad(set_to_none=True)
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = tf32
    (lo, go), (lk, gk) = out["ours"], out["kernel"]
    row = {"logits_max_abs_diff": float((lo - lk).abs().max()), "logits_max_abs": float(lo.abs().max())}
    if mode == "train":
        row["grad_max_rel_diff"] = max(float((go[k] - gk[k]).abs().max() / go[k].abs().max().clamp_min(1e-30))
                                       for k in go)
    return row


def measure(arch: str, size: str, length: int, batch: int, precision: str, mode: str, min_seconds: float,
            check: bool, device: str = "cuda") -> dict:
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
    mine, kernel = twins(arch, size, device)
    x = torch.randint(0, VOCAB, (batch, length + 1), device=device, generator=torch.Generator(device).manual_seed(0))
    row = dict(arch=arch, size=size, length=length, batch=batch, precision=precision, mode=mode,
               ours=mine.cfg.mixer.scan, kernel=kernel.cfg.mixer.scan)
    if check:
        row.update(agreement(mine, kernel, x, mode))
    steppers = {"ours": Stepper(mine, x, precision, mode), "kernel": Stepper(kernel, x, precision, mode)}
    for name, s in steppers.items():
        try:
            peak = s.peak_gib()
            if peak is not None:
                row[f"{name}_peak_gib"] = round(peak, 3)
            s.step()  # warm-up: autotuning, allocator
        except (RuntimeError, torch.OutOfMemoryError) as e:
            row[f"{name}_error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"
    live = {k: s for k, s in steppers.items() if f"{k}_error" not in row}
    times = {k: [] for k in live}
    start = time.perf_counter()
    while live and (time.perf_counter() - start < min_seconds or min(len(v) for v in times.values()) < 3):
        for name, s in live.items():
            times[name].append(s.step())
    tokens = batch * length
    for name, ts in times.items():
        row[f"{name}_tokens_per_s"] = round(tokens / statistics.median(ts))
        row[f"{name}_steps"] = len(ts)
    if len(times) == 2:
        row["kernel_over_ours_speed"] = round(row["kernel_tokens_per_s"] / row["ours_tokens_per_s"], 2)
    del steppers, mine, kernel
    if device == "cuda":
        torch.cuda.empty_cache()
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--archs", nargs="+", default=["mamba2", "gated_deltanet"], choices=ARCHS)
    parser.add_argument("--size", default="0.5M")
    parser.add_argument("--lengths", nargs="+", type=int, default=[200, 1000, 4000])
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--precisions", nargs="+", default=["tf32", "bf16"], choices=["tf32", "bf16"])
    parser.add_argument("--min-seconds", type=float, default=3.0)
    parser.add_argument("--mode", default="train", choices=["train", "forward"])
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    name = device_name(args.device)
    rows = []
    for arch in args.archs:
        for length in args.lengths:
            for i, precision in enumerate(args.precisions):
                row = measure(arch, args.size, length, args.batch, precision, args.mode, args.min_seconds,
                              check=i == 0, device=args.device)
                rows.append(row)
                print(json.dumps(row), flush=True)
    write_rows(args.out or Path("bench/results") / f"gpu_mixers_{args.mode}_{name.replace(' ', '_')}.json", name, rows)


if __name__ == "__main__":
    main()
