"""The CPU time of a short lone trial's process with torch's AdamW and with
workloads.adam.AdamW (torch's, without the guards that import torch._dynamo),
alternating, each in a fresh process as a trial's worker is.

    python bench/adam_import.py [--reps 5]

Writes bench/results/adam_import_cpu.json: each process's core-seconds (its imports, a
128-sample trial of the tiny hybrid with a checkpoint) and the median difference.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parents[1]
TRIAL = """
import resource, sys, tempfile
from pathlib import Path
import torch
import workloads.train
if sys.argv[1] == "torch":
    workloads.train.AdamW = torch.optim.AdamW
from workloads.config import trial_config
from workloads.tasks.istree import IsTreeConfig
from workloads.threads import bound_threads
bound_threads(1)
config = trial_config("hybrid", "tiny", IsTreeConfig(n=4, setup="cot"), lr=3e-3, samples=128, batch_size=16,
                      warmup_samples=32, eval_every=64, val_samples=16, device="cpu")
with tempfile.TemporaryDirectory() as work:
    workloads.train.run_trial(config, checkpoints=workloads.train.Checkpoints(dir=Path(work)))
usage = resource.getrusage(resource.RUSAGE_SELF)
print(usage.ru_utime + usage.ru_stime, "torch._dynamo" in sys.modules)
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "adam_import_cpu.json")
    args = parser.parse_args()
    rows = []
    for rep in range(args.reps):
        for variant in ("torch", "workloads.adam"):
            out = subprocess.run([sys.executable, "-c", TRIAL, variant], cwd=ROOT, capture_output=True, text=True,
                                 check=True).stdout.split()
            rows.append({"rep": rep, "optimizer": variant, "cpu_s": round(float(out[0]), 3),
                         "imports_dynamo": out[1] == "True"})
            print(rows[-1], file=sys.stderr)
    median = {v: round(statistics.median(r["cpu_s"] for r in rows if r["optimizer"] == v), 3)
              for v in ("torch", "workloads.adam")}
    summary = {"what": "one process: imports, a 128-sample tiny hybrid trial on IsTree CoT n=4, a checkpoint",
               "device": f"cpu ({platform.processor() or platform.machine()})", "median_cpu_s": median,
               "saved_cpu_s": round(median["torch"] - median["workloads.adam"], 3), "rows": rows}
    args.out.write_text(json.dumps(summary, indent=1) + "\n")
    print(json.dumps({k: v for k, v in summary.items() if k != "rows"}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
