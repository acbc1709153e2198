"""The findings engine's power table (docs/findings.md, "Power"): per claim kind, the
share of simulated runs that read Reproduced for a true effect beyond its threshold
and for one exactly at it, on 1, 2, 4 and 8 seeds (workloads/tasks/power.py).

    python bench/findings_power.py [--runs 400] [--out bench/results/findings_power.json]

Not a timing: the figures are shares of seeded simulations, the same on any machine.
"""

import argparse
import json
from pathlib import Path

from workloads.tasks.power import SCENARIOS, reproduced

SEEDS = (1, 2, 4, 8)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=400)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "findings_power.json")
    args = parser.parse_args()
    rows = []
    for scenario in SCENARIOS:
        rows.append(dict(claim=scenario.name, threshold=scenario.threshold, effect=scenario.effect,
                         beyond={str(s): reproduced(scenario, scenario.effect, s, args.runs, seed=1) for s in SEEDS},
                         at_threshold={str(s): reproduced(scenario, scenario.threshold, s, args.runs, seed=1)
                                       for s in SEEDS}))
        print(rows[-1], flush=True)
    args.out.write_text(json.dumps(dict(runs=args.runs, val_samples=1000, training_noise_sd=0.05, rows=rows), indent=1))
    print("| claim kind (effect beyond / at the threshold) | " + " | ".join(f"S={s}" for s in SEEDS) + " |")
    print("|---|" + "---|" * len(SEEDS))
    for row in rows:
        print(f"| {row['claim']} | " + " | ".join(f"{row['beyond'][str(s)]:.0%} / {row['at_threshold'][str(s)]:.0%}"
                                                  for s in SEEDS) + " |")


if __name__ == "__main__":
    main()
