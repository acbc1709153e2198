"""The findings engine's power and false-positive rate, by simulation: a claim's
minimal grid of cells at true exact matches that put its statistic at an effect of
our choosing, each seed's training noise and each validation set's sampling drawn
at random, and the claim decided by the task's own declaration through the engine
(docs/findings.md, "Power"). `python bench/findings_power.py` writes the table;
tests/workloads/tasks/test_findings_power.py holds the properties."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Callable

MODELS = {"transformer": ("tiny", 30944, 0), "mamba": ("tiny", 29888, 3648), "hybrid": ("tiny", 30240, 2432),
          "mamba-large-state": ("tiny-dstate16", 29888, 3648), "mamba-small-state": ("tiny-dstate1-nlayers4", 28320, 1024)}


@dataclass(frozen=True)
class Scenario:
    """A claim of IsTree's on its minimal grid: `cells(effect)` the true exact match of
    each (model, setup, n), `claim` the declaration (an index into CLAIMS' lines, by the
    start of its name), `threshold` the effect at which the claim is exactly at its
    threshold, `effect` one beyond it (the threshold plus a margin)."""

    name: str
    claim: str  # the start of its line's name (or head)
    cells: Callable[[float], dict]
    threshold: float
    effect: float

    def declaration(self):
        """The task's declaration this scenario's line comes from."""
        from workloads.tasks._istree_findings import CLAIMS

        words = self.claim.replace("Capacity or training (iii)", "(iii)")
        return next(c for c in CLAIMS if c.name.replace("{setup}", "cot").startswith(words)
                    or getattr(c, "label", "").startswith(words))


def _falls(e: float) -> dict:  # (a), CoT: Mamba falls e more than the Transformer and the hybrid from n=4 to 6
    return {("transformer", "cot", 4): 0.98, ("transformer", "cot", 6): 0.93, ("hybrid", "cot", 4): 0.98,
            ("hybrid", "cot", 6): 0.93, ("mamba", "cot", 4): 0.98, ("mamba", "cot", 6): 0.93 - e}


def _improves(e: float) -> dict:  # (b): CoT's skill e above the answer alone's (0.7: skill 0.4), every arch, n=4
    out = {}
    for arch in ("transformer", "mamba", "hybrid"):
        out[(arch, "vanilla", 4)], out[(arch, "cot", 4)] = 0.7, 0.4 + e
    return out


def _repairs_retrieval(e: float) -> dict:  # (d): a CoT gap of 0.37, retrieval leaving Mamba e below the Transformer
    return {("transformer", "cot", 6): 0.95, ("mamba", "cot", 6): 0.58, ("transformer", "retrieval", 6): 0.97,
            ("mamba", "retrieval", 6): 0.97 - e}


def _tracks(e: float) -> dict:  # (e), CoT: Mamba 0.37 below the Transformer, the hybrid e below it
    return {("transformer", "cot", 6): 0.95, ("mamba", "cot", 6): 0.58, ("hybrid", "cot", 6): 0.95 - e}


def _state_closes(e: float) -> dict:  # (g)(iii), CoT: the small state 0.37 below the Transformer, the large e below
    return {("transformer", "cot", 6): 0.95, ("mamba-small-state", "cot", 6): 0.58, ("mamba", "cot", 6): 0.95 - e}


# For each claim kind: at its threshold, and 0.1 beyond it (for (a), the audit's 0.30 where 0.2 is claimed;
# for a closeness, 0.02 below where 0.1 is allowed).
SCENARIOS = (
    Scenario("(a) Falls: Mamba falls more than the Transformer and the hybrid (CoT)", "cot: Mamba", _falls, 0.2, 0.3),
    Scenario("(b) Improves: CoT improves every architecture", "CoT improves", _improves, 0.0, 0.1),
    Scenario("(d) Repairs: with retrieval Mamba closes its gap", "with retrieval Mamba", _repairs_retrieval, 0.1, 0.02),
    Scenario("(e) Repairs: the hybrid tracks the Transformer (CoT)", "the hybrid tracks", _tracks, 0.1, 0.02),
    Scenario("(g)(iii) GapCloses: a 3x larger state closes the gap (CoT)", "Capacity or training (iii)",
             _state_closes, 0.1, 0.02),
)


@functools.lru_cache(maxsize=None)
def centre(target: float, noise: float) -> float:
    """The centre of a normal of sd `noise` whose values, held within 0 and 1, have
    mean `target`: a cell near the ceiling is drawn so that its true exact match,
    what a claim is about, is `target` (bisection on the clipped normal's mean;
    remembered: a simulation asks the same few thousands of times)."""
    from statistics import NormalDist

    def clipped_mean(mu: float) -> float:
        z = NormalDist()
        a, b = (0 - mu) / noise, (1 - mu) / noise
        inside = mu * (z.cdf(b) - z.cdf(a)) + noise * (z.pdf(a) - z.pdf(b))
        return inside + (1 - z.cdf(b))  # values above 1 count as 1, below 0 as 0

    lo, hi = target - 1, target + 1
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if clipped_mean(mid) < target else (lo, mid)
    return (lo + hi) / 2


def draw(cells: dict, seeds: int, rng, val_samples: int = 1000, noise: float = 0.05):
    """A best-per-cell table of `cells` (true exact matches) on `seeds` seeds: each
    seed's rate normal about its cell's (sd `noise`, held within 0 and 1, centred so
    that its mean is the cell's), its count drawn binomially on `val_samples` samples."""
    import numpy as np
    import pandas as pd

    rows = []
    for (model, setup, n), mean in cells.items():
        size, params, state = MODELS[model]
        arch = model.split("-")[0]
        rates = np.clip(centre(mean, noise) + rng.normal(0, noise, seeds), 0, 1)
        values = rng.binomial(val_samples, rates) / val_samples
        rows.append(dict(arch=arch, setup=setup, size=size, n=n, lr=3e-3, seeds=seeds,
                         val_exact_match=float(values.mean()), val_exact_match_by_seed="/".join(f"{v:.8g}" for v in values),
                         seed_ids="/".join(map(str, range(seeds))), val_samples=val_samples, params=params,
                         state_floats=state, gen_accuracy=0.9))
    return pd.DataFrame(rows)


def reproduced(scenario: Scenario, effect: float, seeds: int, runs: int, seed: int = 0, val_samples: int = 1000,
               noise: float = 0.05) -> float:
    """The share of `runs` simulated runs on which the scenario's line reads its
    affirmative head (Reproduced, or "the gap closes")."""
    import numpy as np

    from workloads.tasks._istree_findings import CHANCE, TRAINING_NOISE
    from workloads.tasks.findings import findings

    rng = np.random.default_rng([seed, seeds, int(effect * 1000)])
    declaration, hits = scenario.declaration(), 0
    for _ in range(runs):
        found = findings(draw(scenario.cells(effect), seeds, rng, val_samples, noise), [declaration], CHANCE,
                         noise=TRAINING_NOISE).lines
        verdict = (next(f for f in found if "cot:" in f.claim) if len(found) > 1 else found[0]).verdict  # one per setup
        hits += verdict == "Reproduced" or verdict.endswith("the gap closes")
    return hits / runs
