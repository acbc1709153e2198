"""The resolved config of one trial: what `icr-sweep train` takes and every result stores."""

from typing import Annotated, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, model_validator

from workloads.models import ModelConfig, preset
from workloads.models.config import DEFAULT_LR
from workloads.naming import joined, trial_name
from workloads.switch import Switch
from workloads.tasks import DEFAULT_TASK, TaskConfig

def paper_lr(arch: str) -> float:
    """The architecture's default learning rate (docs/experiment.md's for its three)."""
    if arch not in DEFAULT_LR:
        raise ValueError(f"no default learning rate for {arch!r}; known: {', '.join(DEFAULT_LR)}")
    return DEFAULT_LR[arch]


# Seeds feed the tasks' compiled samplers, which take them as signed 64-bit integers
# (a seed of 2^63 or more validated, then failed at the trial's first batch), and
# torch's generator: 0 .. 2^63 - 1.
SEED_MAX = 2**63 - 1
Seed = Annotated[int, Field(ge=0, le=SEED_MAX)]
# A count of samples (or of rows in a batch) at most 2^53: exact as a float, and
# within numpy's int64, as every table and tracker stores it (TensorBoard's HParams
# failed on a training.samples of 1e26 as the first trial started: issue 83, class 8).
COUNT_MAX = 2**53
Count = Annotated[int, Field(gt=0, le=COUNT_MAX)]
# The largest rate an update can be made with: Adam's first step scales the rate by
# 1 / (1 - beta1) = 10, and the weights are float32 (at most 3.4e38), so a rate above
# 3.4e37 failed every try with an overflow and "retry" advice (lr 1e300). Above 1 no
# model trains anyway; a larger rate, up to this, diverges and is named so.
LR_MAX = 3.4e37

Device = Literal["auto", "cpu", "cuda"]
Precision = Literal["fp32", "bf16"]
AttentionPrecision = Literal["fp32", "bf16"]


class TrainConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    samples: Count = Field(1_000_000, description="fresh training samples in all")
    batch_size: Count = 64
    lr: float = Field(gt=0, le=LR_MAX, description="peak learning rate")
    warmup_samples: int = Field(10_000, ge=0, le=COUNT_MAX, description="linear warm-up, then cosine decay to 0")
    grad_clip: Optional[float] = Field(None, gt=0, description="max global grad norm; None: no clipping")
    eval_every: Count = Field(100_000, description="samples between evaluations (and checkpoints)")
    checkpoint_every_s: float = Field(
        60.0, gt=0, allow_inf_nan=False,
        description="seconds of training between checkpoints taken between evaluations: a killed trial loses at most this")
    val_samples: Count = 5_000
    val_seed: Seed = Field(1234, description="seed of the validation set, shared by all trials")
    gen_every_eval: bool = Field(False, description="generation accuracy at every evaluation, not only the last")
    eval_batch_size: Count = 250
    length_groups: Count = Field(
        4, description="a training batch runs as up to this many micro-batches of similar lengths, "
        "each padded to its own longest row (the same loss and gradient; 1: one batch padded to its longest row)")
    seed: Seed = 0
    device: Device = "auto"
    precision: Precision = Field(
        "fp32", description="bf16: autocast on CUDA (ignored on CPU, which always trains in fp32)"
    )
    cuda_graphs: Switch = Field(
        "auto", description="a lone trial's step at static shapes, captured as a CUDA graph and replayed "
        "(workloads/static_step.py; the same loss and gradients): on; off; auto: on for the GPUs where it measured "
        "faster (docs/gpu.md), else off. A CPU runs the static step uncaptured where it is on")
    attention_precision: AttentionPrecision = Field(
        "fp32", description="bf16: attention's q, k and v cast to bf16 for the attention kernel alone (flash or "
        "cuDNN on a GPU), its output back to the step's precision; everything else as `precision` says. The "
        "paper's protocol is fp32 (docs/fidelity.md states bf16's measured effect)")

    @model_validator(mode="after")
    def _check(self):
        if self.warmup_samples >= self.samples:
            raise ValueError(f"warmup_samples ({self.warmup_samples}) must be below samples ({self.samples})")
        return self


# TrainConfig's fields that a sweep's grid sets per trial; the others are the
# protocol every trial of a sweep shares (a spec's `training`).
PER_TRIAL = ("lr", "seed", "device")


class TrialConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    task: TaskConfig
    model: ModelConfig
    train: TrainConfig
    task_label: str = Field("", description="the values of a spec's task axes, e.g. seqlen128 (empty without)")

    @property
    def setup(self) -> str:
        """The setup as names and reports show it: with task axes, their values too
        (vanilla-seqlen128)."""
        return joined(self.task.setup, self.task_label)

    @property
    def name(self) -> str:
        """A readable id (workloads/naming.py), e.g. transformer-cot-0.5M-n32-lr1e-3-s0
        (IsTree, the paper's task) or ar-mamba-retrieval-0.5M-n64-lr3e-4-s0 (any other task)."""
        return self.named(self.train.lr)

    def named(self, lr: float | str) -> str:
        """The name with the learning rate written as `lr` (text: an Optuna trial's rate
        to three significant digits)."""
        return trial_name(self.task.name, self.model.arch, self.setup, self.model.size, self.task.n, self.train.seed,
                          lr, paper_task=DEFAULT_TASK)


def trial_config(arch: str, size: str, task: TaskConfig, lr: Optional[float] = None, dims: Optional[dict] = None,
                 task_label: str = "", **train) -> TrialConfig:
    """A trial, the one builder of a spec's grid and of `train`: the preset (arch,
    size) with the model dimensions `dims` replaced (a variant named like
    tiny-dstate4), `task`, and the training protocol's fields `train` (TrainConfig's
    defaults for the others); the learning rate defaults to the architecture's."""
    return TrialConfig(
        task=task,
        model=preset(arch, size).variant(dims or {}),
        train=TrainConfig(lr=paper_lr(arch) if lr is None else lr, **train),
        task_label=task_label,
    )
