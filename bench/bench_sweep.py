"""A slice of a grid through the real launch path (Ray, packing, evaluation,
checkpoints) for a fixed wall time: rates per trial class and the grids' projected time.

    python bench/bench_sweep.py [--spec sweeps/istree_grid.yaml] [--archs ...] [--setups cot retrieval]
        [--sizes 0.5M] [--n 16 64] [--seconds 600] [--eval-every 20000] [--val-samples 500]
        [--device cuda|cpu] [--cpus N] [--fuse K] [--set FIELD=VALUE ...]
        [--project sweeps/istree_grid.yaml sweeps/istree_grid_1m.yaml] [--out bench/results/sweep_<device>.json]

The slice is the spec with its axes narrowed (default: the 12 trials of issue 19,
3 archs x CoT and retrieval x n 16 and 64 at 0.5M), evaluated more often so that
every trial reports within the window (--eval-every, --val-samples), launched with
`icr-sweep launch` on an embedded Ray, and stopped with Ctrl-C's signal after
--seconds. From each trial's result.json: samples done, the samples per second it
trained at (packed beside the others; evaluation excluded) and its wall rate
(evaluation included). Per class (arch, size, setup, n, and with --fuse K the
members of its arrays: a member's rate) their mean; the aggregate
is every trial's samples over the window, per GPU (or for the CPUs given). The
rates then project the wall time of each --project spec on this machine
(orchestrator/projection.py; `icr-sweep plan` does the same from this file).
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from orchestrator.projection import format_duration, project, rates_file, spec_trials  # noqa: E402
from orchestrator.rundir import read_results  # noqa: E402
from orchestrator.spec import load_spec  # noqa: E402


def device_name(device: str) -> str:
    if device == "cpu":
        return "cpu"
    import torch

    if not torch.cuda.is_available():
        raise SystemExit("no CUDA GPU here; --device cpu runs this bench's code path on CPU")
    return torch.cuda.get_device_name(0)


def slice_spec(args, storage: Path) -> Path:
    data = yaml.safe_load(Path(args.spec).read_text())
    axes = data.setdefault("axes", {})
    for key in ("archs", "setups", "sizes", "n"):
        value = getattr(args, key)
        if value:
            axes[key] = [int(v) for v in value] if key == "n" else value
    if args.n:  # a rule for an n the slice leaves out applies to nothing, and a spec refuses it
        data["training_overrides"] = [rule for rule in data.get("training_overrides", [])
                                      if "n" not in rule or set(rule["n"]) & {int(v) for v in args.n}]
    training = data.setdefault("training", {})
    training.update(eval_every=args.eval_every, val_samples=args.val_samples)
    training["samples"] = max(training.get("samples", 1_000_000), 10 * args.eval_every)
    resources = data.setdefault("resources", {})
    if args.device == "cpu":
        resources["device"] = "cpu"
        resources["gpus_per_trial"] = 1
    if args.cpus_per_trial:
        resources["cpus_per_trial"] = args.cpus_per_trial
    if args.fuse:
        resources["fuse"] = args.fuse
    for setting in args.set or []:
        path, _, value = setting.partition("=")
        *parents, key = path.split(".")
        folder = data
        for part in parents:
            folder = folder.setdefault(part, {})
        folder[key] = yaml.safe_load(value)
    data.update(name="bench_sweep", storage=str(storage))
    path = storage / "bench_sweep.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def run_window(spec_path: Path, seconds: float, cpus) -> float:
    """Launches the slice, stops it after `seconds` as Ctrl-C does; returns the wall time."""
    command = [str(Path(sys.executable).parent / "icr-sweep"), "launch", str(spec_path)]
    if cpus:
        command += ["--num-cpus", str(cpus)]
    log = open(spec_path.parent / "launch.log", "wb")
    started = time.perf_counter()
    driver = subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        driver.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        os.killpg(driver.pid, signal.SIGINT)
        try:
            driver.wait(timeout=180)
        except subprocess.TimeoutExpired:
            os.killpg(driver.pid, signal.SIGKILL)
            driver.wait()
    return min(time.perf_counter() - started, seconds)


def trial_rows(run_dir: Path) -> list[dict]:
    rows = []
    for result in sorted(run_dir.glob("*/result.json")):
        results = read_results(result.parent)
        if not results:
            continue
        last = results[-1]
        params = json.loads((result.parent / "params.json").read_text())
        config = params["trial"]
        task = config["task"]
        setup = "-".join(filter(None, [task["setup"], config.get("task_label", "")]))
        rows.append(dict(trial=result.parent.name, arch=config["model"]["arch"], size=config["model"]["size"],
                         setup=setup, n=task["n"], samples=last["samples"],
                         samples_per_s=last["samples_per_s"], tokens_per_s=last["tokens_per_s"],
                         wall_samples_per_s=last["samples"] / last["time_total_s"],
                         share=last.get("gpu_share") or None, longest_sample=None, array=params.get("array"),
                         step_used=last.get("step_used")))
    for row in rows:  # a member of a trial array (--fuse): the members of its array
        row["members"] = sum(1 for other in rows if row["array"] and other["array"] == row["array"]) or 1
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--spec", default="sweeps/istree_grid.yaml")
    parser.add_argument("--archs", nargs="+")
    parser.add_argument("--setups", nargs="+", default=["cot", "retrieval"])
    parser.add_argument("--sizes", nargs="+", default=["0.5M"])
    parser.add_argument("--n", nargs="+", default=["16", "64"])
    parser.add_argument("--seconds", type=float, default=600)
    parser.add_argument("--eval-every", type=int, default=20_000)
    parser.add_argument("--val-samples", type=int, default=500)
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    parser.add_argument("--cpus", type=int, help="CPUs of the embedded Ray (default: all)")
    parser.add_argument("--cpus-per-trial", type=float)
    parser.add_argument("--fuse", type=int, help="resources.fuse of the slice: rates of members of trial arrays")
    parser.add_argument("--gpus", type=float, default=1.0, help="GPUs the projection runs the grids on")
    parser.add_argument("--project", nargs="*", default=["sweeps/istree_grid.yaml", "sweeps/istree_grid_1m.yaml"])
    parser.add_argument("--set", action="append", metavar="FIELD=VALUE",
                        help="a field of the slice's spec by its path, its value as YAML (resources.mps=on, "
                        "training.cuda_graphs=on); again for more")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    name = device_name(args.device)
    with tempfile.TemporaryDirectory(prefix="icr-bench-sweep-") as tmp:
        spec_path = slice_spec(args, Path(tmp))
        spec = load_spec(spec_path)
        wall = run_window(spec_path, args.seconds, args.cpus)
        trials = trial_rows(Path(tmp) / "bench_sweep")
        log_tail = (Path(tmp) / "launch.log").read_text(errors="replace")[-3000:]
    if not trials:
        raise SystemExit(f"no trial reported within {args.seconds:g} s; the driver's log ended with:\n{log_tail}")
    lengths = {(t["arch"], t["size"], t["setup"], t["n"]): t for t in spec_trials(spec, args.device == "cuda")}
    classes = {}
    for row in trials:
        key = (row["arch"], row["size"], row["setup"], row["n"])
        row["longest_sample"] = lengths[key]["longest_sample"]
        row["share"] = lengths[key]["share"]
        classes.setdefault(key + (row["members"],), []).append(row)
    class_rows = []
    for key, rows in classes.items():
        rate = sum(r["samples_per_s"] for r in rows) / len(rows)
        tokens = sum(r["tokens_per_s"] for r in rows) / len(rows)
        class_rows.append(dict(arch=key[0], size=key[1], setup=key[2], n=key[3], members=key[4], trials=len(rows),
                               samples_per_s=round(rate, 2),
                               tokens_per_s=round(tokens), tokens_per_sample=round(tokens / rate, 1),
                               wall_samples_per_s=round(sum(r["wall_samples_per_s"] for r in rows) / len(rows), 2),
                               share=rows[0]["share"], longest_sample=rows[0]["longest_sample"]))
    capacity = args.gpus if args.device == "cuda" else (args.cpus or os.cpu_count())
    aggregate = sum(r["samples"] for r in trials) / wall
    projections = {}
    for path in args.project:
        target = load_spec(path)
        if args.device == "cpu":
            target = target.model_copy(update={"resources": spec.resources})
        try:
            p = project(spec_trials(target, args.device == "cuda"), class_rows, capacity)
        except ValueError as e:
            projections[path] = dict(error=str(e))
            print(f"{path}: not projected: {e}", flush=True)
            continue
        projections[path] = dict(hours=round(p.seconds / 3600, 3), trials_measured=p.measured, scaled=p.scaled)
        print(f"{path}: {p.describe()} on {capacity:g} {'GPU' if args.device == 'cuda' else 'CPU'}", flush=True)
    silent = sorted({(t["arch"], t["size"], t["setup"], t["n"]) for t in spec_trials(spec, args.device == "cuda")}
                    - {key[:4] for key in classes})
    if silent:
        print(f"warning: {len(silent)} classes of the slice did not report within {args.seconds:g} s "
              f"(not started, or no evaluation yet): {', '.join('-'.join(map(str, k)) for k in silent)}", flush=True)
    from orchestrator.packing import local_gpu_memory_gb

    memory = local_gpu_memory_gb() if args.device == "cuda" else None
    record = dict(device=name, **({"gpu_memory_gb": round(memory, 1)} if memory else {}),
                  slice=spec.model_dump(mode="json")["axes"], settings=args.set or [], seconds=round(wall, 1),
                  trials_reported=len(trials), aggregate_samples_per_s=round(aggregate, 2),
                  aggregate_per=f"{capacity:g} {'GPU' if args.device == 'cuda' else 'CPU'}",
                  classes=class_rows, trials=trials, projections=projections)
    out = args.out or rates_file(name)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, indent=1))
    print(json.dumps({k: record[k] for k in ("device", "seconds", "trials_reported", "aggregate_samples_per_s")}))
    print(f"wrote {out}; projected: " + "; ".join(f"{k} {format_duration(v['hours'] * 3600)}"
                                                   for k, v in projections.items() if "hours" in v))


if __name__ == "__main__":
    main()
