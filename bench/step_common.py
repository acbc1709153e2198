"""What the training-step benches share (bench_arrays.py, profile_step.py): their
arguments, the device they run on, and a lone trial's loop to time."""

import argparse
import time

import torch

from workloads.config import trial_config
from workloads.tasks import IsTreeConfig
from workloads.train import Trial, _Run


def step_arguments(description: str) -> argparse.ArgumentParser:
    """The arguments every step bench takes; each adds its own."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--archs", nargs="+", default=["transformer", "mamba", "hybrid"])
    ap.add_argument("--setup", default="retrieval")
    ap.add_argument("--n", nargs="+", type=int, default=[16, 64])
    ap.add_argument("--size", default="0.5M")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--out", default=None)
    return ap


def device_of(requested: str) -> tuple[torch.device, str]:
    """The device `--device` names (auto: a GPU where there is one), and its name for the figures."""
    device = torch.device("cuda" if requested == "auto" and torch.cuda.is_available() else
                          "cpu" if requested == "auto" else requested)
    return device, torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"


def step_config(arch: str, setup: str, n: int, size: str, device: str, lr: float = 1e-3, seed: int = 0):
    """A trial as the paper's grid runs it (batch 64), with a budget no bench reaches."""
    return trial_config(arch, size, IsTreeConfig(n=n, setup=setup), lr=lr, seed=seed, samples=10**8, batch_size=64,
                        warmup_samples=640, eval_every=10**8, device=device)


def array_configs(config, k: int) -> list:
    """k trials of `config` that differ in rate and seed alone (rates spread over a decade below its own)."""
    return [config.model_copy(update=dict(train=config.train.model_copy(update=dict(lr=config.train.lr * 10 ** (-i / k),
                                                                                      seed=i)))) for i in range(k)]


def lone_run(config) -> _Run:
    """A lone trial's loop (length groups, AdamW, LambdaLR), its model training."""
    trial = Trial(config)
    trial.model.train()
    return _Run(trial, None, None, (), time.monotonic)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
