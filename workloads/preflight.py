"""What a trial would build, built before any trial starts: a spec that validates can run.

`check_models` builds each distinct model of a list of trials with its task's
vocabulary and runs one training step's forward and backward on two real samples
(cut short), on the CPU, so that shapes a layer cannot take fail here, by trial
name, instead of in every trial at its first step. `cpu_memory_problems` holds the
trials' estimated peak memory against this machine's.
"""

from __future__ import annotations

import os

from workloads.config import TrialConfig

PREFLIGHT_TOKENS = 24  # a short cut of real samples: enough for every layer's shapes


def check_models(trials: list[TrialConfig], on_cpu: bool = True) -> list[str]:
    """'trial: what fails' for every trial whose model cannot be built or run. A
    model whose mixer runs only on CUDA (its config's `cpu_refusal`) is not built
    here: refused where the trials run `on_cpu`, else left to its trial's start."""
    import torch

    from workloads.evaluate import supervised_loss
    from workloads.models import build_model
    from workloads.tasks import build_task

    problems, seen = [], {}
    for trial in trials:
        refusal = trial.model.n_recurrent_layers and trial.model.mixer.cpu_refusal
        if refusal:
            if on_cpu:
                problems.append(f"{trial.name}: {trial.model.mixer.name} runs only on CUDA: {refusal}")
            continue
        task = build_task(trial.task)
        key = (trial.model.model_dump_json(), task.vocab_size)
        if key not in seen:
            try:
                torch.manual_seed(0)
                model = build_model(trial.model.model_copy(update={"mixer": _cpu_mixer(trial.model.mixer)}), task.vocab_size)
                batch = task.batch(0, 0, 0, 2)
                width = min(PREFLIGHT_TOKENS, batch.tokens.shape[1])
                batch = batch.rows([0, 1], width)
                logits = model(batch.tokens[:, :-1])
                if logits.shape != (2, width - 1, task.vocab_size):
                    raise ValueError(f"logits of shape {tuple(logits.shape)}, not (2, {width - 1}, {task.vocab_size})")
                supervised_loss(logits, batch, reduction="sum").backward()
                seen[key] = ""
            except Exception as e:  # any layer's failure, named below
                seen[key] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        if seen[key]:
            problems.append(f"{trial.name}: its model ({trial.model.arch} {trial.model.size}) cannot run: {seen[key]}")
    return problems


def _cpu_mixer(mixer):
    """The mixer as it runs on CPU: a scan asked for as `cuda` runs as `auto` here."""
    return mixer.model_copy(update={"scan": "auto"}) if getattr(mixer, "scan", None) == "cuda" else mixer


def memory_bytes() -> tuple[int, int]:
    """This machine's total and available memory in bytes (Linux's /proc/meminfo;
    elsewhere the total twice)."""
    try:
        info = dict(line.split(":", 1) for line in open("/proc/meminfo"))
        return int(info["MemTotal"].split()[0]) * 1024, int(info["MemAvailable"].split()[0]) * 1024
    except (OSError, KeyError, ValueError):
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        return total, total


def cpu_memory_problems(trials: list[TrialConfig], concurrent: int) -> tuple[list[str], list[str]]:
    """(errors, warnings) for trials that train on this machine's CPU: a trial whose
    estimated peak memory exceeds the machine's cannot run; `concurrent` trials at
    once that exceed what is available now may not."""
    from workloads.memory import GiB, PROCESS_OVERHEAD, trial_estimate

    total, available = memory_bytes()
    errors, peaks = [], []
    for trial in trials:
        estimate = trial_estimate(trial)
        need = estimate.total - PROCESS_OVERHEAD  # no CUDA context on the CPU
        peaks.append(need)
        if need > total:
            part, setting = estimate.largest()
            per_batch = estimate.activations + estimate.logits
            one_row = need - per_batch + per_batch / trial.train.batch_size
            if one_row > total and part in ("activations", "logits"):  # no batch size helps: the model's shape
                setting = (f"the model's dimensions (its size preset, or the --dim / axes.model values given): even "
                           f"one sample per batch needs about {one_row / GiB:.1f} GB")
            errors.append(f"{trial.name} needs about {need / GiB:.1f} GB, more than this machine's "
                          f"{total / GiB:.1f} GB (most of it its {part}): lower {setting}")
    warnings = []
    if peaks and concurrent > 1:
        together = sum(sorted(peaks, reverse=True)[:concurrent])
        if together > available:
            warnings.append(f"the {concurrent} largest trials need about {together / GiB:.1f} GB together, more than "
                            f"the {available / GiB:.1f} GB available now: lower resources.max_concurrent or "
                            "raise resources.cpus_per_trial")
    return errors, warnings
