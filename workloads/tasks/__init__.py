"""Task registry. A task is one module under workloads/tasks/ that defines its
pydantic config (a `name: Literal[...]` field, the discriminator) and its task
class, and registers them by calling `register(Config, Task)` at import. Every
module here is imported at start-up to collect them, except helpers: names
starting with `_` or ending in `_kernels` or `_oracle`. Task modules must import
cheaply (torch, numpy and compiled kernels where they are used): the CLI reads
specs without them.

What the trainer and the evaluator use of a task (IsTreeTask is the example):
`vocab_size`, `pad_id`, `max_length`, `prompt_length`, `batch(seed, stream,
start, count) -> Batch`, `stopped(seqs, pos)` (the rows whose token at `pos`
ends their generation), `answers(seqs)` (each row's generated answer in the code
of `Batch.labels`),
`uses_retriever`, and with a retriever `end_search_id` and
`retrieve_rows(tokens, lengths, rows)`; `generates` False for a task without a
generation protocol (its generation accuracy is not measured). Its config gives `vocab_size` and
`longest_sample` without building anything (memory estimates, scheduling).
"""

import importlib
import pkgutil
from typing import Annotated, Optional, Union

from pydantic import Field

from workloads.tasks.base import TaskBase, TaskConfigBase

TASKS: dict[str, tuple[type, type]] = {}  # name -> (config class, task class)


DEFAULT_TASK = "istree"  # the paper's: what a spec or a command without `task` means


def register(config_cls: type, task_cls: type) -> None:
    """Adds a task; checks its contract (workloads/tasks/base.py) now, so that a task
    that breaks it fails at import naming itself, not later in a command."""
    if not (issubclass(config_cls, TaskConfigBase) and issubclass(task_cls, TaskBase)):
        raise TypeError(f"{config_cls.__name__} and {task_cls.__name__} must derive from TaskConfigBase and TaskBase")
    name = config_cls.model_fields["name"].default
    config_cls.setups()  # a Literal of setup names
    if name in TASKS and TASKS[name] != (config_cls, task_cls):
        raise ValueError(f"task {name!r} is registered twice")
    TASKS[name] = (config_cls, task_cls)


def _is_task_module(name: str) -> bool:
    return not (name.startswith("_") or name.endswith(("_kernels", "_oracle")))


for _module in pkgutil.iter_modules(__path__):
    if _is_task_module(_module.name) and _module.name != "base":
        importlib.import_module(f"{__name__}.{_module.name}")

_configs = tuple(config for config, _ in TASKS.values())
# The config of any registered task, told apart by `name`.
TaskConfig = _configs[0] if len(_configs) == 1 else Annotated[Union[_configs], Field(discriminator="name")]


def task_config(name: str, n: int, setup: Optional[str] = None, family: Optional[str] = None, **fields):
    """The config of task `name` at size `n`: the one builder of a spec's trials and
    `train`'s. `setup` None keeps the task's default; `family` applies to a task
    that has one (the paper's graphs) and is ignored by the others. Raises
    ValidationError naming the field at fault."""
    config_cls = TASKS[name][0]
    fields = dict(fields, n=n)
    if setup is not None:
        fields["setup"] = setup
    if family is not None and config_cls.has("family"):
        fields.setdefault("family", family)
    return config_cls(**fields)


def build_task(config):
    try:
        _, task_cls = TASKS[config.name]
    except KeyError:
        raise ValueError(f"unknown task {config.name!r}; known tasks: {', '.join(sorted(TASKS))}") from None
    return task_cls(config)


from workloads.tasks.base import Batch  # noqa: E402
from workloads.tasks.istree import IsTreeConfig, IsTreeTask  # noqa: E402  (the paper's task, re-exported)

__all__ = ["DEFAULT_TASK", "TASKS", "Batch", "IsTreeConfig", "IsTreeTask", "TaskBase", "TaskConfig", "TaskConfigBase",
           "build_task", "register", "task_config"]
