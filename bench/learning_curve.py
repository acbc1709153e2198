"""One trial's learning curve, as JSON lines: exact match (and loss, samples/s) at
each evaluation. The laptop protocol's calibration (sweeps/istree_laptop.yaml) ran it,
two at a time on two cores (one thread each), for each line of
sweeps/calibration/istree_laptop_b16/curves.jsonl:

    python bench/learning_curve.py ARCH SETUP N --lr 3e-3 --samples 30000 --batch 16 \
        [--layers 3] [--init torch|normal] [--d-state 1] [--d-model 16] [--seed 0] >> curves.jsonl

`--layers` and `--init` change the Transformer's (its depth, its attention init),
`--d-state` the recurrent state of Mamba's layers, `--d-model` the width (none of
these: the preset's);
the samples/s it prints are of a process sharing the machine, not a benchmark.
"""

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from workloads.config import trial_config  # noqa: E402
from workloads.tasks import IsTreeConfig  # noqa: E402
from workloads.threads import bound_threads  # noqa: E402
from workloads.train import Hooks, run_trial  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("arch")
    p.add_argument("setup")
    p.add_argument("n", type=int)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--samples", type=int, default=30000)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--layers", type=int, default=0, help="the model's n_layers (0: the preset's)")
    p.add_argument("--init", choices=("torch", "normal"), help="the attention layers' init (default: the preset's)")
    p.add_argument("--d-state", type=int, default=0, help="the mixer's d_state (0: the preset's)")
    p.add_argument("--d-model", type=int, default=0, help="the model's width (0: the preset's)")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    bound_threads(1)
    cfg = trial_config(a.arch, "tiny", IsTreeConfig(n=a.n, setup=a.setup), lr=a.lr, seed=a.seed, samples=a.samples,
                       batch_size=a.batch, warmup_samples=min(2000, a.samples // 10), eval_every=a.samples // 4,
                       val_samples=300, device="cpu",
                       dims={k: v for k, v in (("n_layers", a.layers), ("d_state", a.d_state), ("d_model", a.d_model)) if v})
    if a.init:
        cfg = cfg.model_copy(update={"model": cfg.model.model_copy(update={"attn_init": a.init})})

    def report(m, _checkpoint):
        if m.get("evaluated", True):
            print(json.dumps(dict(arch=a.arch, setup=a.setup, n=a.n, lr=a.lr, batch=a.batch, layers=a.layers,
                                  init=a.init or "-", dstate=a.d_state or None, dmodel=a.d_model or None, seed=a.seed, samples=m["samples"], em=round(m["val_exact_match"], 3),
                                  gen=m.get("gen_accuracy"), loss=round(m["val_loss"], 3), sps=round(m["samples_per_s"]))),
                  flush=True)

    run_trial(cfg, Hooks(report=report))


if __name__ == "__main__":
    main()
