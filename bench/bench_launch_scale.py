"""A launch's cost before its first trial, by the number of trials (issue 52, class 11).

    python bench/bench_launch_scale.py [--trials 160 640 1280 2560 10000] [--old-up-to 1280]
        [--launch 10000] [--out bench/results/launch_scale.json]

Two figures per size, from a grid of tiny trials (one arch, n from 4 up, as many
seeds as it takes):
- `handout_s`: Tune's search algorithm alone (no Ray), from the stored plan to
  the first trial Tune creates, and to every trial: the searcher of ours
  (orchestrator/planned_search.py) beside Tune's own `grid_search` over the same
  configs, the way launches ran before (side by side, up to --old-up-to trials:
  it grows with the square).
- `--launch N`: a real `icr-sweep launch` of N trials on an embedded Ray, timed
  to its first trial's params.json (the first trial started), then sent Ctrl-C
  (SIGINT to its group, as a terminal does) and timed to its exit.
"""

import argparse
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from orchestrator.grid import plan  # noqa: E402
from orchestrator.spec import SweepSpec  # noqa: E402


def big_spec(trials: int, name: str = "scale") -> dict:
    n = list(range(4, 84))
    seeds = max(1, -(-trials // len(n)))
    n = n[:max(1, min(len(n), trials))]
    return {"name": name, "axes": {"archs": ["transformer"], "setups": ["cot"], "sizes": ["tiny"], "n": n,
                                   "seeds": list(range(seeds))},
            "lr": {"transformer": 3e-3},
            "training": {"samples": 2048, "batch_size": 32, "warmup_samples": 256, "eval_every": 1024,
                         "val_samples": 64, "eval_batch_size": 64},
            "resources": {"cpus_per_trial": 1}}


def handout(trials: list[dict], old: bool) -> tuple[float, float]:
    """Seconds to Tune's first trial and to its last, from the configs."""
    from ray import tune
    from ray.tune.experiment import Experiment
    from ray.tune.search import SearchGenerator
    from ray.tune.search.basic_variant import BasicVariantGenerator

    from orchestrator.planned_search import PlannedTrials
    from workloads.config import TrialConfig

    start = time.perf_counter()
    if old:
        search, config = BasicVariantGenerator(), {"trial": tune.grid_search(trials)}
    else:
        names = [TrialConfig.model_validate(t).name for t in trials]
        search, config = SearchGenerator(PlannedTrials("trial", trials, names)), {}
    samples = 1 if old else len(trials)
    search.add_configurations([Experiment("scale", lambda c: None, config=config, num_samples=samples)])
    first, count = None, 0
    while search.next_trial() is not None:
        count += 1
        first = first or time.perf_counter() - start
    assert count == len(trials), (count, len(trials))
    return first, time.perf_counter() - start


def launch(trials: int, budget_s: float, ctrl_c_after: float | None = None) -> dict:
    """A real launch of `trials` tiny trials: seconds to its first trial's
    params.json, then Ctrl-C (or Ctrl-C `ctrl_c_after` seconds in, whatever it is
    doing then) and seconds to the driver's exit."""
    with tempfile.TemporaryDirectory() as tmp:
        spec = big_spec(trials, "scale_launch")
        spec["storage"] = str(Path(tmp, "runs"))
        path = Path(tmp, "spec.yaml")
        path.write_text(yaml.safe_dump(spec))
        run_dir = Path(tmp, "runs", "scale_launch")
        env = dict(os.environ)
        command = [sys.executable, "-m", "orchestrator.cli", "launch", str(path), "--temp-dir", str(Path(tmp, "ray"))]
        start = time.perf_counter()
        with open(Path(tmp, "log"), "w") as log:
            driver = subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env=env,
                                      start_new_session=True)
            first = None
            limit = ctrl_c_after if ctrl_c_after is not None else budget_s
            while first is None and time.perf_counter() - start < limit and driver.poll() is None:
                if ctrl_c_after is None and next(run_dir.glob("*/params.json"), None):
                    first = time.perf_counter() - start
                time.sleep(0.2)
            asked = time.perf_counter()
            os.killpg(driver.pid, signal.SIGINT)
            try:
                rc = driver.wait(timeout=budget_s)
            except subprocess.TimeoutExpired:
                os.killpg(driver.pid, signal.SIGKILL)
                rc = driver.wait()
            ended = time.perf_counter() - asked
        tail = Path(tmp, "log").read_text().splitlines()[-5:]
    return {"trials": trials, "first_trial_s": first and round(first, 1), "ctrl_c_at_s": round(asked - start, 1),
            "ctrl_c_to_exit_s": round(ended, 1), "exit_code": rc,
            "log_tail": tail}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, nargs="+", default=[160, 640, 1280, 2560, 10000])
    parser.add_argument("--old-up-to", type=int, default=1280)
    parser.add_argument("--launch", type=int, default=10000)
    parser.add_argument("--launch-budget-s", type=float, default=300)
    parser.add_argument("--ctrl-c-after", type=float, nargs="*", default=[],
                        help="more launches, each sent Ctrl-C this many seconds in")
    parser.add_argument("--out", default=str(ROOT / "bench/results/launch_scale.json"))
    args = parser.parse_args()
    rows = []
    for count in args.trials:
        spec = SweepSpec.model_validate(big_spec(count))
        start = time.perf_counter()
        trials = list(plan(spec)["trials"].values())
        row = {"trials": len(trials), "plan_s": round(time.perf_counter() - start, 2)}
        row["planned_first_s"], row["planned_all_s"] = (round(x, 2) for x in handout(trials, old=False))
        if count <= args.old_up_to:
            row["grid_search_first_s"], row["grid_search_all_s"] = (round(x, 2) for x in handout(trials, old=True))
        print(row, flush=True)
        rows.append(row)
    result = {"machine": f"{platform.node()} ({os.cpu_count()} CPUs)", "handout": rows}
    if args.launch:
        result["launch"] = launch(args.launch, args.launch_budget_s)
        print(result["launch"], flush=True)
        result["ctrl_c"] = [launch(args.launch, args.launch_budget_s, after) for after in args.ctrl_c_after]
        for row in result["ctrl_c"]:
            print(row, flush=True)
    Path(args.out).write_text(json.dumps(result, indent=1))
    print(f"written: {args.out}")


if __name__ == "__main__":
    main()
