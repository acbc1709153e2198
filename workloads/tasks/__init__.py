"""Task registry. A task is one module under workloads/tasks/ that defines its
pydantic config (a `name: Literal[...]` field, the discriminator) and its task
class, and registers them by calling `register(Config, Task)` (from
workloads/tasks/registry.py) at import. Every module here is imported at
start-up to collect them, except helpers: names starting with `_` or ending in
`_kernels` or `_oracle`. Task modules must import
cheaply (torch, numpy and compiled kernels where they are used): the CLI reads
specs without them.

What the trainer and the evaluator use of a task is `TaskBase`'s second half
(workloads/tasks/base.py), typed there: its methods are checked when the task is
registered, its attributes when a task is built. Its config gives `vocab_size`
and `longest_sample` without building anything (memory estimates, scheduling).
"""

import importlib
import pkgutil
from typing import Annotated, Union

from pydantic import Field

from workloads.tasks.base import Batch, TaskBase, TaskConfigBase
from workloads.tasks.registry import DEFAULT_TASK, TASKS, build_task, register, task_config, tasks_having


def _is_task_module(name: str) -> bool:
    return not (name.startswith("_") or name.endswith(("_kernels", "_oracle")) or name in ("base", "registry"))


for _module in pkgutil.iter_modules(__path__):
    if _is_task_module(_module.name):
        importlib.import_module(f"{__name__}.{_module.name}")

_configs = tuple(config for config, _ in TASKS.values())
# The config of any registered task, told apart by `name`.
TaskConfig = _configs[0] if len(_configs) == 1 else Annotated[Union[_configs], Field(discriminator="name")]

from workloads.tasks.istree import IsTreeConfig, IsTreeTask  # noqa: E402  (the paper's task, re-exported)

__all__ = ["DEFAULT_TASK", "TASKS", "Batch", "IsTreeConfig", "IsTreeTask", "TaskBase", "TaskConfig", "TaskConfigBase",
           "build_task", "register", "task_config", "tasks_having"]
