"""How trials share a GPU: each asks for a share (gpus_per_trial, or with `auto`
the smallest of 1/8, 1/4, 1/2 or 1 GPU its estimated peak memory fits), and a
share too small for its trial is a warning before anything starts."""

from __future__ import annotations

import functools
from typing import Optional

from orchestrator.grid import shape_trials
from workloads.config import TrialConfig

GPU_SHARES = (0.125, 0.25, 0.5, 1.0)  # what `gpus_per_trial: auto` chooses from
GPU_HEADROOM = 0.9  # a trial fits a share when its estimate is below 90% of it (fragmentation)
DEFAULT_GPU_MEMORY_GB = 40.0  # `gpu_memory_gb: auto` where this machine has no GPU: an A100 40 GB


def nvidia_smi(field: str) -> list[str]:
    """One `--query-gpu` field of each of this machine's GPUs, as nvidia-smi gives
    it (none without it)."""
    import shutil
    import subprocess

    if not shutil.which("nvidia-smi"):
        return []
    try:
        out = subprocess.run(["nvidia-smi", f"--query-gpu={field}", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [line.strip() for line in out.splitlines() if line.strip()]


@functools.cache
def local_gpu_memory_gb() -> Optional[float]:
    """The memory of this machine's smallest GPU in GB (GiB, as the estimates), or None."""
    sizes = [float(v) / 1024 for v in nvidia_smi("memory.total") if v.replace(".", "", 1).isdigit()]
    return min(sizes) if sizes else None


def gpu_memory_gb(resources) -> float:
    """The GPU memory a spec's trials are packed against: its `gpu_memory_gb`, or
    for auto this machine's GPU's (DEFAULT_GPU_MEMORY_GB where it has none)."""
    if resources.gpu_memory_gb != "auto":
        return resources.gpu_memory_gb
    return local_gpu_memory_gb() or DEFAULT_GPU_MEMORY_GB


def gpu_memory_said(resources, measured_on: Optional[str] = None) -> str:
    """'80 GB GPUs (resources.gpu_memory_gb...)': what trials are packed against, and
    why (`measured_on`: auto was given the memory of the GPU a rates file measured)."""
    if measured_on:
        why = f": auto, the {measured_on}'s, as its rates record"
    elif resources.gpu_memory_gb != "auto":
        why = ""
    else:
        why = ": auto, this machine's GPU" if local_gpu_memory_gb() else ": auto, and this machine has no GPU"
    return f"{gpu_memory_gb(resources):.0f} GB GPUs (resources.gpu_memory_gb{why})"


def gpu_share(resources, trial: TrialConfig, members: int = 1) -> tuple[float, float]:
    """The GPU share a trial asks for (gpus_per_trial, or auto's choice) and its
    estimated peak memory in GB, given a spec's `resources`; for an array of
    `members` such trials (orchestrator/arrays.py), the array's (workloads.memory.array_estimate)."""
    from workloads.memory import GiB, array_estimate

    need = array_estimate(trial, members).total / GiB
    share = resources.gpus_per_trial
    if share == "auto":
        room = gpu_memory_gb(resources) * GPU_HEADROOM
        share = next((s for s in GPU_SHARES if need <= s * room), 1.0)
    return share, need


def gpu_shares(spec) -> dict[str, tuple[float, float]]:
    """{trial name: gpu_share(...)} for each of `shape_trials(spec)`."""
    return {t.name: gpu_share(spec.resources, t) for t in shape_trials(spec)}


def memory_warnings(gpu_memory_gb: float, shares: dict[str, tuple[float, float]]) -> list[str]:
    """Trials whose estimated peak memory exceeds their share of a GPU of
    `gpu_memory_gb`, given {name: (share, need)} as gpu_shares gives it."""
    out = []
    for name, (share, need) in shares.items():
        if need > share * gpu_memory_gb * GPU_HEADROOM:
            fix = "more than one GPU holds: lower training.batch_size" if need > gpu_memory_gb * GPU_HEADROOM else \
                "raise resources.gpus_per_trial (or set it to auto)"
            out.append(f"{name} needs about {need:.1f} GB, more than its {share:g} of a {gpu_memory_gb:g} GB GPU "
                       f"({share * gpu_memory_gb:.1f} GB): it would run out of GPU memory; {fix}")
    return out
