"""A trial's checkpoint as stored: its file, how it is read, and whether a config
may continue it. The run directory's owner (orchestrator/rundir) reads checkpoints
through this module, without the trainer; torch is imported only to read one.
The trainer (workloads/train.py) writes them."""

from pathlib import Path
from typing import Optional

from pydantic import ValidationError

from workloads.config import TrialConfig

CHECKPOINT_FILE = "checkpoint.pt"


class CheckpointError(ValueError):
    """A checkpoint that cannot be continued; the message names the file and what to do."""


class DiskSpaceError(OSError):
    """Too little room for a checkpoint; the message names the folder."""


def read_checkpoint(path: Path) -> dict:
    """The checkpoint at `path`, loaded to the CPU (RNG states must stay CPU byte
    tensors; load_state_dict moves the rest to the model's device), or
    CheckpointError naming the file and what is wrong with it."""
    import torch

    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
        if not isinstance(state, dict) or not {"config", "model", "optimizer"} <= set(state):
            raise ValueError("it is not a checkpoint of icr-sweep")
    except Exception as e:  # missing, truncated, empty or foreign bytes fail in many ways
        raise CheckpointError(f"{path} cannot be read ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})") from None
    return state


def first_intact(directories, config: TrialConfig | list[TrialConfig], say=print,
                 names: Optional[list[str]] = None) -> Optional[Path]:
    """The first of `directories` (an iterable, read lazily) whose checkpoint can be
    continued by `config`; each one passed over is said, and so is starting over
    when none can. An item that is a CheckpointError (a directory that could not be
    fetched) is passed over likewise. For a trial array, `config` lists its
    members: a directory holds a checkpoint of each in a folder named after it
    (`names`, by default their configs' names: workloads/array_train.py), and is
    intact where every one of them is."""
    configs = config if isinstance(config, list) else [config]
    names = names or [c.name for c in configs]
    name = ", ".join(names)
    tried = 0
    for directory in directories:
        tried += 1
        try:
            if isinstance(directory, CheckpointError):
                raise directory
            for member, own in zip(configs, names):
                folder = Path(directory) / own if isinstance(config, list) else Path(directory)
                state = read_checkpoint(folder / CHECKPOINT_FILE)
                if what_trains(as_today(state["config"])) != what_trains(member.model_dump(mode="json")):
                    raise CheckpointError(f"{folder} holds another config's checkpoint")
        except CheckpointError as e:
            say(f"icr-sweep: {name}: passing over a checkpoint: {e}")
            continue
        if tried > 1:
            say(f"icr-sweep: {name}: continuing from the older checkpoint in {directory}")
        return Path(directory)
    if tried:
        say(f"icr-sweep: {name}: STARTING OVER from sample 0: none of its {tried} checkpoint(s) can be read")
    return None


# Config fields that change how a trial runs, not what it computes (the same loss and
# gradients up to the order of floating-point sums): a checkpoint continues under
# other values of them (and the task label only names the trial).
_HOW_IT_RUNS = ("length_groups", "checkpoint_every_s", "cuda_graphs")


def what_trains(config: dict) -> dict:
    """A stored trial config without the fields a resume may change."""
    out = {k: v for k, v in config.items() if k != "task_label"}
    if isinstance(out.get("train"), dict):
        out["train"] = {k: v for k, v in out["train"].items() if k not in _HOW_IT_RUNS}
    return out


def differences(saved: dict, wanted: dict, prefix: str = "", held: str = "checkpoint") -> list[str]:
    """'field (checkpoint A, now B)' for every leaf where two nested configs differ;
    `held` names where the saved one is."""
    out = []
    for key in sorted(set(saved) | set(wanted)):
        a, b = saved.get(key), wanted.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            out += differences(a, b, f"{prefix}{key}.", held)
        elif a != b:
            out.append(f"{prefix}{key} ({held} {a!r}, now {b!r})")
    return out


def as_today(config: dict) -> dict:
    """A stored trial config with the fields added since it was written at their
    defaults, so that a checkpoint from before a new field still resumes; as stored
    where it no longer validates (its differences are then named)."""
    try:
        return TrialConfig.model_validate(config).model_dump(mode="json")
    except ValidationError:
        return config
