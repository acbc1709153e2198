"""The laptop design's power calculation (docs/laptop.md, "How many seeds"): from the
training noise the stored laptop and capacity runs measured (each cell's spread
between its seeds, never their verdicts), the power of each paper claim's line to
show the effect it declares, on S seeds, under the findings engine's test (Student's
t on the seeds, docs/findings.md), and the time each design takes on two cores from
run 8's measured trial speeds.

    python bench/laptop_power.py [--out bench/results/laptop_power.json]

The effect each claim declares: (a) a relative fall 0.2 beyond its 0.2 threshold (0
with retrieval), (b) and (c) a gain of 0.1, (d) and (e) a model that ends level with
the Transformer (0.1 inside the 0.1 it may lag) and a gap narrowed by 0.1. A line's
power is the product of its comparisons' (each must be shown; treated as
independent, which errs low). Cells whose seeds agree exactly (at the ceiling, say)
have no training noise; sampling is inside each measured spread.
"""

import argparse
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd

from workloads.tasks.findings import t_quantile

ROOT = Path(__file__).parents[1]
RUNS = ("istree_laptop_run8", "capacity_or_training_cpu")
T, M, H, SMALL = ("transformer", "tiny"), ("mamba", "tiny"), ("hybrid", "tiny"), ("mamba", "tiny-dstate1-nlayers4")
SEEDS = (2, 3, 4, 5, 6, 8)


def cell_noise() -> dict:
    """Each cell's sd of exact match from seed to seed, pooled over the runs that have it."""
    variances = {}
    for run in RUNS:
        best = pd.read_csv(ROOT / "sweeps" / "calibration" / run / "best.csv")
        for _, r in best.iterrows():
            values = [float(v) for v in str(r["val_exact_match_by_seed"]).split("/")]
            mean = sum(values) / len(values)
            variances.setdefault((r["arch"], r["size"], r["setup"], int(r["n"])), []).append(
                sum((v - mean) ** 2 for v in values) / (len(values) - 1))
    return {k: math.sqrt(sum(v) / len(v)) for k, v in variances.items()}


def power(sigma: float, effect: float, seeds: int, rng, sims: int = 20000) -> float:
    """P(shown) of one comparison whose statistic is `effect` beyond its threshold with
    sd `sigma` from seed to seed: the mean beyond t_{0.975, S-1} standard errors."""
    if sigma == 0:
        return 1.0
    mean = effect + rng.normal(0, sigma / math.sqrt(seeds), sims)
    sd = sigma * np.sqrt(rng.chisquare(seeds - 1, sims) / (seeds - 1))
    return float(np.mean(mean > t_quantile(0.975, seeds - 1) * sd / math.sqrt(seeds)))


def claims(noise: dict, mambas: tuple) -> dict:
    """Each paper claim's comparisons on the laptop's grid (n = 4 and 6), as the sd of
    each comparison's statistic, and the effect it declares."""
    def sd(terms):
        return math.sqrt(sum(c * c * noise.get((*model, setup, n), 0.0) ** 2 for c, model, setup, n in terms))

    out = {}
    for setup in ("vanilla", "cot", "retrieval"):
        comps = []
        for m in mambas:
            comps += [sd([(1, m, setup, 4), (-1, m, setup, 6), (-1, c, setup, 4), (1, c, setup, 6)]) for c in (T, H)]
            comps.append(sd([(1, m, setup, 4), (-1, m, setup, 6)]))
        out[f"(a) {setup}: Mamba falls more"] = (comps, 0.2)
    for name, before, after, k in (("(b) CoT improves every architecture", "vanilla", "cot", 2),
                                   ("(c) retrieval improves every architecture more", "cot", "retrieval", 1)):
        out[name] = ([sd([(1, mo, after, n), (-k, mo, before, n)]) for mo in (T, H, *mambas) for n in (4, 6)], 0.1)
    comps = []
    for m in mambas:
        for n in (4, 6):
            comps.append(sd([(1, m, "retrieval", n), (-1, T, "retrieval", n)]))
            comps.append(sd([(1, T, "cot", n), (-1, m, "cot", n), (-1, T, "retrieval", n), (1, m, "retrieval", n)]))
    out["(d) with retrieval Mamba closes its gap"] = (comps, 0.1)
    comps = []
    for setup in ("vanilla", "cot", "retrieval"):
        for n in (4, 6):
            comps.append(sd([(1, H, setup, n), (-1, T, setup, n)]))
            comps += [sd([(1, H, setup, n), (-1, m, setup, n)]) for m in mambas]
    out["(e) the hybrid tracks the Transformer"] = (comps, 0.1)
    return out


def trial_seconds() -> dict:
    """Seconds of one trial of each cell on one core, from run 8's measured speeds."""
    results = pd.read_csv(ROOT / "sweeps" / "calibration" / "istree_laptop_run8" / "results.csv")
    results["seconds"] = results["samples"] / results["samples_per_s"]
    return {(a, s): float(v) for (a, s), v in results.groupby(["arch", "size"])["seconds"].sum().items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "laptop_power.json")
    args = parser.parse_args()
    rng, noise, seconds = np.random.default_rng(84), cell_noise(), trial_seconds()
    designs = []
    for label, mambas in (("with the state-ablation Mamba", (M, SMALL)), ("without it", (M,))):
        models = (T, H, *mambas)
        per_seed = sum(seconds[m] for m in models) / 2  # run 8 had two seeds of each model's 6 cells
        lines = {}
        for name, (comps, effect) in claims(noise, mambas).items():
            lines[name] = dict(worst_sd=max(comps), power={str(s): math.prod(power(sd, effect, s, rng) for sd in comps)
                                                          for s in SEEDS})
        designs.append(dict(design=label, models=[" ".join(m) for m in models],
                            minutes_on_two_cores={str(s): s * per_seed / 2 / 60 for s in SEEDS}, lines=lines))
    args.out.write_text(json.dumps(dict(runs=list(RUNS), cell_noise={" ".join(map(str, k)): v for k, v in
                                                                     sorted(noise.items())}, designs=designs), indent=1))
    for d in designs:
        print(f"{d['design']}: " + ", ".join(f"S={s}: {m:.0f} min" for s, m in d["minutes_on_two_cores"].items()))
        print("| claim | worst sd | " + " | ".join(f"S={s}" for s in SEEDS) + " |")
        print("|---|---|" + "---|" * len(SEEDS))
        for name, row in d["lines"].items():
            print(f"| {name} | {row['worst_sd']:.3f} | " + " | ".join(f"{row['power'][str(s)]:.0%}" for s in SEEDS) + " |")


if __name__ == "__main__":
    main()
