"""The GPU path as a user meets it (issue 60): a slice of the paper's grid launched in
trial arrays, stopped with Ctrl-C (SIGINT) mid-run, resumed, and reported, through
the real command line.

    python bench/gpu_path.py [--fuse 4] [--seeds 4] [--samples 16384] [--eval-every 4096]
        [--val-samples 500] [--warmup-samples 2048] [--storage DIR] [--out bench/results/gpu_path_<device>.json]

The slice is `sweeps/istree_grid.yaml` at retrieval n=16, 0.5M, the three architectures,
`--seeds` seeds each: one array of `--fuse` members per architecture and rate. The launch
is interrupted once every member of one array has an evaluation and before the sweep ends;
then `resume` runs it to the end and `report` writes the report. Written: `launched`,
`stopped`, `resumed`, `reported`, each true only where seen (the command's exit status and
the run directory's states), and each member's evaluations (the samples of its evaluated
rows on its timeline, as status and report read them) against those its budget promises,
so that a lost or doubled evaluation shows. Runs on a CPU too (`--device cpu` shrinks
nothing: pass smaller figures).
"""

import argparse
import json
import platform
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from orchestrator.rundir import load_trials, read_results  # noqa: E402
from orchestrator.rundir.rows import parse_rows  # noqa: E402


def slice_spec(args) -> dict:
    spec = yaml.safe_load((ROOT / "sweeps" / "istree_grid.yaml").read_text())
    spec.update(name=args.name, axes=dict(archs=args.archs, setups=[args.setup], sizes=[args.size], n=[args.n],
                                          seeds=list(range(args.seeds))))
    spec["training"].update(samples=args.samples, eval_every=args.eval_every, val_samples=args.val_samples,
                            warmup_samples=args.warmup_samples)
    spec["resources"].update(fuse=args.fuse, device=args.device)
    if args.device == "cpu":
        spec["resources"].update(cpus_per_trial=1)
    return spec


def cli(*words: str, temp_dir: str) -> list[str]:
    return [sys.executable, "-m", "orchestrator.cli", *words, "--temp-dir", temp_dir]


def states(run: Path):
    """Each trial's state by name (empty where the run directory holds none)."""
    trials = load_trials(run) if run.is_dir() else None
    return trials.set_index("trial")["state"] if trials is not None and "trial" in trials else None


def evaluations(run: Path) -> dict[str, list[int]]:
    trials = load_trials(run) if run.is_dir() else {"trial": []}
    return {name: [r["samples"] for r in read_results(run / name) if r.get("evaluated", True)]
            for name in trials["trial"]}


def _stop_mid_run(proc, run: Path, fuse: int, timeout: float, log) -> dict:
    """Waits until `fuse` members hold an evaluation and some member is unfinished, then SIGINT."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        counts = {}
        if run.is_dir():
            for result in run.glob("*/result.json"):
                rows = parse_rows(result.read_text())
                counts[result.parent.name] = (sum(bool(r.get("evaluated", True)) for r in rows),
                                              any(r.get("final_eval") for r in rows))
        evaluated = [name for name, (n, _) in counts.items() if n >= 1]
        if len(evaluated) >= fuse:
            proc.send_signal(signal.SIGINT)
            log(f"SIGINT with {len(evaluated)} member(s) evaluated, "
                f"{sum(done for _, done in counts.values())} finished")
            return dict(members_evaluated_at_stop=len(evaluated),
                        members_finished_at_stop=sum(done for _, done in counts.values()))
        time.sleep(0.2)
    return {}


def _arguments():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--name", default="gpu_path")
    ap.add_argument("--archs", nargs="+", default=["transformer", "mamba", "hybrid"])
    ap.add_argument("--setup", default="retrieval")
    ap.add_argument("--size", default="0.5M")
    ap.add_argument("--n", type=int, default=16)
    ap.add_argument("--seeds", type=int, default=4)
    ap.add_argument("--fuse", type=int, default=4)
    ap.add_argument("--samples", type=int, default=16384)
    ap.add_argument("--eval-every", type=int, default=4096)
    ap.add_argument("--val-samples", type=int, default=500)
    ap.add_argument("--warmup-samples", type=int, default=2048)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--storage", default=None)
    ap.add_argument("--timeout", type=float, default=600, help="seconds each command may take")
    ap.add_argument("--out", default=None)
    return ap.parse_args()


class Record:
    """The figures, written after every phase: a run cut short (a device call's time
    limit) keeps what it saw, each flag false where its phase was not seen to end."""

    def __init__(self, args, device: str):
        self.work = Path(tempfile.mkdtemp(prefix="gpu_path-"))
        self.run = (Path(args.storage) if args.storage else self.work / "runs") / args.name
        self.target = Path(args.out or ROOT / f"bench/results/gpu_path_{device.replace(' ', '_')}.json")
        self.started = time.monotonic()
        self.data = dict(device=device, host=platform.node(), date=time.strftime("%Y-%m-%d"), torch=torch.__version__,
                         spec=slice_spec(args), launched=False, stopped=False, resumed=False, reported=False,
                         console=[], logs=str(self.work))

    def log(self, line: str) -> None:
        line = f"[{time.monotonic() - self.started:7.1f} s] {line}"
        self.data["console"].append(line)
        print(line, flush=True)

    def write(self, **figures) -> None:
        self.data.update(figures)
        self.target.parent.mkdir(parents=True, exist_ok=True)
        self.target.write_text(json.dumps(self.data, indent=1) + "\n")


def _launch_and_stop(args, rec: Record, temp_dir: str) -> bool:
    spec_path = rec.work / f"{args.name}.yaml"
    spec_path.write_text(yaml.safe_dump(slice_spec(args)))
    t0 = time.monotonic()
    proc = subprocess.Popen(cli("launch", str(spec_path), "--storage", str(rec.run.parent), temp_dir=temp_dir),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    at_stop = _stop_mid_run(proc, rec.run, args.fuse, args.timeout, rec.log)
    text, _ = proc.communicate(timeout=args.timeout)
    (rec.work / "launch.log").write_text(text)
    found = states(rec.run)
    launched = found is not None and bool((found != "pending").any())
    rec.write(**at_stop, launch_exit=proc.returncode, launch_seconds=round(time.monotonic() - t0, 1),
              launched=launched, states_after_stop={} if found is None else found.value_counts().to_dict(),
              evaluations_at_stop=evaluations(rec.run),
              stopped=(proc.returncode == 130 and f"icr-sweep resume {rec.run}" in text and found is not None
                       and not (found == "finished").all()))
    rec.log(f"launch: exit {proc.returncode}, states {rec.data['states_after_stop']}")
    return launched


def _resume_and_report(args, rec: Record, temp_dir: str) -> None:
    t0 = time.monotonic()
    result = subprocess.run(cli("resume", str(rec.run), temp_dir=temp_dir), capture_output=True, text=True,
                            timeout=args.timeout)
    (rec.work / "resume.log").write_text(result.stdout + result.stderr)
    found = states(rec.run)
    rec.write(resume_exit=result.returncode, resume_seconds=round(time.monotonic() - t0, 1),
              states_after_resume={} if found is None else found.value_counts().to_dict(),
              resumed=rec.data["stopped"] and result.returncode == 0 and found is not None
              and bool((found == "finished").all()))
    rec.log(f"resume: exit {result.returncode}, states {rec.data['states_after_resume']}")
    result = subprocess.run([sys.executable, "-m", "orchestrator.cli", "report", str(rec.run)], capture_output=True,
                            text=True, timeout=args.timeout)
    (rec.work / "report.log").write_text(result.stdout + result.stderr)
    rec.write(report_exit=result.returncode, reported=result.returncode == 0 and (rec.run / "report.md").is_file())
    rec.log(f"report: exit {result.returncode}, report.md {'written' if rec.data['reported'] else 'missing'}")


def _count(args, rec: Record) -> None:
    """Each member's evaluations on its timeline against those its budget promises."""
    promised = list(range(args.eval_every, args.samples + 1, args.eval_every))
    found = evaluations(rec.run)
    rec.write(evaluations_promised=promised, evaluations=found, members=len(found),
              every_evaluation_once=len(found) == len(args.archs) * args.seeds
              and all(samples == promised for samples in found.values()),
              raw_rows_per_member={name: len(parse_rows((rec.run / name / "result.json").read_text()))
                                   for name in found if (rec.run / name / "result.json").exists()})
    rec.log(f"{rec.data['members']} members, every evaluation once: {rec.data['every_evaluation_once']}")


def main():
    args = _arguments()
    device = torch.cuda.get_device_name() if args.device != "cpu" and torch.cuda.is_available() else "cpu"
    rec = Record(args, device)
    rec.write()
    temp_dir = str(rec.work / "ray")
    if _launch_and_stop(args, rec, temp_dir):
        _resume_and_report(args, rec, temp_dir)
        _count(args, rec)
    print(f"wrote {rec.target}")
    for log in sorted(rec.work.glob("*.log")):
        print(f"--- {log.name} (tail)\n" + "\n".join(log.read_text().splitlines()[-15:]))


if __name__ == "__main__":
    main()
