"""One trial: train a model on a task stream, evaluate periodically, checkpoint.

`run_trial` is a function of a plain config dict and a `report` callback and knows
nothing of Ray: the CLI's `train` and the sweep's trainable both call it.
"""

import contextlib
import math
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

import torch

from workloads.adam import AdamW
from workloads.batching import group_rows, overhead_tokens
from workloads.checkpoint import (CHECKPOINT_FILE, CheckpointError, DiskSpaceError, as_today, differences, read_checkpoint,
                                  what_trains)
from workloads.config import TrainConfig, TrialConfig
from workloads.evaluate import generation_accuracy, supervised_loss, teacher_forced
from workloads.memory import SPACE_MARGIN
from workloads.metrics import HELD_OUT
from workloads.models import build_model
from workloads.models.transformer import set_attention_dtype
from workloads.static_step import StaticStep, bucket_widths, rates_kept, static_optimizer, uses_static_step
from workloads.tasks import Batch, build_task
from workloads.tasks.base import HELD_OUT_STREAM, TRAIN_STREAM, VALID_STREAM

Report = Callable[[dict, Optional[Path]], None]
# Losses are checked for NaN/inf every this many steps: each check syncs with the GPU.
LOSS_CHECK_STEPS = 32


class NonFiniteLoss(FloatingPointError):
    """The training loss is NaN or infinite; `step` is the first step where it is
    (1: before any update, so the model or its settings make it, not the rate)."""

    def __init__(self, message: str, step: int):
        super().__init__(message)
        self.step = step

    def __reduce__(self):  # pickled across Ray as (class, args): its step too
        return type(self), (str(self), self.step)


def non_finite_loss(config: TrialConfig, loss: float, step: int) -> NonFiniteLoss:
    """The failure of a trial whose loss is `loss` (not finite) at `step`, first found there."""
    m = config.model
    cause = (f": not finite at the first step, before any update, so the rate is not the cause: the model "
             f"({m.arch} {m.size}) or the task's settings produce it") if step == 1 else ""
    return NonFiniteLoss(f"loss is {loss} at step {step} ({config.name}){cause}", step)


def _tensors(value):
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _tensors(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _tensors(v)


def resolve_device(requested: str) -> torch.device:
    if requested == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("device 'cuda' was asked for, but torch sees no CUDA GPU")
    if requested == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(requested)


def lr_factor(step: int, warmup_steps: int, total_steps: int) -> float:
    """Linear warm-up from 0 to 1, then cosine decay to 0 at the last step: Hugging
    Face's cosine schedule, as the reference trains with."""
    if step < warmup_steps:
        return step / warmup_steps
    progress = (step - warmup_steps) / max(1, total_steps - warmup_steps)
    return 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))


class Trial:
    """Model, optimiser, schedule and data position of one run; saved and restored whole."""

    def resolved(self) -> dict:
        """What the run ran on (workloads.metrics.RESOLVED): the device's type and the
        scans its recurrent layers ran last (each sets `scan_ran` in its forward)."""
        scans = sorted({m.scan_ran for m in self.model.modules() if getattr(m, "scan_ran", None)})
        step = "plain" if self.static is None else "graph" if self.static.captured else "static"
        return {"device_used": self.device.type, "scan_used": "+".join(scans) or "none", "step_used": step}

    def __init__(self, config: TrialConfig):
        self.config = config
        tc = config.train
        self.device = resolve_device(tc.device)
        use_bf16 = tc.precision == "bf16" and self.device.type == "cuda"
        static_step_on = uses_static_step(tc.cuda_graphs, self.device)
        # Autocast's cache of cast weights must not outlive a graph's capture (PyTorch's
        # CUDA-graph notes): off for the static step.
        self.autocast = (
            (lambda: torch.autocast("cuda", dtype=torch.bfloat16, cache_enabled=not static_step_on)) if use_bf16
            else contextlib.nullcontext
        )
        self.task = build_task(config.task)
        config.model.check_device(self.device)
        torch.manual_seed(tc.seed)
        self.model = build_model(config.model, self.task.vocab_size).to(self.device)
        cuda = self.device.type == "cuda"
        if cuda:
            # TF32 for fp32 matmuls: tensor-core speed at fp32's range (bf16 stays opt-in).
            torch.backends.cuda.matmul.allow_tf32 = True
            torch.backends.cudnn.allow_tf32 = True
        set_attention_dtype(self.model, torch.bfloat16 if tc.attention_precision == "bf16" else None)
        # Adam, as the paper: AdamW with weight decay 0; fused into one kernel on CUDA.
        # The static step's rate is a device tensor (workloads/static_step.py).
        self.static: Optional[StaticStep] = None
        if static_step_on:
            self.optimizer = static_optimizer(self.model, tc.lr, self.device)
            self.static = StaticStep(self.model, self.optimizer, self.autocast, self.device,
                                     rows=math.ceil(tc.batch_size / tc.length_groups),
                                     widths=bucket_widths(self.task.max_length), grad_clip=tc.grad_clip, capture=cuda)
        else:
            self.optimizer = AdamW(self.model.parameters(), lr=tc.lr, weight_decay=0.0, fused=cuda or None)
        warmup_steps = max(1, tc.warmup_samples // tc.batch_size)
        total_steps = math.ceil(tc.samples / tc.batch_size)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda step: lr_factor(step, warmup_steps, total_steps)
        )
        self.samples = 0
        self.history: list[dict] = []
        self.group_overhead = overhead_tokens(self.device.type, self.model.num_params())  # workloads/batching.py
        # Training loss since the last evaluation (its mean is the next train_loss),
        # kept with a checkpoint taken between evaluations.
        self.loss_sum, self.loss_steps = 0.0, 0
        # The result row reported with the latest checkpoint, kept in it: a trial that
        # continues from a checkpoint whose row was never stored reports it again.
        self.row: Optional[dict] = None

    def state_dict(self) -> dict:
        state = {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "samples": self.samples,
            "history": self.history,
            "loss_since_eval": [self.loss_sum, self.loss_steps],
            "row": self.row,
            "config": self.config.model_dump(mode="json"),
            "rng_cpu": torch.get_rng_state(),
        }
        if self.device.type == "cuda":
            state["rng_cuda"] = torch.cuda.get_rng_state(self.device)
        return state

    def load_state_dict(self, state: dict) -> None:
        # The task label names the trial and trains nothing.
        wanted = what_trains(self.config.model_dump(mode="json"))
        saved = what_trains(as_today(state["config"]))
        if saved != wanted:
            differ = differences(saved, wanted)
            raise CheckpointError(f"the checkpoint was written by a trial with another config: {'; '.join(differ)}")
        self.model.load_state_dict(state["model"])
        with rates_kept(self.optimizer, self.scheduler):  # a checkpoint of the other step continues too
            self.optimizer.load_state_dict(state["optimizer"])
            self.scheduler.load_state_dict(state["scheduler"])
        self.samples = state["samples"]
        self.history = state["history"]
        self.loss_sum, self.loss_steps = state.get("loss_since_eval", (0.0, 0))
        self.row = state.get("row")
        if self.row is None and self.history and self.history[-1].get("samples") == self.samples:
            self.row = self.history[-1]  # a checkpoint written before rows were kept: its evaluation's
        torch.set_rng_state(state["rng_cpu"])
        if "rng_cuda" in state and self.device.type == "cuda":
            torch.cuda.set_rng_state(state["rng_cuda"], self.device)

    def save(self, directory: Path, room_in: tuple[Path, ...] = ()) -> None:
        """Writes the checkpoint into `directory` (atomically: a crash mid-write leaves
        the old one) once `directory` and the folders `room_in` (where it is copied
        next) have room for it; DiskSpaceError naming the folder otherwise."""
        directory.mkdir(parents=True, exist_ok=True)
        self.check_room((directory, *room_in))
        tmp = directory / (CHECKPOINT_FILE + ".tmp")
        torch.save(self.state_dict(), tmp)
        os.replace(tmp, directory / CHECKPOINT_FILE)

    def checkpoint_bytes(self) -> int:
        """The tensors a checkpoint holds: the model's and the optimiser's (Adam's two
        moments per trainable parameter, counted before its first step makes them)."""
        size = sum(t.numel() * t.element_size() for t in _tensors(self.state_dict()))
        if not self.optimizer.state:
            size += 2 * sum(p.numel() * p.element_size() for p in self.model.parameters() if p.requires_grad)
        return size

    def check_room(self, folders) -> None:
        """DiskSpaceError naming the first of `folders` without room for a checkpoint
        (two, as the new one is written beside the last, and a margin)."""
        need = 2 * self.checkpoint_bytes() + SPACE_MARGIN
        for folder in folders:
            existing = Path(folder)
            while not existing.exists() and existing != existing.parent:  # a trial's folder is made at its first copy
                existing = existing.parent
            free = shutil.disk_usage(existing).free
            if free < need:
                raise DiskSpaceError(f"no room for a checkpoint in {folder}: {free / 2**20:.0f} MiB free, about "
                                     f"{need / 2**20:.0f} MiB needed; free some space, then resume")

    def restore(self, directory: Path) -> None:
        path = directory / CHECKPOINT_FILE
        start_over = f"delete {path} (or use another directory) to start the trial over"
        try:
            self.load_state_dict(read_checkpoint(path))
        except CheckpointError as e:
            raise CheckpointError(f"{e}; {start_over}") from None

    def backward(self, batch: Batch) -> torch.Tensor:
        """Accumulates the gradient of the batch's loss (the token mean over every
        supervised token of the batch), computed in length-grouped micro-batches
        (workloads/batching.py); returns the loss, detached."""
        tc = self.config.train
        if self.static is not None:
            self.static.accumulate(batch)
            return self.static.take_loss()
        supervised = int(batch.supervised[:, 1:].sum())  # on the CPU copy
        groups = group_rows(batch.lengths.numpy(), tc.length_groups, self.group_overhead)
        total = None
        for rows in groups:
            part = batch.rows(rows, int(batch.lengths[rows].max())).to(self.device) if len(groups) > 1 \
                else batch.to(self.device)
            with self.autocast():
                logits = self.model(part.tokens[:, :-1])
            loss = supervised_loss(logits, part, reduction="sum") / max(1, supervised)
            loss.backward()
            total = loss.detach() if total is None else total + loss.detach()
        return total

    def batches(self, stream: int):
        """The validation set's batches (or, with HELD_OUT_STREAM, the held-out
        set's: as many samples under the same seed, from a stream of their own),
        each moved to the device as it is reached."""
        tc = self.config.train
        for start in range(0, tc.val_samples, tc.eval_batch_size):
            yield self.task.batch(tc.val_seed, stream, start, min(tc.eval_batch_size, tc.val_samples - start)).to(self.device)

    def validation_batches(self) -> list:
        """The validation set, built once and kept on the device for the whole trial."""
        return list(self.batches(VALID_STREAM))

    def evaluate(self, batches, with_generation: bool, held_out: bool = False) -> dict:
        """The registry's metrics on `batches`; with `held_out` (the final
        evaluation), the held-out metrics too, on the held-out set."""
        self.model.eval()
        generation = with_generation and self.task.generates
        predictions = [] if generation else None
        metrics = teacher_forced(self.model, batches, self.autocast, predictions)
        metrics["gen_accuracy"] = (
            generation_accuracy(self.model, self.task, batches, self.autocast, predictions) if generation else None
        )
        if held_out:  # measured once: a batch at a time, beside the validation set kept on the device
            on_held_out = teacher_forced(self.model, self.batches(HELD_OUT_STREAM), self.autocast)
            metrics.update({name: on_held_out[measured_as] for name, measured_as in HELD_OUT.items()})
        self.model.train()
        return metrics


class LoopRun:
    """What a run of the loop (`train_loop`: a process, from its start or a resume)
    keeps between its steps, a lone trial's (`_Run`) or an array's
    (workloads/array_train.py): its step losses not yet checked, its training time
    and samples, and when it last checkpointed."""

    def __init__(self, train: TrainConfig, checkpoint_dir: Optional[Path], room_in: tuple[Path, ...],
                 clock: Callable[[], float]):
        self.train, self.room_in, self.clock = train, room_in, clock
        self.checkpoint_dir = None if checkpoint_dir is None else Path(checkpoint_dir)
        self.pending = []  # this run's step losses (device tensors) not yet checked and summed
        self.train_time, self.trained = 0.0, 0
        self.last_checkpoint = clock()

    def stepped(self, started: float, before: int, after: int, loss: torch.Tensor, step: int) -> bool:
        """Keeps a step's loss and time (it began at perf_counter `started`, with the
        samples from `before` to `after`); checks the losses every LOSS_CHECK_STEPS
        steps and before an evaluation. Returns whether an evaluation is due."""
        self.pending.append(loss.detach())
        self.trained += after - before
        eval_due = after // self.train.eval_every > before // self.train.eval_every or after == self.train.samples
        if len(self.pending) == LOSS_CHECK_STEPS or eval_due:
            self.flush_losses(step)
        self.train_time += time.perf_counter() - started
        return eval_due

    def flush_losses(self, step: int) -> None:
        raise NotImplementedError

    def row(self, trial: Trial, step: int, tokens: int, ran: dict, **extra) -> dict:
        """A trial's row: its progress (`tokens` trained this run, what it `ran` on), then `extra`."""
        return {
            "samples": trial.samples,
            "step": step,
            "train_loss": trial.loss_sum / max(1, trial.loss_steps),
            **extra,
            "lr": float(trial.scheduler.get_last_lr()[0]),  # the static step's is a device tensor
            "samples_per_s": self.trained / max(self.train_time, 1e-9),
            "tokens_per_s": tokens / max(self.train_time, 1e-9),
            **ran,
            "config": trial.config.model_dump(mode="json"),
        }

    def checkpoint_due(self, asked: bool) -> bool:
        """Whether a checkpoint between evaluations is due: asked for, or its interval passed."""
        return self.checkpoint_dir is not None and (asked or self.clock() - self.last_checkpoint >= self.train.checkpoint_every_s)


class _Run(LoopRun):
    """One run of a lone trial's loop: its steps, rows, checkpoints and reports.
    `run_trial` is the loop; this is what each of its steps calls."""

    def __init__(self, trial: Trial, report: Optional[Report], checkpoint_dir: Optional[Path],
                 room_in: tuple[Path, ...], clock: Callable[[], float]):
        super().__init__(trial.config.train, checkpoint_dir, room_in, clock)
        self.trial, self.report = trial, report
        self.train_tokens = 0

    @property
    def samples(self) -> int:
        return self.trial.samples

    training = True  # a lone trial trains until its budget is spent or it fails (an array's members may all fail)

    def stopped(self, metrics: dict, step: int) -> dict:
        """The metrics a stopped run returns: its latest, or its progress where it has none yet."""
        return {**(metrics or self.progress(step, final_eval=False, evaluated=False)), "stopped": True}

    def train_step(self) -> tuple[int, bool]:
        """One optimiser step on the next batch of the stream: the steps done so far
        (a resumed run's included) and whether an evaluation is due after it."""
        trial, tc = self.trial, self.trial.config.train
        started = time.perf_counter()
        count = min(tc.batch_size, tc.samples - trial.samples)
        batch = trial.task.batch(tc.seed, TRAIN_STREAM, trial.samples, count)
        batch_tokens = int(batch.lengths.sum())  # counted on the CPU copy: no GPU sync per step
        if trial.static is not None:
            loss = trial.static.step(batch)
        else:
            trial.optimizer.zero_grad(set_to_none=True)
            loss = trial.backward(batch)
            if tc.grad_clip is not None:
                torch.nn.utils.clip_grad_norm_(trial.model.parameters(), tc.grad_clip)
            trial.optimizer.step()
        trial.scheduler.step()
        step = trial.scheduler.last_epoch
        before = trial.samples
        trial.samples += count
        self.train_tokens += batch_tokens
        return step, self.stepped(started, before, trial.samples, loss, step)

    def flush_losses(self, step: int) -> None:
        """Sums the pending step losses into the trial's, raising at the first non-finite one."""
        if not self.pending:
            return
        recent = torch.stack(self.pending).cpu()
        self.pending.clear()
        bad = (~torch.isfinite(recent)).nonzero()
        if len(bad):
            raise non_finite_loss(self.trial.config, recent[bad[0]].item(), step - len(recent) + 1 + int(bad[0]))
        self.trial.loss_sum += float(recent.sum())
        self.trial.loss_steps += len(recent)

    def progress(self, step: int, **extra) -> dict:
        return self.row(self.trial, step, self.train_tokens, self.trial.resolved(), **extra)

    def checkpoint(self, step: int, reason: str) -> dict:
        """A progress row (no evaluation), checkpointed with it and reported."""
        self.flush_losses(step)
        metrics = self.progress(step, final_eval=False, evaluated=False, checkpoint_reason=reason)
        self.trial.row = {k: v for k, v in metrics.items() if k != "config"}
        self._save_and_report(metrics)
        return metrics

    def evaluate(self, step: int, val_batches) -> dict:
        """An evaluation row (the held-out set and generation at the last), kept in the
        trial's history, checkpointed with it and reported."""
        trial, tc = self.trial, self.trial.config.train
        final = trial.samples == tc.samples
        scores = trial.evaluate(val_batches, with_generation=final or tc.gen_every_eval, held_out=final)
        metrics = self.progress(step, **scores, final_eval=final, evaluated=True)
        trial.loss_sum, trial.loss_steps = 0.0, 0
        trial.history.append({k: v for k, v in metrics.items() if k != "config"})
        trial.row = trial.history[-1]
        self._save_and_report(metrics)
        return metrics

    def _save_and_report(self, metrics: dict) -> None:
        if self.checkpoint_dir is not None:
            self.trial.save(self.checkpoint_dir, self.room_in)
            self.last_checkpoint = self.clock()
        if self.report is not None:
            self.report(metrics, self.checkpoint_dir)


@dataclass(frozen=True)
class Checkpoints:
    """Where a trial keeps its checkpoint: `dir` (None: none is kept), continued from
    `resume_from` (a directory holding an earlier checkpoint of the same config);
    every checkpoint first checks that `dir` and the folders `room_in` (where it is
    copied next) have room for it (DiskSpaceError), and so does the trial before it
    trains."""

    dir: Optional[Path] = None
    resume_from: Optional[Path] = None
    room_in: tuple[Path, ...] = ()


@dataclass(frozen=True)
class Hooks:
    """What a trial's host (a sweep's worker, `train`) hears and asks, all optional.

    `report(metrics, checkpoint_dir)`: each row, with its checkpoint's folder, at
    every evaluation and at every checkpoint between them (after `checkpoint_every_s`
    seconds of `clock`, a progress row with `evaluated` False, so that a killed trial
    loses at most that much training). `on_step(samples)` follows every optimiser
    step. `stop()`, asked after every step, is the host's stop request (each host
    reads it from a stop file: orchestrator.stopping): the step is checkpointed,
    then the run ends (the metrics hold `stopped`: True), or, with `stop_ends`
    False, trains on (a sweep's worker: Tune ends the trial once the checkpoint is
    reported, and would count a trial that ended itself as finished). An
    evaluation is a checkpoint: a request heard there ends the run at once, and a
    worker's waits for the next step. `on_resume(rows)` gets the rows
    reported up to the checkpoint a trial continues from (its evaluations, then its
    own row), for the host to store those missing (rundir.catch_up). `stop_after`
    ends the run once that many samples are done (to simulate an interruption)."""

    report: Optional[Report] = None
    on_step: Optional[Callable[[int], None]] = None
    stop: Optional[Callable[[], bool]] = None
    stop_ends: bool = True
    on_resume: Optional[Callable[[list[dict]], None]] = None
    clock: Callable[[], float] = time.monotonic
    stop_after: Optional[int] = None


def run_trial(config: dict | TrialConfig, hooks: Hooks = Hooks(), checkpoints: Checkpoints = Checkpoints()) -> dict:
    """Trains one trial to its sample budget and returns the final metrics; see
    Hooks and Checkpoints for what its host hears and where it keeps its state."""
    config = TrialConfig.model_validate(config)
    trial = Trial(config)
    h, store = hooks, checkpoints
    if store.resume_from is not None and (Path(store.resume_from) / CHECKPOINT_FILE).exists():
        trial.restore(Path(store.resume_from))
        if h.on_resume is not None and trial.row is not None:
            h.on_resume([dict(r) for r in trial.history if r is not trial.row and r != trial.row] + [dict(trial.row)])
    if store.dir is not None:  # a trial that could not keep its first checkpoint trains nothing
        trial.check_room((store.dir, *store.room_in))
    val_batches = trial.validation_batches()
    trial.model.train()
    run = _Run(trial, h.report, store.dir, store.room_in, h.clock)
    # A trial resumed after its last evaluation trains nothing and returns that evaluation.
    metrics = {**trial.history[-1], "config": config.model_dump(mode="json")} if trial.history else {}
    return train_loop(run, h, val_batches, metrics)


def train_loop(run: LoopRun, h: Hooks, val_batches, metrics):
    """Trains `run` (a lone trial's `_Run`, or an array's: workloads/array_train.py)
    to its sample budget, evaluating, checkpointing and stopping as `h` says (Hooks);
    returns the latest metrics (`metrics` until there are new ones)."""
    total = run.train.samples
    while run.samples < total and run.training:
        step, eval_due = run.train_step()
        if h.on_step is not None:
            h.on_step(run.samples)
        if eval_due:
            metrics = run.evaluate(step, val_batches)
            if h.stop_after is not None and run.samples >= h.stop_after:
                break
            if h.stop_ends and h.stop is not None and h.stop() and run.samples < total:
                return run.stopped(metrics, step)
            continue
        asked = h.stop is not None and h.stop()
        if run.checkpoint_due(asked):
            metrics = run.checkpoint(step, "stop" if asked else "time")
        if asked and h.stop_ends:
            return run.stopped(metrics, step)
        if h.stop_after is not None and run.samples >= h.stop_after:
            break
    return metrics
