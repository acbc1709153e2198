"""An evaluation spec (`kind: evaluation`): pretrained models put to a task's questions
under each of its conditions, one Ray Tune trial per model and condition. Nothing is
trained, so there are no sizes, learning rates, seeds or training protocol: the models
are named checkpoints (workloads/pretrained.py), the task is HotpotQA
(workloads/tasks/hotpotqa.py). sweeps/hotpotqa_pretrained.yaml is the paper's check."""

from pathlib import Path
from typing import Literal, Optional, Union

from pydantic import Field, ValidationError, field_validator, model_validator

from orchestrator.spec.section import Section
from orchestrator.spec.sections import scheme_typo
from workloads.config import Device
from workloads.evaluate_pretrained import EvalSettings, EvaluationConfig
from workloads.pretrained import Loader
from workloads.tasks.hotpotqa import CONDITIONS, VALIDATION_QUESTIONS, HotpotQAConfig


class PretrainedSpec(Section):
    """A checkpoint to evaluate (workloads.pretrained.PretrainedModel's fields)."""

    arch: str = Field(pattern=r"^[a-z][a-z0-9_]*$", description="what the findings read it as: transformer, mamba, "
                      "hybrid (the paper's), or a name of its own")
    size: str = Field(pattern=r"^[A-Za-z0-9.]+$", description="its parameter count as tables show it, e.g. 1.4B")
    checkpoint: str = Field(min_length=1, description="a local folder, or a hub id in this machine's Hugging Face cache")
    tokenizer: Optional[str] = None
    loader: Loader = "transformers"
    code: Optional[str] = None


class EvalResources(Section):
    cpus_per_trial: float = Field(1.0, gt=0)
    gpus_per_trial: float = Field(1.0, gt=0, le=1, description="a GPU or a fraction of one, in (0, 1]")
    device: Device = Field("auto", description="auto: a GPU where the cluster has one, else CPU; cpu; cuda")
    max_concurrent: Optional[int] = Field(None, gt=0, description="cap on evaluations running at once")
    max_failures: int = Field(2, ge=0, description="retries of a crashed evaluation, from the answers it kept")

    @property
    def mps(self) -> str:  # the cluster's start reads it of a training sweep's resources
        return "off"


class EvaluationSpec(Section):
    kind: Literal["evaluation"]
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", max_length=255, description="the run directory's name")
    task: Literal["hotpotqa"] = "hotpotqa"
    task_params: dict[str, Union[int, str]] = Field(
        {}, description="the task's other fields for every evaluation: data (the validation set's file), "
        "max_answer_tokens")
    n: int = Field(ge=1, le=VALIDATION_QUESTIONS, description="questions asked under each condition: the data "
                   "set's first n")
    conditions: list[Literal[CONDITIONS]] = Field(list(CONDITIONS), min_length=1,
                                                  description="what each prompt holds before its question")
    models: list[PretrainedSpec] = Field(min_length=1)
    eval: EvalSettings = EvalSettings()
    resources: EvalResources = EvalResources()
    storage: str = Field("./runs", description="results go to <storage>/<name>/; a local path")

    @field_validator("storage")
    @classmethod
    def _local(cls, value):
        typo = scheme_typo(value)
        if typo:
            raise ValueError(typo)
        scheme, sep, _ = value.partition("://")
        if sep and scheme != "file":
            raise ValueError(f"an evaluation's answers are kept on local storage: a path or file://...; got {value!r}")
        if not value.strip():
            raise ValueError("storage is empty; use a local path (default ./runs)")
        return value

    @field_validator("conditions")
    @classmethod
    def _no_repeats(cls, values):
        if len(set(values)) != len(values):
            raise ValueError(f"repeated conditions in {values}")
        return values

    @model_validator(mode="after")
    def _consistent(self):
        seen = {}
        for i, m in enumerate(self.models):
            key = (m.arch, m.size)
            if key in seen:
                raise ValueError(f"models[{i}]: {m.arch} {m.size} is models[{seen[key]}] too; the report tells models "
                                 "apart by arch and size")
            seen[key] = i
        for i, m in enumerate(self.models):
            try:
                self.evaluation(m, self.conditions[0])
            except ValidationError as e:
                first = e.errors()[0]
                part, *rest = first["loc"] or ("",)
                section = {"task": "task_params", "model": f"models[{i}]"}.get(part, str(part))
                where = ".".join([section, *map(str, rest)])
                raise ValueError(f"{where}: {first['msg'].removeprefix('Value error, ')}") from None
        return self

    def evaluation(self, model: PretrainedSpec, condition: str) -> EvaluationConfig:
        """One trial: `model` asked the questions under `condition`."""
        return EvaluationConfig.model_validate({"task": {**self.task_params, "n": self.n, "setup": condition},
                                                "model": model.model_dump(), "eval": self.eval.model_dump()})

    def evaluations(self) -> list[EvaluationConfig]:
        """Every trial, model by model, each under every condition (the spec's orders)."""
        return [self.evaluation(m, c) for m in self.models for c in self.conditions]

    def trial_count(self) -> int:
        return len(self.models) * len(self.conditions)

    def warnings(self) -> list[str]:
        data = Path(self.task_params.get("data", HotpotQAConfig.model_fields["data"].default)).expanduser()
        return [] if data.is_file() else [f"task_params.data: {str(data)!r} is not on this machine (yet): a launch "
                                          "here refuses to start until it is"]

    def storage_uri(self) -> str:
        return str(Path(self.storage.removeprefix("file://")).expanduser().resolve())

    def run_dir(self) -> str:
        return f"{self.storage_uri().rstrip('/')}/{self.name}"
