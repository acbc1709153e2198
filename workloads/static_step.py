"""A lone trial's training step at static shapes: the step a CUDA graph captures.

At the paper's smaller sizes a step is launch-bound on a GPU (1,400-2,000 kernels a
step at n=16, the GPU idle about 90% of it: docs/gpu.md), and a CUDA graph replays
a captured step's kernels with one launch. A graph needs shapes and addresses that
do not change, so this step computes a batch as fixed micro-batches:

- the rows, sorted by length, are cut into chunks of `ceil(batch_size /
  length_groups)` rows (the last one filled up with empty rows), each padded to
  the narrowest of a few fixed widths per task and n (`bucket_widths`) that holds
  it; every micro-batch is copied into the static buffers of its width;
- each micro-batch's forward and backward adds its summed token losses over the
  batch's supervised-token count (a device scalar) into the gradients, which stay
  allocated (zeroed in place, never set to None: a graph holds their addresses);
- one update clips, steps Adam (its rate a device tensor the schedule fills in
  place, `capturable` on CUDA, so the step count lives on the device too) and zeroes
  the gradients.

The padding is data: the models are causal and empty rows carry no supervised
token, so the loss and every gradient are the plain step's up to the order of the
floating-point sums (tests/workloads/test_static_step.py checks every family). On
CUDA the first `EAGER_STEPS` steps run as they are (Adam's state is made and every
kernel's lazy set-up is done), then each width's micro-step and the update are
captured once and replayed; a CPU runs the same functions uncaptured, so what a
graph replays is what the CPU tests run.
"""

from __future__ import annotations

import contextlib
import math
from typing import Iterator, Optional

import numpy as np
import torch

from workloads.adam import AdamW
from workloads.evaluate import supervised_loss
from workloads.tasks import Batch

# The fixed widths per task and n: this many, evenly spaced up to the task's longest
# sample, each rounded up to WIDTH_MULTIPLE tokens (tensor-core tiles): four captures
# of the micro-step. They pad more than the length groups' exact cuts (uncaptured on
# two CPU cores the step runs at 0.76x-0.85x the plain one's speed:
# bench/results/levers_graphs_cpu.json); what a capture saves is measured on a GPU.
BUCKETS = 4
WIDTH_MULTIPLE = 8
# Steps run uncaptured before the capture (PyTorch's CUDA-graph notes ask for a few
# on a side stream first: Adam makes its state at its first step, cuBLAS and the
# autograd engine set themselves up lazily).
EAGER_STEPS = 3
# The rate's dtype by device: float64 on CPU, where Adam's single-tensor update then
# equals the plain step's (a Python float) bit for bit; float32 on CUDA, the
# capturable and fused updates' own.
RATE_DTYPE = {"cpu": torch.float64}


# The GPUs (torch.cuda.get_device_name) where the captured step measured faster than
# the plain one (bench/gpu_check.sh; docs/gpu.md): `cuda_graphs: auto` captures there.
GRAPHS_MEASURED_FASTER: tuple[str, ...] = ()


def uses_static_step(setting: str, device: torch.device) -> bool:
    """Whether a trial's `cuda_graphs` setting (on, off, auto) gives it the static step on `device`."""
    if setting == "auto":
        return device.type == "cuda" and torch.cuda.get_device_name(device) in GRAPHS_MEASURED_FASTER
    return setting == "on"


def bucket_widths(max_length: int, buckets: int = BUCKETS, multiple: int = WIDTH_MULTIPLE) -> tuple[int, ...]:
    """The static widths of a task whose longest sample is `max_length` tokens,
    narrowest first; the widest is `max_length` (a batch never holds more)."""
    widths = {min(max_length, -(-math.ceil(max_length * k / buckets) // multiple) * multiple) for k in range(1, buckets + 1)}
    return tuple(sorted(widths))


def static_chunks(lengths: np.ndarray, rows: int, widths: tuple[int, ...]) -> list[tuple[np.ndarray, int]]:
    """The micro-batches of a batch whose rows are `lengths` tokens long: each row's
    index once, `rows` at most per chunk, longest first, and each chunk's width, the
    narrowest of `widths` that holds its longest row."""
    lengths = np.asarray(lengths, np.int64)
    order = np.argsort(-lengths, kind="stable")
    out = []
    for start in range(0, len(order), rows):
        index = order[start : start + rows]
        longest = int(lengths[index].max())
        fits = [w for w in widths if w >= longest]
        if not fits:
            raise ValueError(f"a row of {longest} tokens is longer than the widest static width {widths[-1]}")
        out.append((index, fits[0]))
    return out


def static_optimizer(model: torch.nn.Module, lr: float, device: torch.device) -> torch.optim.Optimizer:
    """Adam as the plain step's (AdamW, weight decay 0), its rate a device tensor the
    schedule fills in place; on CUDA fused and capturable (a graph captures it)."""
    cuda = device.type == "cuda"
    rate = torch.tensor(lr, dtype=RATE_DTYPE.get(device.type, torch.float32), device=device)
    return AdamW(model.parameters(), lr=rate, weight_decay=0.0, fused=cuda or None, capturable=cuda)


@contextlib.contextmanager
def rates_kept(optimizer: torch.optim.Optimizer, scheduler) -> Iterator[None]:
    """Loads a checkpoint's optimiser and schedule (inside the block) keeping this
    trial's kind of rate: the static step's device tensor, filled with the loaded
    value, or the plain step's float; and its schedule's base rates, which are the
    config's (a float rate multiplied on the host, a tensor one on the device: a
    resumed trial must schedule as a straight one does)."""
    kept = [(group["lr"], group.get("initial_lr")) for group in optimizer.param_groups]
    base = list(scheduler.base_lrs)
    yield
    for group, (rate, initial) in zip(optimizer.param_groups, kept):
        value = float(group["lr"])
        if isinstance(rate, torch.Tensor):
            rate.fill_(value)
            group["lr"] = rate
        else:
            group["lr"] = value
        if initial is not None:
            group["initial_lr"] = initial
    scheduler.base_lrs = base
    scheduler._last_lr = [group["lr"].clone() if isinstance(group["lr"], torch.Tensor) else group["lr"]
                          for group in optimizer.param_groups]


class StaticStep:
    """The step of one trial (workloads/train.py's Trial) at static shapes; with
    `capture` (CUDA), its micro-steps and update are captured as graphs after
    EAGER_STEPS steps and replayed."""

    def __init__(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, autocast, device: torch.device,
                 rows: int, widths: tuple[int, ...], grad_clip: Optional[float], capture: bool):
        self.model, self.optimizer, self.autocast, self.device = model, optimizer, autocast, device
        self.rows, self.widths, self.grad_clip, self.capture = rows, widths, grad_clip, capture
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.denominator = torch.ones((), device=device)  # the batch's supervised tokens
        self.loss = torch.zeros((), device=device)  # the step's loss, summed over its micro-batches
        self.buffers: dict[int, Batch] = {}
        self.graphs: dict = {}  # width, and "update", to its graph once captured
        self.steps = 0

    @property
    def captured(self) -> bool:
        return bool(self.graphs)

    def step(self, batch: Batch) -> torch.Tensor:
        """One optimiser step on `batch` (on the CPU); returns its loss, a device scalar."""
        if self.capture and not self.graphs and self.steps >= EAGER_STEPS:
            self._capture(with_targets=batch.targets is not None)
        self.accumulate(batch)
        self._run("update", self.update)
        self.steps += 1
        return self.take_loss()

    def take_loss(self) -> torch.Tensor:
        """The loss accumulated since the last take (a device scalar), the sum zeroed."""
        loss = self.loss.clone()
        self.loss.zero_()
        return loss

    def accumulate(self, batch: Batch) -> None:
        """Adds the batch's loss into `self.loss` and its gradient into the parameters'."""
        self.denominator.fill_(max(1, int(batch.supervised[:, 1:].sum())))  # counted on the CPU copy
        for index, width in static_chunks(batch.lengths.numpy(), self.rows, self.widths):
            buffer = self._buffer(width, batch.targets is not None)
            self._fill(buffer, batch.rows(index, width))
            self._run(width, lambda: self.micro(buffer))

    def micro(self, buffer: Batch) -> None:
        """One micro-batch's forward and backward (the function a graph captures)."""
        with self.autocast():
            logits = self.model(buffer.tokens[:, :-1])
        loss = supervised_loss(logits, buffer, reduction="sum") / self.denominator
        loss.backward()
        self.loss.add_(loss.detach())

    def update(self) -> None:
        """Clip, Adam's step, the gradients zeroed in place (the function a graph captures).
        No list of the gradients outlives it: autograd adds into a gradient in place
        only where nothing else holds it."""
        if self.grad_clip is not None:
            torch.nn.utils.clip_grad_norm_(self.params, self.grad_clip)
        self.optimizer.step()
        grads = [p.grad for p in self.params if p.grad is not None]
        torch._foreach_zero_(grads)

    def _run(self, key, eager) -> None:
        graph = self.graphs.get(key)
        if graph is None:
            eager()
        else:
            graph.replay()

    def _buffer(self, width: int, with_targets: bool) -> Batch:
        if width not in self.buffers:
            shape, d = (self.rows, width), self.device
            self.buffers[width] = Batch(
                tokens=torch.zeros(shape, dtype=torch.long, device=d),
                supervised=torch.zeros(shape, dtype=torch.bool, device=d),
                lengths=torch.zeros(self.rows, dtype=torch.long, device=d),
                labels=torch.zeros(self.rows, dtype=torch.long, device=d),
                targets=torch.zeros(shape, dtype=torch.long, device=d) if with_targets else None,
            )
        return self.buffers[width]

    def _fill(self, buffer: Batch, part: Batch) -> None:
        """Copies a micro-batch (on the CPU, `rows` rows at most) into its buffer; the
        rows past it empty (token 0, nothing supervised)."""
        pin = self.device.type == "cuda"
        count = part.tokens.shape[0]
        for name in ("tokens", "supervised", "targets"):
            source, target = getattr(part, name), getattr(buffer, name)
            if target is None:
                continue
            target[:count].copy_(source.pin_memory() if pin else source, non_blocking=pin)
            target[count:].zero_()

    def _capture(self, with_targets: bool) -> None:
        """Captures each width's micro-step and the update. Each width first runs on a
        side stream with an empty micro-batch (no supervised token: it adds exactly
        zero to every gradient), widest first (the rotary tables then cover all).
        The graphs share one memory pool: each one's intermediates die inside it, and
        what outlives a replay (gradients, loss, Adam's state) was allocated before."""
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        self.denominator.fill_(1.0)
        with torch.cuda.stream(side):
            for width in reversed(self.widths):
                buffer = self._buffer(width, with_targets)
                for tensor in (buffer.tokens, buffer.supervised, buffer.targets):
                    if tensor is not None:
                        tensor.zero_()
                self.micro(buffer)
        torch.cuda.current_stream().wait_stream(side)
        self.loss.zero_()
        pool = None
        # thread_local: a sweep's trial trains in a thread of Tune's worker, beside others
        # that may touch CUDA while a graph is captured (the global mode fails the capture).
        for width in self.widths:
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=pool, capture_error_mode="thread_local"):
                self.micro(self.buffers[width])
            pool = graph.pool()
            self.graphs[width] = graph
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=pool, capture_error_mode="thread_local"):
            self.update()
        self.graphs["update"] = graph
