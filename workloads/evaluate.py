"""Evaluation on a fixed validation set: loss, teacher-forced exact match, and
generation accuracy by batched greedy decoding with the incremental decoders."""

from collections.abc import Iterable

import numpy as np
import torch
import torch.nn.functional as F

from workloads.metrics import METRICS, TeacherForced
from workloads.tasks import Batch


def supervised_loss(logits: torch.Tensor, batch: Batch, reduction: str = "mean") -> torch.Tensor:
    """Cross-entropy on the supervised targets: position t predicts token t+1."""
    targets = batch.next_tokens
    mask = batch.supervised[:, 1:]
    losses = F.cross_entropy(logits.float().transpose(1, 2), targets, reduction="none")
    if reduction == "none":
        return losses * mask
    if reduction == "sum":
        return (losses * mask).sum()
    return (losses * mask).sum() / mask.sum()


@torch.no_grad()
def teacher_forced(model, batches: Iterable[Batch], autocast, predictions: list | None = None) -> dict:
    """Every teacher-forced metric of the registry (workloads/metrics.py: the mean
    supervised loss per token, exact match, token accuracy, ...), each its tally's
    sum over the batches over its count. With `predictions` (a list), each batch's
    (B, T-1) argmax tokens are appended to it, on the CPU."""
    tallies = {name: m.tally for name, m in METRICS.items() if m.tally is not None}
    sums, counts = dict.fromkeys(tallies, 0.0), dict.fromkeys(tallies, 0)
    for batch in batches:
        with autocast():
            logits = model(batch.tokens[:, :-1])
        mask = batch.supervised[:, 1:]
        argmax = logits.argmax(-1)
        seen = TeacherForced(losses=supervised_loss(logits, batch, reduction="none"), supervised=mask,
                             right=(argmax == batch.next_tokens) | ~mask)
        for name, tally in tallies.items():
            total, count = tally(seen)
            sums[name] += float(total)
            counts[name] += int(count)
        if predictions is not None:
            predictions.append(argmax.cpu())
    return {name: sums[name] / counts[name] for name in tallies}


def settled_rows(task, batch: Batch, argmax: torch.Tensor) -> np.ndarray:
    """Rows whose greedy generation is known from teacher forcing alone: where
    every token the model writes after the prompt, up to the row's answer, is its
    argmax under teacher forcing (the retriever's answers, which generation takes
    from the retriever, aside) and the task stops at the answer and nowhere
    before. Greedy decoding then writes exactly the row's own tokens: each step
    sees the prefix teacher forcing saw. (B,) bool; argmax: (B, T-1) on the CPU."""
    tokens = batch.tokens.cpu().numpy()
    batch_size, width = tokens.shape
    if batch.targets is not None or width <= task.prompt_length:
        return np.zeros(batch_size, bool)
    lengths = batch.lengths.cpu().numpy()
    positions = np.arange(width)[None, :]
    written = (positions >= task.prompt_length) & (positions < lengths[:, None])  # what generation writes
    matches = np.zeros_like(written)
    matches[:, 1:] = argmax.numpy() == tokens[:, 1:]
    if task.uses_retriever:
        matches[:, 1:] |= tokens[:, :-1] == task.end_search_id  # the retriever's answer, not the model's
    stops = np.zeros_like(written)
    for pos in range(task.prompt_length, width):
        stops[:, pos] = task.stopped(tokens, pos)
    stops_at_end = stops[np.arange(batch_size), lengths - 1] & ((stops & written).sum(axis=1) == 1)
    return (matches | ~written).all(axis=1) & stops_at_end


@torch.no_grad()
def generate(model, task, prompts: torch.Tensor, autocast, max_length: int | None = None) -> np.ndarray:
    """Greedy continuation of prompts (B, P) until the task says every row has
    written its answer (`task.stopped`; IsTree: TRUE or FALSE).

    With a retriever (the retrieval setup), the token after each ENDSEARCH is the
    retriever's answer, computed from the row's text so far; the model's own guess
    is dropped. Returns the (B, T) tokens (PAD after a row's stop).
    """
    batch, prompt_len = prompts.shape
    max_length = max_length or task.max_length
    seqs = np.full((batch, max_length), task.pad_id, np.int64)
    seqs[:, :prompt_len] = prompts.cpu().numpy()
    lengths = np.full(batch, prompt_len, np.int64)
    done = np.zeros(batch, bool)
    with autocast():
        logits, state = model.prefill(prompts, max_length=max_length)
    for pos in range(prompt_len, max_length):
        nxt = logits.argmax(-1).cpu().numpy()
        if task.uses_retriever:
            asks = np.flatnonzero(~done & (seqs[:, pos - 1] == task.end_search_id))
            if len(asks):
                nxt[asks] = task.retrieve_rows(seqs, lengths, asks)
        nxt[done] = task.pad_id
        seqs[:, pos] = nxt
        lengths[~done] += 1
        done |= task.stopped(seqs, pos)
        if done.all() or pos + 1 == max_length:
            break
        with autocast():
            logits = model.step(torch.from_numpy(nxt).to(prompts.device), state)
    return seqs


def answers(task, seqs: np.ndarray) -> np.ndarray:
    """Each row's answer in the code of the batch's labels (the task decides: IsTree
    gives 1 for TRUE, 0 for FALSE), -1 where a row wrote none."""
    return task.answers(seqs)


def generation_accuracy(model, task, batches: list[Batch], autocast, predictions: list | None = None,
                        batch_size: int | None = None) -> float:
    """The fraction of rows whose generated answer equals their label.

    With `predictions` (teacher_forced's argmax per batch), rows whose generation
    teacher forcing already decides (`settled_rows`) are scored from their own
    tokens, and only the others are decoded, gathered into batches of
    `batch_size` rows (default: the first batch's)."""
    right = total = 0
    prompts, labels = [], []
    for i, batch in enumerate(batches):
        rows = np.arange(batch.tokens.shape[0])
        if predictions is not None:
            settled = settled_rows(task, batch, predictions[i])
            got = answers(task, batch.tokens[settled].cpu().numpy())
            right += int((got == batch.labels[settled].cpu().numpy().astype(np.int64)).sum())
            total += len(got)
            rows = rows[~settled]
        index = torch.as_tensor(rows, device=batch.tokens.device)
        prompts.append(batch.tokens[index, : task.prompt_length])
        labels.append(batch.labels[index].cpu().numpy().astype(np.int64))
    prompts_all, labels_all = torch.cat(prompts), np.concatenate(labels)
    step = batch_size or batches[0].tokens.shape[0]
    for start in range(0, len(labels_all), step):
        got = answers(task, generate(model, task, prompts_all[start : start + step], autocast))
        right += int((got == labels_all[start : start + step]).sum())
        total += len(got)
    return right / total
