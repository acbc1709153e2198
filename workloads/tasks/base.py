"""The task contract: what a task's config and task classes give the trainer and the
orchestrator, typed here so that neither reflects on the other's internals.

A task module defines `class MyConfig(TaskConfigBase)` (a `name: Literal["my"]`
field, `n` with its bounds and description, `setup: Literal[...]` of its setups,
its other parameters) and `class MyTask(TaskBase)`, and calls `register(MyConfig,
MyTask)`; the registry checks the contract then, at import."""

from __future__ import annotations

import numbers
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Literal, Optional, get_args, get_origin

from pydantic import BaseModel, ConfigDict, model_validator

if TYPE_CHECKING:
    import numpy as np
    import torch

# Training, validation and held-out samples come from disjoint streams of
# per-sample seeds, so a validation set never depends on how far training has gone,
# and the held-out set, measured once at the end, is one no learning rate was
# chosen on (the report's score robust to the learning rate).
TRAIN_STREAM = 0
VALID_STREAM = 1
HELD_OUT_STREAM = 2


@dataclass(frozen=True)
class Batch:
    """Right-padded samples. `supervised[b, i]` is True where token i carries loss
    (position i-1 predicts it). Tasks whose targets are not the next input token
    (zoology's MQAR) give `targets`, laid out like `tokens`."""

    tokens: torch.Tensor  # (B, T) int64
    supervised: torch.Tensor  # (B, T) bool
    lengths: torch.Tensor  # (B,) int64, BOS to answer inclusive
    labels: torch.Tensor  # (B,) the answer, in the task's code (IsTree: is the graph a tree)
    targets: torch.Tensor | None = None  # (B, T) int64, where given

    @property
    def next_tokens(self) -> torch.Tensor:
        """What positions 0..T-2 are trained to predict."""
        return (self.tokens if self.targets is None else self.targets)[:, 1:]

    def rows(self, index, width: int) -> Batch:
        """The rows `index` (a sequence of row numbers), cut or right-padded to
        `width` tokens; padding carries no loss (token 0, unsupervised)."""
        import torch

        index = torch.as_tensor(index, dtype=torch.long)

        def take(t: torch.Tensor | None) -> torch.Tensor | None:
            if t is None:
                return None
            if t.dim() == 1:
                return t[index]
            out = t[index, :width]
            if out.shape[1] < width:
                out = torch.cat([out, out.new_zeros(len(index), width - out.shape[1])], dim=1)
            return out

        return Batch(*(take(t) for t in (self.tokens, self.supervised, self.lengths, self.labels, self.targets)))

    def to(self, device) -> Batch:
        """The batch on `device`; to a GPU through pinned memory, without blocking."""
        import torch

        pin = torch.device(device).type == "cuda"
        tensors = (self.tokens, self.supervised, self.lengths, self.labels, self.targets)
        return Batch(*(t if t is None else (t.pin_memory() if pin else t).to(device, non_blocking=True) for t in tensors))


# The largest vocabulary a task may ask for: a model embeds every token and writes
# logits over all of them at every position, and a task builds its token list; a
# vocabulary past this (values: 100000000000) was built for minutes before anything
# said it could not fit.
MAX_VOCAB = 1 << 20


class TaskConfigBase(BaseModel):
    """A task's pydantic config: `name` (the discriminator), `n` (the task's size), `setup`."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    # The sizes a sweep spec of the default task sweeps where it gives none (its axes.n).
    default_n: ClassVar[tuple[int, ...]] = ()

    @model_validator(mode="after")
    def _vocabulary_fits(self):
        size = getattr(self, "vocab_size", None)
        if isinstance(size, int) and size > MAX_VOCAB:
            raise ValueError(f"the task's vocabulary would be {size:,} tokens, more than the {MAX_VOCAB:,} this tool "
                             "supports (every token is embedded, and scored at every position); lower the fields that "
                             "size it")
        return self

    @classmethod
    def choices(cls, field: str) -> tuple:
        """The values a field given as a Literal allows, in order (the setups, a graph
        family); empty for a field the task does not have or that is not a Literal."""
        info = cls.model_fields.get(field)
        return tuple(get_args(info.annotation)) if info and get_origin(info.annotation) is Literal else ()

    @classmethod
    def setups(cls) -> tuple[str, ...]:
        """The task's setups: the values its `setup` field allows, in order."""
        if not cls.choices("setup"):
            raise TypeError(f"{cls.__name__}.setup must be a Literal of the setup names (Literal['vanilla', ...]), "
                            f"got {cls.model_fields['setup'].annotation!r}")
        return cls.choices("setup")

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
    """A task class. Its first half is for the orchestrator (names, chance levels,
    findings); its second is the trainer's half of the contract: the attributes a
    task sets in `__init__` (checked with their types when the task is built,
    `check_built`) and the methods a task defines (checked when it is registered,
    `check_contract`): `batch` and `samples` always, `stopped`, `answers` (and
    `prompt_length`) for a task with a generation protocol, `retrieve_rows` (and `end_search_id`) for a task
    with a retrieval setup."""

    title: ClassVar[str] = ""  # the task's name in reports and figures (IsTree); empty: its registered name
    n_label: ClassVar[str] = "n"  # the figures' x axis
    generates: ClassVar[bool] = True  # a generation protocol: generation accuracy is measured
    # Exact match of a model that guesses, by setup; what guessing the answer scores in
    # generation (None: not a fixed level). The report marks them.
    exact_match_chance: ClassVar[dict[str, float]] = {}
    generation_chance: ClassVar[Optional[float]] = None
    # Teacher-forced accuracy per supervised token of a model that guesses, by setup,
    # where it is a fixed level (a setup whose one supervised token is the answer).
    token_accuracy_chance: ClassVar[dict[str, float]] = {}

    # The trainer's half: set by the task's __init__.
    vocab_size: int  # tokens the model embeds (a property of the config is fine)
    pad_id: int  # the token right-padding fills
    max_length: int  # the longest sample, in tokens
    prompt_length: int  # with a generation protocol: tokens before the model's first generated one
    uses_retriever: bool  # whether generation calls retrieve_rows after end_search_id
    end_search_id: int  # with a retriever: the token after which the retriever writes

    # The task's known results as claims the findings engine decides (workloads/tasks/findings.py:
    # Falls, Improves, Repairs, StateDecides, GapCloses), each over the run's models at equal
    # size; an architecture none of them names is set beside the Transformer (`Beside`).
    claims: ClassVar[tuple] = ()
    # The sd of a cell's exact match from one training seed to the next, from a calibration
    # that measured it (named where set): what a comparison on one seed is read with. None:
    # a one-seed comparison decides nothing (docs/findings.md).
    training_noise: ClassVar[Optional[float]] = None

    @classmethod
    def findings(cls, best, unfinished=None):
        """What the run shows of the task's known results (workloads/tasks/verdicts.py's
        `Findings`), then of each architecture they do not name, beside the Transformer
        of its size (`Beside`: any task gets it); `unfinished`, the trials not finished
        (setup, state), named as not run yet in each finding that would read them."""
        from workloads.tasks.findings import Beside, findings
        from workloads.tasks.verdicts import Findings

        found = findings(best, (*cls.claims, Beside.of(cls.claims)), cls.exact_match_chance, unfinished,
                         cls.training_noise)
        return found if found.lines else Findings()

    @staticmethod
    def label_text(label) -> str:
        """A sample's label in words (show-task)."""
        return f"answer {label}"

    def batch(self, seed: int, stream: int, start: int, count: int) -> Batch:
        """Samples start..start+count of a stream (TRAIN_STREAM, ...), right-padded."""
        raise NotImplementedError

    def samples(self, seed: int, stream: int, start: int, count: int) -> list[dict]:
        """The same samples as readable records: tokens, supervised, label (show-task)."""
        raise NotImplementedError

    def stopped(self, seqs: np.ndarray, pos: int) -> np.ndarray:
        """Generation: the rows whose token at `pos` ends their generation."""
        raise NotImplementedError

    def answers(self, seqs: np.ndarray) -> np.ndarray:
        """Generation: each row's generated answer, in the code of `Batch.labels`."""
        raise NotImplementedError

    def retrieve_rows(self, tokens: np.ndarray, lengths: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """Retrieval: the tokens the retriever writes for `rows`, whose last token is end_search_id."""
        raise NotImplementedError


def _required(config_cls: type, task_cls: type) -> tuple[list[str], dict[str, type]]:
    """The methods and the attributes the trainer uses of this task."""
    methods = ["batch", "samples"]
    attributes = {"vocab_size": int, "pad_id": int, "max_length": int, "uses_retriever": bool}
    if task_cls.generates:
        methods += ["stopped", "answers"]
        attributes["prompt_length"] = int
    if "retrieval" in config_cls.setups():
        methods.append("retrieve_rows")
        attributes["end_search_id"] = int
    return methods, attributes


def check_contract(config_cls: type, task_cls: type) -> None:
    """Raises TypeError naming the task and what it lacks: a method of the trainer's
    half that it does not define, or defines with other parameters."""
    import inspect

    methods, _ = _required(config_cls, task_cls)
    for name in methods:
        own, base = getattr(task_cls, name, None), getattr(TaskBase, name)
        if own is None or own is base:
            raise TypeError(f"task {task_cls.__name__} must define {name}{inspect.signature(base)} "
                            "(the trainer's half of the task contract, workloads/tasks/base.py)")
        wanted = list(inspect.signature(base).parameters)
        given = list(inspect.signature(own).parameters)
        if given != wanted:
            raise TypeError(f"task {task_cls.__name__}.{name} takes ({', '.join(given)}); the contract's is "
                            f"({', '.join(wanted)}) (workloads/tasks/base.py)")


def check_built(config: TaskConfigBase, task: TaskBase) -> None:
    """Raises TypeError naming the task and the attribute of the trainer's half that
    its __init__ left unset, or set to a value of another type."""
    _, attributes = _required(type(config), type(task))
    for name, kind in attributes.items():
        value = getattr(task, name, None)
        ok = isinstance(value, bool) if kind is bool else isinstance(value, numbers.Integral) and not isinstance(value, bool)
        if not ok:
            raise TypeError(f"task {type(task).__name__} must set {name} to {'a bool' if kind is bool else 'an int'} in "
                            f"its __init__, got {value!r} (the trainer's half of the task contract, workloads/tasks/base.py)")
