"""Greedy generation throughput: batched cached decoding against re-running the
whole sequence for every new token, side by side, on the validation prompts.

    python bench/bench_generation.py [--n 8] [--setup retrieval] [--batch 64] [--size 0.5M]
        [--out bench/results/generation.json]

Both decoders produce the same tokens (tests/workloads/test_train.py checks it);
this measures how much the caches buy. Models are untrained: their outputs run
to the maximum length, the worst case for decoding time.
"""

import argparse
import json
import time
from pathlib import Path

import torch

from workloads.evaluate import generate
from workloads.models import build_model, preset
from workloads.tasks import IsTreeConfig, build_task


def full_reforward(model, task, prompts, max_length):
    """Greedy decoding without caches: one full forward per generated token."""
    seqs = prompts
    with torch.no_grad():
        while seqs.shape[1] < max_length:
            nxt = model(seqs)[:, -1].argmax(-1)
            if task.uses_retriever:
                asks = (seqs[:, -1] == task.end_search_id).nonzero().flatten().numpy()
                if len(asks):
                    answers = task.retrieve_rows(seqs.numpy(), torch.full((len(seqs),), seqs.shape[1]).numpy(), asks)
                    nxt[asks] = torch.from_numpy(answers)
            seqs = torch.cat([seqs, nxt[:, None]], dim=1)
    return seqs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=8)
    parser.add_argument("--setup", default="retrieval")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--size", default="0.5M")
    parser.add_argument("--new-tokens", type=int, default=256, help="tokens generated per row")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "generation.json")
    args = parser.parse_args()
    task = build_task(IsTreeConfig(n=args.n, setup=args.setup))
    prompts = task.batch(seed=0, stream=1, start=0, count=args.batch).tokens[:, : task.prompt_length]
    max_length = task.prompt_length + args.new_tokens
    rows = []
    for arch in ("transformer", "mamba", "hybrid"):
        torch.manual_seed(0)
        model = build_model(preset(arch, args.size), task.vocab_size).eval()
        timings = {}
        for name, run in (("cached", lambda m=model: generate(m, task, prompts, torch.no_grad, max_length=max_length)),
                          ("full_reforward", lambda m=model: full_reforward(m, task, prompts, max_length))):
            start = time.perf_counter()
            run()
            timings[name] = time.perf_counter() - start
        tokens = args.batch * args.new_tokens
        row = {"arch": arch, "size": args.size, "n": args.n, "setup": args.setup, "batch": args.batch,
               "new_tokens": args.new_tokens, "cached_tokens_per_s": tokens / timings["cached"],
               "full_tokens_per_s": tokens / timings["full_reforward"], "speedup": timings["full_reforward"] / timings["cached"]}
        rows.append(row)
        print(f"{arch:11s} {args.size}: cached {row['cached_tokens_per_s']:9.0f} tokens/s | full re-forward "
              f"{row['full_tokens_per_s']:8.0f} tokens/s | {row['speedup']:.1f}x", flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"threads": torch.get_num_threads(), "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
