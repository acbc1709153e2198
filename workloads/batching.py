"""Length-grouped micro-batches: one training batch computed without the work on padding.

A batch of samples is right-padded to its longest row, and IsTree's rows differ
in length: a tree's trace is the longest a graph can write, a non-tree's stops at
its first cycle. In a retrieval batch 30% of the padded tokens are padding, in a
CoT batch 13%. Here the rows are sorted by
length and cut into a few contiguous groups, each padded only to its own longest
row; the trainer runs each group and sums their gradients.

What a trial computes does not change: the models are causal, so a row's logits
at its own positions do not depend on what is to its right, and the loss is the
same token mean over the whole batch (each group's summed token losses divided by
the batch's supervised-token count). Only the order of floating-point sums
differs (tests/workloads/test_batching.py checks loss and gradients).

Each group costs a fixed overhead (kernel launches and Python per layer), so the
split minimises padded tokens plus `overhead_tokens` per group, exactly, over
every cut of the sorted rows into at most `max_groups` groups. The split depends
only on the batch and the model, never on timings: runs stay reproducible.
"""

from __future__ import annotations

import numpy as np

# A group's fixed cost (kernel launches and Python per layer) in floating-point
# operations' worth of work, by device type; over a model's ~6 flops per parameter
# and token (forward and backward) it is a number of tokens, so a tiny model, whose
# tokens are cheap, splits a batch only where the split saves many of them. CPU:
# measured on two cores, a tiny Transformer's (21k parameters) extra group cost
# about 1.3 ms, the time of ~170 of its tokens (2.1e7 flops); 4e7 keeps a margin.
# At 0.5M parameters that is ~13 tokens a group. CUDA: not yet measured (no GPU in
# the session that wrote this): a few ms of launches at the ~10 TFLOP/s of docs/gpu.md's
# GPU table, 2e10, to be replaced by what bench_step.py --device cuda shows.
OVERHEAD_FLOPS = {"cpu": 4e7, "cuda": 2e10}


# A split must save at least this share of the padded batch's tokens: below it, the
# per-group costs the flop count misses (Mamba's compiled CPU scan starts its
# threads once per layer and call) ate the saving (CoT at 0.5M, 13% padding: 0.93x
# to 0.97x for Mamba and the hybrid). Retrieval batches save 25-30%.
MIN_SAVING = 0.15


def overhead_tokens(device_type: str, n_params: int) -> int:
    """The fixed cost of one more group, in tokens of a model of `n_params` parameters."""
    return int(OVERHEAD_FLOPS.get(device_type, 0.0) / (6 * max(1, n_params)))


def group_rows(lengths: np.ndarray, max_groups: int, overhead_tokens: int, multiple: int = 1,
               min_saving: float | None = None) -> list[np.ndarray]:
    """Row indices of each group, longest rows first; together they are every row
    once. Each group's width is its longest row rounded up to `multiple` (static
    shapes for kernels that prefer them); the split minimises the sum over groups
    of rows x width + overhead_tokens, and is kept only where it saves at least
    `min_saving` (default MIN_SAVING) of the padded batch's tokens."""
    lengths = np.asarray(lengths, np.int64)
    order = np.argsort(-lengths, kind="stable")
    rows = len(order)
    if rows == 0:
        return []
    widths = -(-lengths[order] // multiple) * multiple  # non-increasing
    groups = max(1, min(max_groups, rows))
    # cost[g, j]: the cheapest split of the first j sorted rows into g groups; a group
    # of rows i..j-1 costs (j - i) * widths[i] + overhead.
    span = np.arange(rows + 1)[None, :] - np.arange(rows)[:, None]  # (i, j): j - i
    step = np.where(span > 0, span * widths[:, None] + overhead_tokens, np.inf)
    cost = np.full((groups + 1, rows + 1), np.inf)
    cost[0, 0] = 0.0
    cut = np.zeros((groups + 1, rows + 1), np.int64)
    for g in range(1, groups + 1):
        total = cost[g - 1, :rows, None] + step  # (i, j)
        cut[g] = total.argmin(axis=0)
        cost[g] = total.min(axis=0)
    best = int(np.argmin(cost[1:, rows])) + 1
    min_saving = MIN_SAVING if min_saving is None else min_saving
    if cost[best, rows] - best * overhead_tokens > (1 - min_saving) * rows * widths[0]:
        best = 1  # too little padding to be worth another pass
    bounds, j = [], rows
    for g in range(best, 0, -1):
        i = int(cut[g, j])
        bounds.append((i, j))
        j = i
    return [order[i:j] for i, j in reversed(bounds)]


def padded_tokens(lengths: np.ndarray, groups: list[np.ndarray], multiple: int = 1) -> int:
    """Tokens the groups compute, padding included."""
    lengths = np.asarray(lengths, np.int64)
    return int(sum(len(g) * (-(-lengths[g].max() // multiple) * multiple) for g in groups))
