"""The newer RNNs' learning tests on one thread against two: core-seconds, wall
seconds and the accuracy each reaches (the suite's CPU, issue 82).

    python bench/learning_threads.py [--out bench/results/learning_tests_threads.json] [--archs A ...]

Each arch's trial of tests/workloads/test_train.py (NEWER_RNN_BUDGET) runs in a
process of its own, two threads then one, alternated; run nothing else meanwhile.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

ONE = """
import json, resource, sys, time
from workloads.threads import bound_threads
bound_threads(int(sys.argv[2]))
from tests.workloads.test_train import NEWER_RNN_BUDGET
from workloads.config import trial_config
from workloads.tasks.mqar import MQARConfig
from workloads.train import run_trial
(pairs, vocab, seq_len), lr, samples, batch_size, warmup = NEWER_RNN_BUDGET[sys.argv[1]]
samples = int(sys.argv[3]) or samples
warmup = min(warmup, samples // 2)  # a smoke run's fewer samples
config = trial_config(sys.argv[1], "tiny", MQARConfig(n=pairs, vocab=vocab, seq_len=seq_len), lr=lr, samples=samples,
                      batch_size=batch_size, warmup_samples=warmup, eval_every=samples, val_samples=500, device="cpu")
start, before = time.time(), resource.getrusage(resource.RUSAGE_SELF)
metrics = run_trial(config)
after = resource.getrusage(resource.RUSAGE_SELF)
cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
print(json.dumps({"arch": sys.argv[1], "threads": int(sys.argv[2]), "acc": round(metrics["val_token_accuracy"], 4),
                  "core_s": round(cpu, 1), "wall_s": round(time.time() - start, 1)}))
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "learning_tests_threads.json")
    parser.add_argument("--archs", nargs="+", help="these archs of NEWER_RNN_BUDGET alone (default: every one)")
    parser.add_argument("--samples", type=int, default=0, help="train this many samples instead (a smoke run)")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    from tests.workloads.test_train import NEWER_RNN_BUDGET

    runs = []
    for arch in args.archs or NEWER_RNN_BUDGET:
        for threads in (2, 1):
            out = subprocess.run([sys.executable, "-c", ONE, arch, str(threads), str(args.samples)], cwd=ROOT,
                                 capture_output=True, text=True, check=True,
                                 env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
            runs.append(json.loads(out.stdout.splitlines()[-1]))
            print(runs[-1], flush=True)
    total = {key: {str(k): round(sum(r[key] for r in runs if r["threads"] == k), 1) for k in (1, 2)}
             for key in ("core_s", "wall_s")}
    record = {"what": "tests/workloads/test_train.py::test_each_newer_rnn_learns_associative_recall's trials, "
                      "each alone in a process, two threads then one (torch's and numba's pools)",
              "command": "python bench/learning_threads.py", "device": f"cpu: {platform.node()}, {os.cpu_count()} cores",
              "runs": runs, "sum_core_s": total["core_s"], "sum_wall_s": total["wall_s"]}
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
