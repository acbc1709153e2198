"""Peak GPU memory of one training trial, estimated before it runs: what `plan`
checks against a trial's share of a GPU, and what `gpus_per_trial: auto` packs by.

The models are tiny (0.5M-2M parameters) but the retrieval traces are long
(2,535 tokens at n=64), so activations dominate: the tensors autograd keeps for
the backward pass, counted below per token and layer from the layers' code as it
runs on CUDA (mamba-ssm's selective scan, PyTorch's fused attention, which keeps
no T x T matrix). tests/workloads/test_memory.py checks these counts against
what autograd really saves, on CPU, with the scan kernel's saving rule.
"""

from dataclasses import dataclass

from workloads.config import TrialConfig
from workloads.models.config import ModelConfig
# Per trial process: CUDA context, cuBLAS workspace and caching-allocator slack.
# Not measured on a GPU by this project yet (issue 9 keeps that open).
PROCESS_OVERHEAD = 1 << 30
GiB = 1 << 30
VALIDATION_BYTES_PER_TOKEN = 8 + 8 + 1
# Disk kept free beyond a trial's two checkpoints (the new one is written beside the last).
SPACE_MARGIN = 16 << 20


def checkpoint_bytes(trial: TrialConfig) -> int:
    """A trial's checkpoint on disk, about: its parameters in fp32 and Adam's two
    moments for each (the frozen embedding and the counters are a few KB). Trial's
    `checkpoint_bytes` counts a built model's exactly."""
    return 3 * 4 * trial.model.n_params


def checkpoint_room(trials: list[TrialConfig], running: int) -> int:
    """Disk the `running` largest of `trials` need at once to keep their checkpoints."""
    sizes = sorted((checkpoint_bytes(t) for t in trials), reverse=True)[:running]
    return sum(2 * size for size in sizes) + SPACE_MARGIN


def recurrent_layer_floats(cfg: ModelConfig) -> float:
    """Floats kept per token by one recurrent layer: its RMSNorm (input,
    input/rms, 1/rms) and output (the mixer's input), and what its mixer keeps
    (the mixer config's `activation_floats`; Mamba's is measured by the test)."""
    return 3 * cfg.d_model + 1 + cfg.mixer.activation_floats(cfg.d_model)


def attention_layer_floats(cfg: ModelConfig) -> float:
    """Floats kept per token by one LLaMA layer: two RMSNorms with their outputs;
    rotated q and k, v, the attention output (laid out so that it is also the
    output projection's input) and one log-sum-exp per head; the SwiGLU's gate,
    activation, up projection and their product."""
    d = cfg.d_model
    norms = 2 * (3 * d + 1)
    attention = 4 * d + cfg.n_heads
    mlp = 4 * cfg.d_mlp
    return norms + attention + mlp


def activation_floats_per_token(cfg: ModelConfig) -> float:
    """Everything the layers and the final norm keep per token (logits aside)."""
    n_attn = len(cfg.attn_layer_idx)
    recurrent = cfg.n_recurrent_layers * recurrent_layer_floats(cfg) if cfg.n_recurrent_layers else 0
    return recurrent + n_attn * attention_layer_floats(cfg) + 2 * cfg.d_model + 1


@dataclass(frozen=True)
class MemoryEstimate:
    activations: int  # bytes autograd keeps for backward, plus one layer's gradients in flight
    logits: int  # logits, their log-softmax and both gradients
    optimizer: int  # weights, gradients, Adam's two moments
    overhead: int  # per process
    validation: int = 0  # the validation set, built once and kept on the device for the whole trial

    @property
    def total(self) -> int:
        return self.activations + self.logits + self.optimizer + self.overhead + self.validation

    @property
    def gib(self) -> float:
        return self.total / GiB

    def largest(self) -> tuple[str, str]:
        """The largest part (what it is) and the setting that lowers it."""
        batch = "training.batch_size (train's --batch-size)"
        parts = {"activations": (self.activations, batch), "logits": (self.logits, batch),
                 "weights and optimizer state": (self.optimizer, "the model's size (its preset or dimensions)"),
                 "validation set": (self.validation, "training.val_samples (train's --val-samples)")}
        name = max(parts, key=lambda k: parts[k][0])
        return name, parts[name][1]


def estimate(trial: TrialConfig, vocab_size: int, n_params: int) -> MemoryEstimate:
    """Peak GPU memory of a training step at the trial's longest batch (every row
    as long as the longest sample; batches are padded to their longest row)."""
    cfg = trial.model
    tokens = trial.train.batch_size * (trial.task.longest_sample - 1)  # the model reads all but the last token
    width = 2 if trial.train.precision == "bf16" else 4
    per_token = activation_floats_per_token(cfg)
    widest_layer = max(recurrent_layer_floats(cfg) if cfg.n_recurrent_layers else 0,
                       attention_layer_floats(cfg) if cfg.attn_layer_idx else 0)
    return MemoryEstimate(
        activations=int(tokens * (per_token + widest_layer) * width),
        logits=int(tokens * vocab_size * 4 * 4),  # cross-entropy runs in fp32 under autocast too
        optimizer=int(n_params * 4 * 4),
        overhead=PROCESS_OVERHEAD,
        # Every validation row padded to the longest sample: int64 tokens and targets, a bool mask.
        validation=int(trial.train.val_samples * trial.task.longest_sample * VALIDATION_BYTES_PER_TOKEN),
    )


def trial_estimate(trial: TrialConfig) -> MemoryEstimate:
    """`estimate` with the trial's own vocabulary and parameter count."""
    return estimate(trial, trial.task.vocab_size, trial.model.n_params)


def array_estimate(trial: TrialConfig, members: int) -> MemoryEstimate:
    """An array of `members` trials like `trial` (workloads/arrays.py): each
    member's activations, logits, weights and optimizer state (every layer runs all
    members' rows at once), and the process and the validation set once (one
    worker, one validation set: array_key holds the task and its seed)."""
    one = trial_estimate(trial)
    return MemoryEstimate(activations=members * one.activations, logits=members * one.logits,
                          optimizer=members * one.optimizer, overhead=one.overhead, validation=one.validation)
