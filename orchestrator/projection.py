"""A spec's projected wall time from measured trial rates.

bench/bench_sweep.py runs a slice of a grid through the real launch path and
writes, per trial class (arch, size, setup, n), the samples per second a trial
trained at while packed as the sweep packs it, and the share of a device it held
(a GPU fraction, or CPUs). A trial's time is its samples over its class's rate;
the sweep keeps its devices full, so its wall time is the sum of trial times
weighted by their shares over the devices there are, and never less than its
longest trial. A class the bench did not run takes the tokens per second of the
nearest measured class of the same arch (same size and setup first) over its own
sample length: a lower bound for attention, whose cost grows faster than length.
A trial that runs in a trial array of K members (resources.fuse) takes its class's
rate measured in arrays of K (a member's samples per second; the array's share
split among its members) where the bench measured one (`bench_sweep.py --fuse K`),
else its rate alone: counted as a separate trial, which the projection says.
"""

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from pydantic import BaseModel, ConfigDict, Field, ValidationError

RESULTS_DIR = Path(__file__).resolve().parents[1] / "bench" / "results"


def rates_file(device: str) -> Path:
    """Where bench_sweep.py writes the rates of `device` (a GPU's name, or cpu)."""
    return RESULTS_DIR / f"sweep_{device.replace(' ', '_')}.json"


@dataclass
class Projection:
    seconds: float  # the sweep's wall time
    trial_seconds: float  # all trials' times added up
    longest: float  # the longest trial's time
    measured: int  # trials whose class was measured
    scaled: list[str] = field(default_factory=list)  # 'class <- measured class' for the others
    alone: list[str] = field(default_factory=list)  # classes in arrays projected at their rate alone

    def describe(self) -> str:
        alone = f"; {len(self.alone)} classes in arrays at their rate alone" if self.alone else ""
        return (f"{format_duration(self.seconds)} ({self.measured} trials at measured rates, {len(self.scaled)} "
                f"scaled{alone})")


def format_duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


class RateClass(BaseModel):
    """One trial class the bench measured (the fields `project` reads)."""

    model_config = ConfigDict(extra="allow", allow_inf_nan=False)
    arch: str
    size: str
    setup: str
    n: int = Field(gt=0)
    samples_per_s: float = Field(gt=0)
    tokens_per_sample: float = Field(gt=0)
    longest_sample: int = Field(gt=0)
    members: int = Field(1, ge=1)  # measured in trial arrays of this many members (a member's rate)


class RatesRecord(BaseModel):
    """What bench/bench_sweep.py writes: the device measured and its classes."""

    model_config = ConfigDict(extra="allow")
    device: str = Field(min_length=1)
    classes: list[RateClass] = Field(min_length=1)
    # the measured GPU's memory in GB: a spec's `gpu_memory_gb: auto` packs against it
    # when plan projects for that device from another machine
    gpu_memory_gb: Optional[float] = Field(None, gt=0, allow_inf_nan=False)


class RatesError(ValueError):
    """A rates file that cannot be projected from; the message names the file, the field and the value."""


def load_rates(path: Path) -> Optional[RatesRecord]:
    """The bench's record, checked as a spec is; None where there is no file."""
    try:
        data = json.loads(Path(path).read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        raise RatesError(f"{path}: not a rates file of bench/bench_sweep.py ({type(e).__name__}: {e})") from None
    try:
        return RatesRecord.model_validate(data)
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(map(str, first["loc"])) or "the file"
        raise RatesError(f"{path}: {where}: {first['msg']} (got {json.dumps(first.get('input'))[:80]})") from None


def _key(arch, size, setup, n, members=1) -> tuple:
    return (str(arch), str(size), str(setup), int(n), int(members))


def project(trials: list[dict], classes: list[dict], devices: float) -> Projection:
    """`trials`: {arch, size, setup, n, samples, share, longest_sample, members}
    each (members: its array's, 1 alone; share: its own, an array's split among
    its members); `classes`: the bench's rows ({arch, size, setup, n, members,
    samples_per_s, tokens_per_sample}); `devices`: GPUs (shares are fractions of
    one) or CPUs (shares are CPUs)."""
    classes = [c.model_dump() if isinstance(c, BaseModel) else c for c in classes]
    measured = {_key(c["arch"], c["size"], c["setup"], c["n"], c.get("members", 1)): c
                for c in classes if c.get("samples_per_s")}
    total = weighted = longest = 0.0
    scaled, alone, exact = [], [], 0
    for t in trials:
        key = _key(t["arch"], t["size"], t["setup"], t["n"], t.get("members", 1))
        if key not in measured and key[4] > 1 and key[:4] + (1,) in measured:
            alone.append(f"{'-'.join(map(str, key[:4]))} in arrays of {key[4]}")
            key = key[:4] + (1,)
        row = measured.get(key)
        if row is not None:
            rate = row["samples_per_s"]
            exact += 1
        else:
            same_arch = [c for k, c in measured.items() if k[0] == key[0] and k[4] == key[4]]
            if not same_arch and key[4] > 1:  # no array of K measured for the arch: its rates alone
                alone.append(f"{'-'.join(map(str, key[:4]))} in arrays of {key[4]}")
                key = key[:4] + (1,)
                same_arch = [c for k, c in measured.items() if k[0] == key[0] and k[4] == 1]
            if not same_arch:
                raise ValueError(f"no measured rate for {key[0]}; the bench ran {sorted({k[0] for k in measured})}")
            near = min(same_arch, key=lambda c: (c["size"] != key[1], c["setup"] != key[2], abs(math.log(c["n"] / key[3]))))
            tokens_per_s = near["samples_per_s"] * near["tokens_per_sample"]
            rate = tokens_per_s / (near["tokens_per_sample"] * t["longest_sample"] / near["longest_sample"])
            scaled.append(f"{'-'.join(map(str, key[:4]))} <- {near['arch']}-{near['size']}-{near['setup']}-{near['n']}")
        seconds = t["samples"] / rate
        total += seconds
        # at its rate alone, a trial of an array is counted as a separate trial, with a lone trial's share
        weighted += seconds * (t["share"] if key[4] == t.get("members", 1) else t.get("share_alone", t["share"]))
        longest = max(longest, seconds)
    return Projection(seconds=max(weighted / devices, longest), trial_seconds=total, longest=longest,
                      measured=exact, scaled=list(dict.fromkeys(scaled)), alone=list(dict.fromkeys(alone)))


def spec_trials(spec, on_gpu: bool) -> list[dict]:
    """The trials of a spec as `project` takes them (an Optuna spec: each cell's
    budget of trials, `cell_budget`), each with its share: its GPU fraction, or its
    CPUs (in a trial array: its array's split among its members, and its share alone)."""
    from orchestrator.grid import cell_budget, cells, shape_trials
    from orchestrator.packing import gpu_share

    from orchestrator.arrays import arrays, members_per_array
    from workloads.config import TrialConfig

    shapes = shape_trials(spec)
    counts = [1] * len(shapes) if spec.search.method == "grid" else [cell_budget(spec, c) for c in cells(spec)]
    configs = [t.model_dump(mode="json") for t, count in zip(shapes, counts) for _ in range(count)]
    out = []
    for array in arrays(configs, members_per_array(spec.resources, on_gpu, shapes)):
        k, t = len(array["members"]), TrialConfig.model_validate(array["members"][0])
        alone = gpu_share(spec.resources, t)[0] if on_gpu else spec.resources.cpus_per_trial
        share = (gpu_share(spec.resources, t, members=k)[0] if on_gpu else spec.resources.cpus_per_trial) / k
        row = dict(arch=t.model.arch, size=t.model.size, setup=t.setup, n=t.task.n, samples=t.train.samples,
                   share=share, share_alone=alone, longest_sample=t.task.longest_sample, members=k)
        out += [row] * k
    return out
