"""Trial arrays on Ray Tune (issue 50): the planned trials that differ only in
learning rate and seed (`array_key`) are grouped, at most `resources.fuse` to a
group, and each group runs as one Tune trial (Ray Tune runs one trial per
process: ray-project/ray#20563), whose worker trains them as one model
(workloads/array_train.py). Its Tune config is {"array": {"name", "members"}};
its directory holds its checkpoints (a folder per member in each), while every
member keeps its own trial directory, named as it would be alone, with its
params.json, rows and errors: status, report, load_run and the trackers see the
members as ordinary trials. How many members an array gets is the spec's
`resources.fuse`; `auto` resolves here."""

from __future__ import annotations

import json
from typing import Optional

from workloads.config import TrialConfig
from workloads.naming import ARRAY_PREFIX  # an array's directory: array-<its first member's name>

ARRAY_KEY = "array"  # a Tune config's key for an array (a lone trial's is "trial")
MOST_MEMBERS = 16  # auto's cap: the largest array the device check measures (bench/gpu_check.sh)


def members_per_array(resources_spec, on_gpu: bool, trials: list[TrialConfig]) -> int:
    """How many members an array may hold: the spec's `fuse`, or for `auto`, on a
    GPU, as many as one GPU holds (with packing's headroom) by every trial's array
    estimate (workloads.memory.array_estimate), at most MOST_MEMBERS; on CPU 1, where arrays measured
    slower (bench/results/arrays_cpu.json)."""
    fuse = resources_spec.fuse
    if fuse != "auto":
        return fuse
    if not on_gpu or not trials:
        return 1
    from orchestrator.packing import GPU_HEADROOM, gpu_memory_gb
    from workloads.memory import GiB, array_estimate

    room = gpu_memory_gb(resources_spec) * GPU_HEADROOM * GiB
    fits = [k for k in range(1, MOST_MEMBERS + 1) if all(array_estimate(t, k).total <= room for t in trials)]
    return max(fits, default=1)


def arrays(trials: list[dict], fuse: int) -> list[dict]:
    """The arrays of `trials` (stored trial configs, in the plan's order), each
    {"name": ..., "members": [configs]}: trials of one `array_key` in groups of at
    most `fuse`, as even as they split (7 at fuse 4: 4 and 3). A group of one
    is an array too (its worker trains it as a lone trial): a sweep's trials are
    all lone or all arrays, which keeps one Tune config key per sweep."""
    from workloads.arrays import array_key

    groups: dict[str, list[dict]] = {}
    for trial in trials:
        groups.setdefault(json.dumps(array_key(TrialConfig.model_validate(trial)), sort_keys=True), []).append(trial)
    out = []
    for members in groups.values():
        count = -(-len(members) // fuse)  # ceil
        size, extra = divmod(len(members), count)
        start = 0
        for i in range(count):
            part = members[start:start + size + (i < extra)]
            start += len(part)
            out.append({"name": ARRAY_PREFIX + TrialConfig.model_validate(part[0]).name, "members": part})
    return out


def array_of(config: dict) -> Optional[dict]:
    """The array a Tune config runs ({"name", "members"}), None for a lone trial."""
    array = config.get(ARRAY_KEY) if isinstance(config, dict) else None
    return array if isinstance(array, dict) and isinstance(array.get("members"), list) else None


def member_names(array: dict) -> list[str]:
    """The members' trial names: the array's `names` (an Optuna trial's is its rate
    to three significant digits), else their configs' names."""
    names = array.get("names")
    if isinstance(names, list) and len(names) == len(array["members"]):
        return names
    return [TrialConfig.model_validate(m).name for m in array["members"]]

