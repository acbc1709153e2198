"""How trials, grid cells and variants are named: one rule, read by the trial's
config, the spec's grid, `train`, `plan` and the Optuna studies.

A trial: [task-]arch-setup[-task fields]-size[-model fields]-n<n>-lr<lr>-s<seed>,
transformer-cot-0.5M-n32-lr1e-3-s0 or mqar-mamba-vanilla-seqlen64-tiny-dstate4-n8-lr3e-4-s0
(the paper's task, istree, is not prefixed). Its cell is the same without the
task and the learning rate: the trials that only the rate tells apart. A trial
array (orchestrator/arrays.py) is named after its first member: array-<its name>."""

import re

ARRAY_PREFIX = "array-"
# What trial_name writes: ...-n<n>-lr<rate>-s<seed> (a run directory's trial folders are named so)
TRIAL_NAME = re.compile(r".+-n\d+-lr[0-9.e+-]+-s\d+")


def field_label(fields: dict) -> str:
    """The suffix of a variant: each field's name without underscores, then its
    value (d_state=4, expand=1 -> dstate4-expand1)."""
    return "-".join(f"{k.replace('_', '')}{v}" for k, v in fields.items())


def joined(*parts: str) -> str:
    """The non-empty parts, joined by '-' (a size and its variant's label)."""
    return "-".join(filter(None, parts))


def preset_of(size: str) -> str:
    """The preset size a size label varies (tiny-dmodel16 -> tiny; 0.5M -> 0.5M):
    what `joined(size, field_label(...))` was given."""
    return str(size).partition("-")[0]


def model_label(arch: str, size: str) -> str:
    """A model as every table and tracker names it: its arch, and its size where that
    is a variant of a preset (mamba (tiny-dstate1-nlayers4)), so that the variants
    of one arch never fold into one (issue 53: a notebook's groupby on arch averaged
    the two Mambas of the laptop run)."""
    return str(arch) if preset_of(size) == str(size) else f"{arch} ({size})"


def short_float(value: float) -> str:
    """1e-3, 3e-4, 1.2345e-3: the fewest digits (at least three) that give `value`
    back exactly, so that two learning rates never share a trial name."""
    return next((text for text in (significant(value, d) for d in range(3, 18)) if float(text) == value),
                significant(value, 17))


def significant(value: float, digits: int) -> str:
    """`value` rounded to `digits` significant digits, written as short_float writes
    (3.54e-3, 1e-3): an Optuna trial's rate in its name."""
    mantissa, exponent = f"{value:.{digits - 1}e}".split("e")
    if "." in mantissa:
        mantissa = mantissa.rstrip("0").rstrip(".")
    return f"{mantissa}e{int(exponent)}"


def cell_name(arch: str, setup: str, size: str, n: int, seed: int) -> str:
    """A grid cell: mamba-cot-0.5M-n16-s0 (`plan`'s list, an Optuna study's name)."""
    return f"{arch}-{setup}-{size}-n{n}-s{seed}"


def trial_name(task: str, arch: str, setup: str, size: str, n: int, seed: int, lr: float | str, paper_task: str) -> str:
    """A trial: its cell with the learning rate (a float written exactly, or the text
    given), and the task unless it is the paper's."""
    prefix = "" if task == paper_task else f"{task}-"
    return f"{prefix}{arch}-{setup}-{size}-n{n}-lr{lr if isinstance(lr, str) else short_float(lr)}-s{seed}"
