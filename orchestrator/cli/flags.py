"""Command-line flags into configs: a task's (--set), a model's
(--dim) and the training protocol's, with errors in the words of the flags."""

from typing import Optional

import typer

from orchestrator.cli.common import fail
from workloads.config import TrainConfig
from workloads.tasks import TASKS, task_config


def task_config_of_flags(task: str, n: int, setup: Optional[str], sets: list[str]):
    """The config of `task` from command-line options; exit 2 naming the flag at fault."""
    from pydantic import ValidationError

    if task not in TASKS:
        fail(f"unknown task {task!r}; known tasks: {', '.join(sorted(TASKS))}")
    fields = {}
    for item in sets:
        key, sep, value = item.partition("=")
        if not (sep and key.strip()):
            fail(f"--set: {item!r} is not FIELD=VALUE")
        if key.strip() in ("n", "setup"):
            fail(f"--set: {key.strip()} has a flag of its own, --{key.strip()}")
        fields[key.strip()] = value.strip()
    flags = {"n": "--n", "setup": "--setup"}
    try:
        return task_config(task, n, setup, **fields)
    except ValidationError as e:
        err = e.errors()[0]
        field = str(err["loc"][0]) if err["loc"] else ""
        flag = flags.get(field) or (f"--set {field}" if field else f"--set ({task})")
        fail(f"{flag}: {err['msg'].removeprefix('Value error, ')} (got {err.get('input')!r})")


def protocol_option(field: str):
    """A `train` option for a field of the training protocol, with TrainConfig's
    default and description: the protocol's defaults are written once, there."""
    info = TrainConfig.model_fields[field]
    return typer.Option(info.default, help=info.description)


def setups_in_words() -> str:
    """Each setup and the tasks that have it, from the task registry: 'vanilla, cot (istree), ...'."""
    having: dict[str, list[str]] = {}
    for name, (config_cls, _) in sorted(TASKS.items()):
        for setup in config_cls.setups():
            having.setdefault(setup, []).append(name)
    return ", ".join(s if len(names) == len(TASKS) else f"{s} ({', '.join(names)})" for s, names in having.items())


SET_OPTION = typer.Option([], "--set", metavar="FIELD=VALUE", help="another field of the task's config, FIELD=VALUE (e.g. ar: keys=64); repeatable")


DIM_OPTION = typer.Option([], "--dim", metavar="FIELD=VALUE", help="a model dimension beyond the preset, FIELD=VALUE (d_model, n_layers, the "
                          "attention layers' n_heads and d_mlp, the mixer's fields: d_state, expand, heads, ...), "
                          "or a model option (init=mimetic), as a spec's axes.model; repeatable")


def model_dims(arch: str, size: str, dims: list[str]) -> dict[str, int | str]:
    """--dim's fields, checked against the preset as a spec's axes.model is; exit 2
    naming the flag at fault."""
    from pydantic import ValidationError

    from workloads.models import preset
    from workloads.models.config import MODEL_DIMENSIONS, MODEL_OPTIONS

    try:
        base = preset(arch, size)
    except ValueError as e:
        fail(f"--size: {e}")
    fields = {}
    for item in dims:
        key, sep, value = (part.strip() for part in item.partition("="))
        if sep and key in MODEL_OPTIONS:
            if value not in MODEL_OPTIONS[key]:
                fail(f"--dim: {item!r}: {value!r} is not a value of {key}; its values: {', '.join(MODEL_OPTIONS[key])}")
        elif not (sep and key in MODEL_DIMENSIONS and value.isdigit() and int(value) > 0):
            fail(f"--dim: {item!r} is not FIELD=VALUE with FIELD one of {', '.join(MODEL_DIMENSIONS)} and VALUE a "
                 f"positive integer, or FIELD one of the options {', '.join(MODEL_OPTIONS)} and VALUE one of its "
                 "values")
        if key not in base.dimensions:
            fail(f"--dim: {arch} has no layer with {key}; its dimensions: {', '.join(sorted(base.dimensions))}")
        fields[key] = value if key in MODEL_OPTIONS else int(value)
    try:
        base.variant(fields)
    except ValidationError as e:
        err = e.errors()[0]
        field = next((str(part) for part in reversed(err["loc"]) if str(part) in fields), None)
        said = f"--dim {field}={fields[field]}" if field else "--dim"
        fail(f"{said}: {err['msg'].removeprefix('Value error, ')}")
    except ValueError as e:
        fail(f"--dim: {e}")
    return fields


def flag_error(e) -> str:
    """A validation error of a command's options, in the words of its flags."""
    import re

    err = e.errors()[0]
    msg = err["msg"].removeprefix("Value error, ")
    if err["loc"]:
        return f"--{str(err['loc'][-1]).replace('_', '-')}: {msg} (got {err.get('input')!r})"
    return re.sub(r"\b([a-z]+_[a-z_]+|samples)\b", lambda m: "--" + m.group(1).replace("_", "-"), msg)
