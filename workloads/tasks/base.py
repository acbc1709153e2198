"""The task contract: what a task's config and task classes give the trainer and the
orchestrator, typed here so that neither reflects on the other's internals.

A task module defines `class MyConfig(TaskConfigBase)` (a `name: Literal["my"]`
field, `n` with its bounds and description, `setup: Literal[...]` of its setups,
its other parameters) and `class MyTask(TaskBase)`, and calls `register(MyConfig,
MyTask)`; the registry checks the contract then, at import."""

from __future__ import annotations

from typing import ClassVar, Literal, Optional, get_args, get_origin

from pydantic import BaseModel, ConfigDict


class TaskConfigBase(BaseModel):
    """A task's pydantic config: `name` (the discriminator), `n` (the task's size), `setup`."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    @classmethod
    def setups(cls) -> tuple[str, ...]:
        """The task's setups: the values its `setup` field allows, in order."""
        annotation = cls.model_fields["setup"].annotation
        if get_origin(annotation) is not Literal:
            raise TypeError(f"{cls.__name__}.setup must be a Literal of the setup names (Literal['vanilla', ...]), "
                            f"got {annotation!r}")
        return tuple(get_args(annotation))

    @classmethod
    def n_range(cls) -> tuple[Optional[int], Optional[int]]:
        """The smallest and largest n the task supports (None: no bound)."""
        lo = hi = None
        for meta in cls.model_fields["n"].metadata:
            lo = getattr(meta, "ge", lo)
            hi = getattr(meta, "le", hi)
        return lo, hi

    @classmethod
    def n_means(cls) -> str:
        """What n counts (the field's description): vertices in each graph, key-value pairs, ..."""
        return cls.model_fields["n"].description or "the task's size"

    @classmethod
    def parameters(cls) -> dict:
        """The task's other fields and their defaults (a spec's task_params, train's --set)."""
        return {k: f.default for k, f in cls.model_fields.items() if k not in ("name", "n", "setup")}

    @classmethod
    def has(cls, field: str) -> bool:
        return field in cls.model_fields


class TaskBase:
    """Defaults of a task class; see workloads/tasks/__init__.py for what the trainer uses."""

    title: ClassVar[str] = ""  # the task's name in reports and figures (IsTree); empty: its registered name
    n_label: ClassVar[str] = "n"  # the figures' x axis
    generates: ClassVar[bool] = True  # a generation protocol: generation accuracy is measured
    # Exact match of a model that guesses, by setup; what guessing the answer scores in
    # generation (None: not a fixed level). The report marks them.
    exact_match_chance: ClassVar[dict[str, float]] = {}
    generation_chance: ClassVar[Optional[float]] = None

    @staticmethod
    def findings(best) -> list[str]:
        """Markdown lines for the report: what the run shows of the task's known results."""
        return []

    @staticmethod
    def label_text(label) -> str:
        """A sample's label in words (show-task)."""
        return f"answer {label}"
