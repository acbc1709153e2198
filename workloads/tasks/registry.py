"""The registry of tasks: each task module calls `register(Config, Task)` at import,
and the contract is checked then (workloads/tasks/base.py). The package's
__init__ imports every task module; a task module imports this one, not the
package, so that the two do not import each other."""

from typing import Optional

from workloads.tasks.base import TaskBase, TaskConfigBase, check_built, check_contract

TASKS: dict[str, tuple[type, type]] = {}  # name -> (config class, task class)


DEFAULT_TASK = "istree"  # the paper's: what a spec or a command without `task` means


def register(config_cls: type, task_cls: type) -> None:
    """Adds a task; checks its contract (workloads/tasks/base.py) now, so that a task
    that breaks it fails at import naming itself, not later in a command."""
    if not (issubclass(config_cls, TaskConfigBase) and issubclass(task_cls, TaskBase)):
        raise TypeError(f"{config_cls.__name__} and {task_cls.__name__} must derive from TaskConfigBase and TaskBase")
    name = config_cls.model_fields["name"].default
    check_contract(config_cls, task_cls)  # its setups a Literal, its methods those the trainer calls
    if name in TASKS and TASKS[name] != (config_cls, task_cls):
        raise ValueError(f"task {name!r} is registered twice")
    TASKS[name] = (config_cls, task_cls)


def tasks_having(field: str) -> list[str]:
    """The registered tasks whose config has `field`."""
    return [name for name, (config_cls, _) in TASKS.items() if config_cls.has(field)]


def task_config(name: str, n: int, setup: Optional[str] = None, **fields):
    """The config of task `name` at size `n`: the one builder of a spec's trials and
    `train`'s. `setup` None keeps the task's default; `fields` are the task's
    other fields (IsTree's family, AR's keys, ...). Raises ValidationError naming
    the field at fault."""
    fields = dict(fields, n=n)
    if setup is not None:
        fields["setup"] = setup
    return TASKS[name][0](**fields)


def build_task(config):
    try:
        _, task_cls = TASKS[config.name]
    except KeyError:
        raise ValueError(f"unknown task {config.name!r}; known tasks: {', '.join(sorted(TASKS))}") from None
    task = task_cls(config)
    check_built(config, task)
    return task
