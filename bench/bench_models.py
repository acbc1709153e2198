"""CPU training throughput of our models against the implementations people reach for.

    python bench/bench_models.py [--lengths 100 200] [--batch 64] [--min-seconds 6] [--pairs 0 1 ...]
        [--memory-lengths 200 800] [--memory-models NAME ...] [--out bench/results/models_cpu.json]

Side by side in one run, same config, batch and sequence length, measured in
alternation so that machine noise hits both sides alike:
  - our Transformer against transformers' LlamaForCausalLM (the reference code's model),
  - our Mamba (compiled CPU scan) against `mambapy` (parallel scan), and against our
    Transformer, the target being within 3x of its step time;
  - the 0.5M presets of the new mixers (Mamba-2, Gated DeltaNet, Kimi Delta
    Attention, Gated DeltaNet-2: chunked forms; log-linear Mamba-2: quadratic)
    against our Transformer, the same target.
A training step is forward, cross-entropy over every position, backward and Adam.
Peak memory is read per configuration in a fresh subprocess (ru_maxrss).
"""

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

VOCAB = 75  # IsTree at n=64


def ours(arch: str, size: str) -> nn.Module:
    from workloads.models import build_model, preset

    return build_model(preset(arch, size), VOCAB)


def hf_llama(d_model=64, d_mlp=256, n_layers=8, n_heads=4) -> nn.Module:
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=VOCAB, hidden_size=d_model, intermediate_size=d_mlp, num_hidden_layers=n_layers,
                      num_attention_heads=n_heads, num_key_value_heads=n_heads, max_position_embeddings=4096,
                      tie_word_embeddings=True, attn_implementation="sdpa")
    model = LlamaForCausalLM(cfg)
    return _Logits(model, lambda m, x: m(input_ids=x).logits)


class _Logits(nn.Module):
    def __init__(self, inner, call):
        super().__init__()
        self.inner, self.call = inner, call

    def forward(self, x):
        return self.call(self.inner, x)


def mambapy_lm(d_model=64, n_layers=16) -> nn.Module:
    from mambapy.mamba import Mamba, MambaConfig

    class LM(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(VOCAB, d_model)
            self.mamba = Mamba(MambaConfig(d_model=d_model, n_layers=n_layers, d_state=16, expand_factor=2, d_conv=4, pscan=True))
            self.norm = nn.RMSNorm(d_model)

        def forward(self, x):
            return self.norm(self.mamba(self.embed(x))) @ self.embed.weight.T

    return LM()


MODELS = {
    "ours-transformer-0.5M": lambda: ours("transformer", "0.5M"),
    "hf-llama-0.5M": hf_llama,
    "ours-mamba-0.5M": lambda: ours("mamba", "0.5M"),
    "mambapy-0.5M": mambapy_lm,
    "ours-mamba2-0.5M": lambda: ours("mamba2", "0.5M"),
    "ours-gated_deltanet-0.5M": lambda: ours("gated_deltanet", "0.5M"),
    "ours-kda-0.5M": lambda: ours("kda", "0.5M"),
    "ours-gated_deltanet2-0.5M": lambda: ours("gated_deltanet2", "0.5M"),
    "ours-log_linear_mamba2-0.5M": lambda: ours("log_linear_mamba2", "0.5M"),
}
PAIRS = [("ours-transformer-0.5M", "hf-llama-0.5M"), ("ours-mamba-0.5M", "mambapy-0.5M"),
         ("ours-mamba-0.5M", "ours-transformer-0.5M"), ("ours-mamba2-0.5M", "ours-transformer-0.5M"),
         ("ours-gated_deltanet-0.5M", "ours-transformer-0.5M"), ("ours-kda-0.5M", "ours-transformer-0.5M"),
         ("ours-gated_deltanet2-0.5M", "ours-transformer-0.5M"), ("ours-log_linear_mamba2-0.5M", "ours-transformer-0.5M")]


class Trainer:
    def __init__(self, name: str, batch: int, length: int):
        torch.manual_seed(0)
        self.model = MODELS[name]()
        self.opt = torch.optim.Adam([p for p in self.model.parameters() if p.requires_grad], lr=1e-4)
        self.x = torch.randint(0, VOCAB, (batch, length + 1))

    def step(self) -> float:
        start = time.perf_counter()
        logits = self.model(self.x[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), self.x[:, 1:].reshape(-1))
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()
        return time.perf_counter() - start


def compare(a: str, b: str, batch: int, length: int, min_seconds: float) -> dict:
    trainers = {a: Trainer(a, batch, length), b: Trainer(b, batch, length)}
    for t in trainers.values():
        t.step()  # warm-up: compilation, allocator
    times = {a: [], b: []}
    start = time.perf_counter()
    while time.perf_counter() - start < min_seconds or min(len(v) for v in times.values()) < 2:
        for name, t in trainers.items():
            times[name].append(t.step())
    med = {k: statistics.median(v) for k, v in times.items()}
    return {"a": a, "b": b, "length": length, "batch": batch,
            "a_samples_per_s": batch / med[a], "b_samples_per_s": batch / med[b],
            "a_over_b_speed": med[b] / med[a], "steps": {k: len(v) for k, v in times.items()}}


def peak_memory_mib(name: str, batch: int, length: int) -> float | None:
    """Peak RSS of a fresh process that builds the model and runs two training steps.

    Read from VmHWM, which starts afresh at exec (ru_maxrss would carry this
    process's own peak into the child)."""
    code = (f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); import bench_models as b; "
            f"t = b.Trainer({name!r}, {batch}, {length}); t.step(); t.step(); "
            "print(next(l for l in open('/proc/self/status') if l.startswith('VmHWM')).split()[1])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    if out.returncode != 0:
        return None  # killed, in practice by the kernel's out-of-memory killer
    return int(out.stdout.split()[-1]) / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[100, 200])
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--min-seconds", type=float, default=6.0)
    parser.add_argument("--memory-lengths", type=int, nargs="*", default=[200, 800])
    parser.add_argument("--pairs", type=int, nargs="+", default=list(range(len(PAIRS))),
                        help="which comparisons: " + ", ".join(f"{i}: {a} vs {b}" for i, (a, b) in enumerate(PAIRS)))
    parser.add_argument("--memory-models", nargs="*", default=["ours-transformer-0.5M", "ours-mamba-0.5M", "mambapy-0.5M"])
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "models_cpu.json")
    args = parser.parse_args()
    rows = []
    for length in args.lengths:
        for a, b in (PAIRS[i] for i in args.pairs):
            r = compare(a, b, args.batch, length, args.min_seconds)
            rows.append(r)
            print(f"L={length:<4d} {a:>22s} {r['a_samples_per_s']:8.2f} samples/s | {b:>22s} "
                  f"{r['b_samples_per_s']:8.2f} samples/s | {a} is {r['a_over_b_speed']:.2f}x as fast", flush=True)
    memory = []
    for length in args.memory_lengths:
        for name in args.memory_models:
            mib = peak_memory_mib(name, args.batch, length)
            # What one layer's (B, L, d_inner, d_state) fp32 tensor would take: the
            # materialising scans hold several per layer.
            bldn = args.batch * length * 128 * 16 * 4 / 2**20
            memory.append({"model": name, "length": length, "peak_rss_mib": mib and round(mib), "one_BLDN_tensor_mib": round(bldn)})
            shown = f"{mib:7.0f} MiB" if mib else "killed (out of memory)"
            print(f"L={length:<4d} {name:>22s} peak RSS {shown}  (one (B,L,D,N) tensor: {bldn:.0f} MiB)", flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"threads": torch.get_num_threads(), "rows": rows, "memory": memory}, indent=1))


if __name__ == "__main__":
    main()
