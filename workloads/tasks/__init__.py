"""Task registry: every task registers its config and class here, by name."""

from workloads.tasks.istree import Batch, IsTreeConfig, IsTreeTask

TASKS = {"istree": IsTreeTask}

# With a second task this becomes a union discriminated by `name`.
TaskConfig = IsTreeConfig


def build_task(config: TaskConfig):
    try:
        task_cls = TASKS[config.name]
    except KeyError:
        raise ValueError(f"unknown task {config.name!r}; known tasks: {sorted(TASKS)}") from None
    return task_cls(config)


__all__ = ["TASKS", "Batch", "IsTreeConfig", "IsTreeTask", "TaskConfig", "build_task"]
