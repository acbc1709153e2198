"""Trial arrays against separate trials: aggregate training samples/s on one device.

    python bench/bench_arrays.py [--archs transformer mamba hybrid] [--setup retrieval] [--n 16 64]
        [--size 0.5M] [--k 1 4 8 16] [--min-seconds 6] [--rounds 3] [--against FILE] [--device auto]
        [--out bench/results/arrays_<device>.json]

For each architecture, n and K, side by side in one run, measured in alternation so
that machine noise hits both alike:
  - separate: K lone trials (workloads.train.Trial, its own loop: length groups,
    AdamW, LambdaLR), each stepped in turn: what K trials of one process, or K
    processes time-sliced on one GPU, do at best;
  - array: one TrialArray of the same K configs (rates and seeds differ);
  - with `--against FILE`, a third side: the TrialArray of another arrays.py (an
    earlier commit's), so that a change to the array is measured side by side.
Each side trains steps of batch 64 (after two warm-up steps) in `--rounds` rounds of
`--min-seconds` / rounds each, the sides alternating; the figure is each side's
median samples/s over its rounds, all K members counted, and `ratio` = array /
separate.
The K = 1 row measures the array's own overhead. On a GPU each timed span ends
with torch.cuda.synchronize().
"""

import gc
import importlib.util
import json
import platform
import statistics
import time
from pathlib import Path

import torch

import workloads.arrays
from step_common import array_configs, device_of, lone_run, step_arguments, step_config, sync


def _module(path: str):
    """A Python file loaded as a module of its own (the other arrays.py of `--against`)."""
    spec = importlib.util.spec_from_file_location("arrays_against", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _separate(configs):
    runs = [lone_run(config) for config in configs]

    def step():
        for run in runs:
            run.train_step()
            run.pending.clear()  # the losses' check is the loop's, every 32 steps: not timed here
        return 64 * len(runs)

    return step, runs[0].trial.device


def _array(configs, arrays=None):
    array = (arrays or workloads.arrays).TrialArray(configs)
    array.model.train()

    def step():
        array.step()
        return 64 * array.k

    return step, array.trials[0].device


def _rate(step, device, seconds):
    sync(device)
    samples, started = 0, time.perf_counter()
    while True:
        samples += step()
        sync(device)
        if time.perf_counter() - started >= seconds:
            return samples / (time.perf_counter() - started)


def _side_by_side(sides, device, min_seconds, rounds):
    """Each side's median rate over `rounds` rounds, the sides alternating."""
    for step in sides:
        for _ in range(2):
            step()
    rates = [[] for _ in sides]
    for _ in range(rounds):
        for rate, step in zip(rates, sides):
            rate.append(_rate(step, device, min_seconds / rounds))
    return [statistics.median(r) for r in rates]


def _measured(configs, args, against) -> dict:
    """Both sides' samples/s and their ratio (with `against`, a third side: the
    array of that module, and today's array over it); where the device's memory
    cannot hold them (K lone trials and an array of K, side by side), that, and the
    next row runs."""
    try:
        (separate, device), (array, _) = _separate(configs), _array(configs)
        sides = (separate, array) + ((_array(configs, against)[0],) if against else ())
        r_sep, r_arr, *r_against = _side_by_side(sides, device, args.min_seconds, args.rounds)
        row = dict(separate_samples_per_s=round(r_sep, 1), array_samples_per_s=round(r_arr, 1),
                   ratio=round(r_arr / r_sep, 3))
        if against:
            row.update(against_samples_per_s=round(r_against[0], 1), ratio_to_against=round(r_arr / r_against[0], 3))
        return row
    except torch.OutOfMemoryError as e:
        return dict(error=f"out of memory: {str(e).splitlines()[0]}")


def main():
    ap = step_arguments("Trial arrays against separate trials: aggregate samples/s on one device.")
    ap.add_argument("--k", nargs="+", type=int, default=[1, 4, 8, 16])
    ap.add_argument("--min-seconds", type=float, default=6.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--against", default=None, metavar="FILE",
                    help="another workloads/arrays.py (say an earlier commit's: "
                         "git show REV:workloads/arrays.py > FILE), its array measured as a third side")
    args = ap.parse_args()
    against = _module(args.against) if args.against else None
    device, name = device_of(args.device)
    if device.type == "cpu":
        name = f"cpu ({platform.processor() or platform.machine()}, {torch.get_num_threads()} threads)"
    out = Path(args.out or f"bench/results/arrays_{'cpu' if device.type == 'cpu' else name.replace(' ', '_')}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    command = "python bench/bench_arrays.py " + " ".join(
        f"--{k.replace('_', '-')} {' '.join(map(str, v)) if isinstance(v, list) else v}" for k, v in vars(args).items()
        if v is not None)
    rows = []
    for arch in args.archs:
        for n in args.n:
            for k in args.k:
                rows.append(dict(arch=arch, setup=args.setup, n=n, size=args.size, k=k,
                                 **_measured(array_configs(step_config(arch, args.setup, n, args.size, device.type), k),
                                             args, against)))
                print(json.dumps(rows[-1]), flush=True)
                gc.collect()  # this row's trials and arrays are gone before the next row's are built
                if torch.cuda.is_available():
                    torch.cuda.empty_cache()
                # written after every row: a run cut short keeps what it measured
                out.write_text(json.dumps({"device": name, "date": time.strftime("%Y-%m-%d"), "torch": torch.__version__,
                                           "command": command, "rows": rows}, indent=1) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
