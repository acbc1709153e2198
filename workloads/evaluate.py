"""Evaluation on a fixed validation set: loss, teacher-forced exact match, and
generation accuracy by batched greedy decoding with the incremental decoders."""

import numpy as np
import torch
import torch.nn.functional as F

from workloads.tasks import Batch


def supervised_loss(logits: torch.Tensor, batch: Batch, reduction: str = "mean") -> torch.Tensor:
    """Cross-entropy on the supervised targets: position t predicts token t+1."""
    targets = batch.next_tokens
    mask = batch.supervised[:, 1:]
    losses = F.cross_entropy(logits.float().transpose(1, 2), targets, reduction="none")
    if reduction == "none":
        return losses * mask
    return (losses * mask).sum() / mask.sum()


@torch.no_grad()
def teacher_forced(model, batches: list[Batch], autocast) -> dict:
    """Mean supervised loss per token, the fraction of samples whose every
    supervised token is the model's argmax under teacher forcing (exact match), and
    the fraction of supervised tokens that are (token accuracy: for mqar, zoology's
    accuracy per query)."""
    loss_sum, tokens, exact, samples, right_tokens = 0.0, 0, 0, 0, 0
    for batch in batches:
        with autocast():
            logits = model(batch.tokens[:, :-1])
        loss_sum += supervised_loss(logits, batch, reduction="none").sum().item()
        mask = batch.supervised[:, 1:]
        tokens += int(mask.sum())
        right = (logits.argmax(-1) == batch.next_tokens) | ~mask
        exact += int(right.all(dim=1).sum())
        right_tokens += int((right & mask).sum())
        samples += batch.tokens.shape[0]
    return {"val_loss": loss_sum / tokens, "val_exact_match": exact / samples, "val_token_accuracy": right_tokens / tokens}


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


def generation_accuracy(model, task, batches: list[Batch], autocast) -> float:
    """The fraction of rows whose generated answer equals their label."""
    right = total = 0
    for batch in batches:
        prompts = batch.tokens[:, : task.prompt_length]
        got = answers(task, generate(model, task, prompts, autocast))
        right += int((got == batch.labels.cpu().numpy().astype(np.int64)).sum())
        total += len(got)
    return right / total
