"""The CPU time of one launch of a tiny sweep with the embedded Ray's dashboard,
without it (--no-dashboard), and without it but with Ray's idle workers started
ahead of the first driver (Ray's default, which the tool turns off), side by side,
every process counted (bench/suite_cpu.py).

    python bench/launch_cpu.py [--reps 2] [--spec sweeps/istree_micro.yaml]

Writes bench/results/launch_cpu.json: each launch's core-seconds and wall seconds,
alternating the three so that the machine's drift falls on each alike.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from suite_cpu import measure  # noqa: E402

ROOT = Path(__file__).parents[1]
AHEAD = "--no-dashboard, idle workers ahead"
# Each variant's flag and environment: Ray's default of idle workers started ahead of
# the first driver, which the tool turns off unless the environment says otherwise.
VARIANTS = {"--dashboard": ("--dashboard", {}), "--no-dashboard": ("--no-dashboard", {}),
            AHEAD: ("--no-dashboard", {"RAY_prestart_worker_first_driver": "1"})}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--spec", default=str(ROOT / "sweeps" / "istree_micro.yaml"))
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "launch_cpu.json")
    args = parser.parse_args()
    rows = []
    for rep in range(args.reps):
        for variant, (flag, env) in VARIANTS.items():
            with tempfile.TemporaryDirectory(prefix="icr-bench-") as storage:
                record = measure([sys.executable, "-m", "orchestrator.cli", "launch", args.spec, "--storage",
                                  storage, flag], env={**os.environ, **env})
            if record["exit_status"] != 0:
                print(f"launch {variant} failed (exit {record['exit_status']})", file=sys.stderr)
                return 1
            rows.append({"rep": rep, "variant": variant, "cpu_s": record["cpu_s"], "wall_s": record["wall_s"],
                         "counted_by": record["counted_by"]})
            print(rows[-1], file=sys.stderr)
    median = {variant: round(statistics.median(r["cpu_s"] for r in rows if r["variant"] == variant), 1)
              for variant in VARIANTS}
    summary = {"spec": Path(args.spec).name, "median_cpu_s": median,
               "saved_cpu_s": {"no dashboard": round(median["--dashboard"] - median["--no-dashboard"], 1),
                               "no idle workers ahead": round(median[AHEAD] - median["--no-dashboard"], 1)},
               "rows": rows}
    args.out.write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps(summary["median_cpu_s"]), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
