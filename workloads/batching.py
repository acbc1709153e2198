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
every cut of the sorted rows into at most `max_groups` groups.
"""

from __future__ import annotations

import numpy as np

# A group's fixed cost in tokens' worth of work, by device type; estimates, not
# fits. CPU: 128, with which grouped steps ran 1.4x to 2.3x as fast as padded ones
# at retrieval n=16 and 0.95x to 1.2x at CoT n=16, where little is padding
# (bench/bench_step.py, bench/results/step_cpu.json). CUDA: not yet measured (no
# GPU in the session that wrote this); a step of the paper's models there runs a
# few hundred kernels, a few ms, the time of some thousands of tokens at the rates
# of README's GPU table: 4,096 until bench_step.py --device cuda measures it.
OVERHEAD_TOKENS = {"cpu": 128, "cuda": 4096}


def group_rows(lengths: np.ndarray, max_groups: int, overhead_tokens: int, multiple: int = 1) -> list[np.ndarray]:
    """Row indices of each group, longest rows first; together they are every row
    once. Each group's width is its longest row rounded up to `multiple` (static
    shapes for kernels that prefer them); the split minimises the sum over groups
    of rows x width + overhead_tokens."""
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
