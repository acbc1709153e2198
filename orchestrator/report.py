"""The report of a run, as orchestrator.rundir read it: the best learning rate per
cell, the paper's findings, tables and figures. Presentation only: it opens no
file of the run (every figure comes from the `Run` it is given), so a report can
always be regenerated from the stored results.
"""

import contextlib
import itertools
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import pandas as pd

from orchestrator.secrets import command, redact
from orchestrator.rundir import (MLFLOW_FILE, OPTUNA_FILE, PLOT_FILES, REPORT_FILES, WANDB_FAILED, Run, check_report_dir,
                                 record_report, small_text)
from workloads.metrics import HEADLINE, METRICS, PLOTTED, SOLVED, rank_key
from workloads.models import PRESETS, preset
from workloads.models.config import SIZES
from workloads.naming import model_label, preset_of, short_float, significant
from workloads.results import (BASELINE, BASELINE_BY_SEED, BEST_COLUMNS, BY_SEED, CELL, HELD_OUT_BY_SEED, MODEL,
                               ROBUST, SEED_IDS)
from workloads.tasks import DEFAULT_TASK, TASKS
from workloads.tasks.verdicts import Findings

GROUP = list(CELL)
SIZE_ORDER = {size: i for i, size in enumerate(SIZES)}


def size_key(label: str):
    """Sorts size labels by preset, then by the swept dimensions (tiny-dstate4)."""
    base, _, rest = str(label).partition("-")
    dims = [(part.rstrip("0123456789"), int(part[len(part.rstrip("0123456789")):] or 0)) for part in rest.split("-") if part]
    return SIZE_ORDER.get(base, len(SIZE_ORDER)), base, dims
def setup_key(label: str):
    """Orders setups as the paper (vanilla, cot, retrieval), then by task-axis label."""
    base, _, rest = str(label).partition("-")
    return {"vanilla": 0, "cot": 1, "retrieval": 2}.get(base, 3), base, size_key("-" + rest)[2]


# The paper reports teacher-forced exact match (docs/experiment.md): it heads every table and
# figure. Generation accuracy with the real retriever is ours and stands beside it
# (workloads/metrics.py holds every metric's names and direction).
# best.csv's columns, their types and what each holds: workloads/results.py.
SUMMARIES = tuple(METRICS)  # best.csv: mean and std of each


def reaches(values, solved: float):
    """Whether mean exact matches reach `solved`: within 1e-9, as a mean of exactly
    0.9 (0.95 and 0.85) is 0.8999999999999999 in floats (exact match is k/N with N
    far below 1e9, so no value below `solved` passes)."""
    return values >= solved - 1e-9


def best_by_cell(df: pd.DataFrame, metric: str = HEADLINE, mode: str = "max", tie_break: str = "val_loss") -> pd.DataFrame:
    """Per (arch, setup, size, n): the learning rate whose mean final `metric` over
    seeds is best (highest for mode max, lowest for min; where rates tie, the best
    mean `tie_break` in its own direction decides), with the mean and spread over
    seeds of exact match, token accuracy, generation accuracy and validation loss.

    Only a learning rate that finished on every seed of its cell competes, so that one
    lucky seed never stands for the cell. Where none did (an Optuna search: each seed
    has a study of its own, its own rates), each seed contributes its own best trial
    and the cell is their mean; `lr` is then the rates' geometric mean and `lrs` names
    each. `trials` lists the trials a row summarises, `val_samples` the validation
    samples each seed's exact match counts (NaN where its trials differ)."""
    later = ("model", *MODEL, "still_training")  # best_table's (the cell's model), and the merged ones below
    columns = [c for c in BEST_COLUMNS if c not in (*later, *ROBUST, *BASELINE)]
    done = df[df["state"] == "finished"]
    if done.empty:
        return pd.DataFrame(columns=columns)
    tie_mode = METRICS[tie_break].mode

    def key(m, how):  # higher is better, whatever the metric's direction; never measured never wins
        values = done[m] if m in done else pd.Series(math.nan, index=done.index)
        return values.map(lambda v: rank_key(v, how)).astype(float)

    done = done.assign(_key=key(metric, mode), _tie=key(tie_break, tie_mode),
                       _cell_seeds=done.groupby(GROUP)["seed"].transform("nunique"))
    ranked = dict(by=["_key", "_tie"], ascending=False, kind="stable")
    shared = done.groupby(GROUP + ["lr"])["seed"].transform("nunique") == done["_cell_seeds"]
    per_seed = done[~done.set_index(GROUP).index.isin(done[shared].set_index(GROUP).index)]
    per_seed = per_seed.sort_values(**ranked).groupby(GROUP + ["seed"]).head(1)
    chosen = pd.concat([done[shared].assign(_pick=lambda d: d["lr"]), per_seed.assign(_pick=math.nan)])
    rows = []
    for cell, trials in chosen.groupby(GROUP + ["_pick"], dropna=False, sort=False):
        lrs = sorted(trials["lr"])
        lr = lrs[0] if lrs[0] == lrs[-1] else math.exp(sum(map(math.log, lrs)) / len(lrs))
        by_seed = trials.sort_values("seed")
        sizes = set(trials["train.val_samples"]) if "train.val_samples" in trials else set()
        row = dict(zip(GROUP, cell), lr=float(lr), lrs="/".join(significant(v, 3) for v in by_seed["lr"]),
                   seeds=len(trials), trials=";".join(by_seed["trial"]), _key=trials["_key"].mean(),
                   _tie=trials["_tie"].mean(), val_samples=sizes.pop() if len(sizes) == 1 else math.nan,
                   # enough digits that k = value * val_samples is recovered exactly (the findings count samples)
                   **{BY_SEED: "/".join(f"{v:.8g}" for v in by_seed[HEADLINE]),
                      SEED_IDS: "/".join(str(int(s)) for s in by_seed["seed"]),
                      HELD_OUT_BY_SEED: "/".join(f"{v:.8g}" for v in by_seed["test_exact_match"])
                      if "test_exact_match" in by_seed else math.nan})
        for m in SUMMARIES:  # (a frame of an older run may lack a newer metric: NaN)
            values = trials[m] if m in trials else pd.Series(math.nan, index=trials.index)
            row[m], row[f"{m}_std"] = values.mean(), values.std()
        rows.append(row)
    by_pick = pd.DataFrame(rows)
    best = by_pick.sort_values(**ranked).groupby(GROUP).head(1)
    best = best.merge(robust_by_cell(done, ranked), on=GROUP, how="left").merge(baseline_by_cell(done), on=GROUP,
                                                                                  how="left")
    columns += list(ROBUST) + list(BASELINE)
    std_columns = [c for c in columns if c.endswith("_std")]
    best[std_columns] = best[std_columns].fillna(0.0)
    order = {label: i for i, label in enumerate(sorted(best["size"].unique(), key=size_key))}
    return best[columns].sort_values(GROUP, key=lambda c: c.map(order) if c.name == "size" else c).reset_index(drop=True)


# ROBUST: the score robust to the learning rate (docs/specs.md, "Robust to the learning
# rate"): per cell, each seed picks its rate on validation (as best_by_cell ranks) and is
# scored on the held-out set; beside it, how much of the rate grid solves the cell.
# BASELINE: a cell's exact match at its arch's paper rate (DEFAULT_LR), where its rate was
# chosen among several and that rate was one of them: the baseline the findings' line
# (g)(i) reads a gap at.


def baseline_by_cell(done: pd.DataFrame) -> pd.DataFrame:
    """Per cell of finished trials tried at two or more rates, one of them its arch's
    paper rate on every seed of the cell: that rate and each seed's exact match at
    it, held-out where every seed measured it, else validation ("/"-joined by seed)."""
    from workloads.models.config import DEFAULT_LR

    rows = []
    for cell, trials in done.groupby(GROUP, sort=False):
        paper = DEFAULT_LR.get(cell[0])
        at = trials[trials["lr"] == paper] if paper is not None else trials.iloc[:0]
        if trials["lr"].nunique() < 2 or at.empty or at["seed"].nunique() != trials["seed"].nunique():
            continue
        at = at.sort_values("seed")
        held = at["test_exact_match"] if "test_exact_match" in at else pd.Series(math.nan, index=at.index)
        values = held if held.notna().all() else at[HEADLINE]
        rows.append(dict(zip(GROUP, cell), baseline_lr=float(paper), **{BASELINE_BY_SEED: "/".join(f"{v:.8g}"
                                                                                              for v in values)}))
    return pd.DataFrame(rows, columns=GROUP + list(BASELINE))


def by_base_size(best: pd.DataFrame):
    """(base size, its rows) for each preset size (tiny, 0.5M, ...), in order, each
    row with a `model` label: its arch, and its size where that is a variant of the
    base (mamba (tiny-dmodel16)), so that the variants of one size share a table and a
    figure with the presets they are compared with."""
    base = best["size"].map(preset_of)
    for size in sorted(base.unique(), key=size_key):
        part = best[base == size]
        yield size, part.assign(model=model_labels(part))


def robust_by_cell(done: pd.DataFrame, ranked: dict, solved: float = SOLVED) -> pd.DataFrame:
    """Per cell of finished trials `done` (ranked by their `_key` and `_tie`
    columns, as best_by_cell ranks): robust_exact_match, the mean over seeds of the
    held-out exact match at the rate each seed's validation picked (NaN where the
    held-out set was not measured: runs of earlier versions), its spread over
    seeds, and rates_solving of rates: the learning rates tried whose mean
    validation exact match over their seeds reaches `solved`."""
    picked = done.sort_values(**ranked).groupby(GROUP + ["seed"]).head(1)
    held_out = picked["test_exact_match"] if "test_exact_match" in picked else pd.Series(math.nan, index=picked.index)
    score = picked.assign(_held_out=held_out).groupby(GROUP)["_held_out"].agg(["mean", "std"])
    by_rate = done.groupby(GROUP + ["lr"])[HEADLINE].mean().reset_index()
    grid = by_rate.assign(_solves=reaches(by_rate[HEADLINE], solved)).groupby(GROUP)["_solves"].agg(["sum", "count"])
    out = pd.DataFrame({"robust_exact_match": score["mean"], "robust_exact_match_std": score["std"],
                        "rates_solving": grid["sum"].astype(int), "rates": grid["count"].astype(int)})
    return out.reset_index()


def robust_tables(best: pd.DataFrame) -> str:
    """Per size, the robust score's table (rows setup x arch, columns n), where the
    held-out set was measured."""
    if "robust_exact_match" not in best or best["robust_exact_match"].isna().all():
        return ""
    out = []
    for size, part in by_base_size(best):
        ns = sorted(part["n"].unique())
        out += [f"### {size} models: held-out exact match at each seed's rate, and the rates that solve\n",
                "| setup | arch | " + " | ".join(f"n={n}" for n in ns) + " |", "|---|---|" + "---|" * len(ns)]
        for (setup, model), rows in part.groupby(["setup", "model"], sort=True):
            cells = {r["n"]: _fmt_robust(r) for _, r in rows.iterrows()}
            out.append(f"| {setup} | {model} | " + " | ".join(cells.get(n, "-") for n in ns) + " |")
        out.append("")
    return "\n".join(out)


def _fmt_robust(row) -> str:
    score = row["robust_exact_match"]
    if score != score:
        return "-"
    one = int(row.get("seeds", 2)) == 1
    text = f"{score:.3f}" + ("" if one else f" ± {row['robust_exact_match_std']:.3f}")
    return text + f" ({int(row['rates_solving'])}/{int(row['rates'])} rates solve)"


def _fmt(row, metric: str, with_lr: bool) -> str:
    if row[metric] != row[metric]:  # NaN: not measured
        return "-"
    one = int(row.get("seeds", 2)) == 1  # no spread was measured: none is printed
    text = f"{row[metric]:.3f}" + ("" if one else f" ± {row[metric + '_std']:.3f}")
    if one and not with_lr:
        text += " (1 seed)"
    if with_lr:
        lrs = row.get("lrs")
        by_seed = isinstance(lrs, str) and len(set(lrs.split("/"))) > 1
        rate = f"lr {lrs} by seed" if by_seed else f"lr {_rate(row['lr'])}"
        text += f" ({rate}, {int(row['seeds'])} seed{'s' if row['seeds'] > 1 else ''})"
    return text


def _rate(lr: float) -> str:
    """A learning rate as written in a spec (1.004e-3 whole, never rounded to 1e-3), or,
    one an Optuna search drew, to three significant digits as its trial's name."""
    exact = short_float(lr)
    return exact if len(exact.split("e")[0].replace(".", "").lstrip("-")) <= 4 else significant(lr, 3)


def markdown_tables(best: pd.DataFrame, selected_by: str = f"{HEADLINE} max") -> str:
    """Per size (its variants beside its presets), a table (rows setup x arch,
    columns n) per metric measured: exact match, the headline, then generation
    accuracy and token accuracy of the same trials."""
    out = []
    for size, part in by_base_size(best):
        ns = sorted(part["n"].unique())
        for metric, title in _measured(part):
            first = metric == HEADLINE
            out.append(f"### {size} models: {title}\n")
            if first:
                out.append(f"Mean ± std over seeds at the last evaluation (a cell of one seed: its value, no spread); "
                           f"per cell the lr chosen by {selected_by}.\n")
            out.append("| setup | arch | " + " | ".join(f"n={n}" for n in ns) + " |")
            out.append("|---|---|" + "---|" * len(ns))
            for (setup, model), rows in part.groupby(["setup", "model"], sort=True):
                cells = {r["n"]: _fmt(r, metric, with_lr=first) for _, r in rows.iterrows()}
                out.append(f"| {setup} | {model} | " + " | ".join(cells.get(n, "-") for n in ns) + " |")
            out.append("")
    return "\n".join(out)


def _measured(best: pd.DataFrame) -> list[tuple[str, str]]:
    """The plotted metrics some cell has a value of (no generation accuracy for a
    task without a generation protocol, none of token accuracy in old runs)."""
    return [(m, METRICS[m].title) for m in PLOTTED if m in best and best[m].notna().any()]


def _arch_rank(arch: str) -> int:
    """An architecture's place in the model registry (one past the end if unknown)."""
    return list(PRESETS).index(arch) if arch in PRESETS else len(PRESETS)


VARIANT_MARKERS = "XPd*h"  # a preset's variants, in turn, drawn hollow


def arch_style(arch: str, variant: int = 0) -> dict:
    """An architecture's colour and marker, the same in every figure (frontier.png
    too), in the order of the model registry; the `variant`-th variant of a preset
    (mamba (tiny-dstate1), 1, 2, ...) is drawn dash-dotted in its arch's colour,
    with a hollow marker of its own (issue 53: the two Mambas shared colour and
    marker)."""
    i = _arch_rank(arch)
    if not variant:
        return dict(color=f"C{i % 10}", marker="soDv^<>ph*X"[min(i, 10)], ls="-")
    return dict(color=f"C{i % 10}", marker=VARIANT_MARKERS[(variant - 1) % len(VARIANT_MARKERS)], ls="-.",
                mfc="none")


def variant_numbers(models: list[str]) -> dict[str, int]:
    """Each model label's variant number: 0 for a preset (its arch), 1, 2, ... for an
    arch's variants in order."""
    out, seen = {}, {}
    for model in sorted(set(models), key=model_key):
        arch = model.split(" (")[0]
        out[model] = 0 if model == arch else seen.setdefault(arch, 0) + 1
        if model != arch:
            seen[arch] = out[model]
    return out


def model_key(model: str) -> tuple:
    """Figures' and legends' order: the registry's order of archs, each preset before
    its variants."""
    return _arch_rank(model.split(" (")[0]), model


def chance_level(task_cls, metric: str, setup: str) -> Optional[float]:
    """What guessing scores on `metric` in `setup` (a setup label: cot-familyrandom is
    cot), where the task says so and it is above zero; else None."""
    levels = {HEADLINE: task_cls.exact_match_chance, "val_token_accuracy": task_cls.token_accuracy_chance}
    return levels.get(metric, {}).get(setup.split("-")[0]) or None


def plot(best: pd.DataFrame, out_dir: Path, task: str = DEFAULT_TASK) -> list[Path]:
    """The paper's figure (accuracy against n, a panel per setup, a line per arch),
    one PNG per size (its variants beside its presets) and metric:
    exact_match_<size>.png and gen_accuracy_<size>.png.
    Where the task says what guessing scores (`exact_match_chance`,
    `token_accuracy_chance`, `generation_chance`), a dashed line marks it. Each
    arch has its colour and marker in every figure (`arch_style`)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    task_cls = TASKS[task][1]
    paths = []
    setups = sorted(set(best["setup"]), key=setup_key)
    for metric, _ in _measured(best):
        for size, part in by_base_size(best):
            # Panels of 3.2 in: at a report's width (about 800 px) the labels stay readable (issue 53).
            fig, axes = plt.subplots(1, len(setups), figsize=(max(5, 3.2 * len(setups)), 3.2), sharey=True, squeeze=False)
            numbers = variant_numbers(part["model"].tolist())
            for ax, setup in zip(axes[0], setups):
                for model, rows in sorted(part[part["setup"] == setup].groupby("model"), key=lambda g: model_key(g[0])):
                    rows = rows.sort_values("n")
                    ax.errorbar(rows["n"], rows[metric], yerr=rows[metric + "_std"], capsize=3, label=model,
                                **arch_style(rows["arch"].iloc[0], variant=numbers[model]))
                ax.set_title(setup)
                ax.set_xlabel(task_cls.n_label)
                ax.set_xscale("log", base=2)
                ax.set_xticks(sorted(part["n"].unique()), labels=[str(n) for n in sorted(part["n"].unique())])
                chance = chance_level(task_cls, metric, setup)
                if chance:
                    ax.axhline(chance, color="grey", lw=0.8, ls="--")
                    ax.annotate("guessing", xy=(0.02, chance), xycoords=("axes fraction", "data"), xytext=(0, 2),
                                textcoords="offset points", fontsize=8, color="grey")
                guess = task_cls.generation_chance
                if metric == "gen_accuracy" and guess is not None:
                    # Rows that never write an answer count as wrong: below chance is possible.
                    ax.set_ylim(min(guess - 0.1, part[metric].min() - 0.05), 1.02)
                    ax.axhline(guess, color="grey", lw=0.5, ls="--")
                    ax.annotate("guessing the answer", xy=(0.02, guess), xycoords=("axes fraction", "data"),
                                xytext=(0, 2), textcoords="offset points", fontsize=8, color="grey")
                else:
                    ax.set_ylim(-0.02, 1.02)
                ax.grid(alpha=0.3)
            axes[0][0].set_ylabel(METRICS[metric].short)  # in words, from the registry
            short, name = METRICS[metric].short, METRICS[metric].plot
            paths.append(_saved(fig, axes[0][-1], f"{task_cls.title or task}, {size} models: {short}",
                                out_dir / f"{name}_{size}.png"))
    return paths


def _saved(fig, legend_axes, title: str, path: Path, legend_size: int = 9) -> Path:
    """`fig` with its legend (on `legend_axes`) and title, written to `path` at the
    report's resolution and closed."""
    import matplotlib.pyplot as plt

    legend_axes.legend(loc="best", fontsize=legend_size)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def frontier(best: pd.DataFrame, solved: float = SOLVED, model_of=None, metric: str = HEADLINE) -> pd.DataFrame:
    """Per (setup, arch, size): the largest n whose `metric` (by default exact
    match, mean over seeds at the cell's best lr; robust_exact_match: the robust
    score) reaches `solved`, beside the model's state: the recurrent
    state a sequence carries (state_floats) and attention's KV cache per token.
    largest_solved is NaN where no n is solved; solves_all where every n tried is.
    `model_of(arch, size)` gives the model config (the preset by default)."""
    model_of = model_of or preset
    rows = []
    for (setup, arch, size), cell in best.groupby(["setup", "arch", "size"], sort=False):
        cfg = model_of(arch, size)
        ok = cell.loc[reaches(cell[metric], solved), "n"]
        rows.append(dict(setup=setup, arch=arch, size=size, params=cfg.n_params, state_floats=cfg.state_floats,
                         kv_floats_per_token=cfg.kv_floats_per_token,
                         largest_solved=int(ok.max()) if len(ok) else math.nan, largest_tried=int(cell["n"].max()),
                         solves_all=len(ok) == len(cell)))
    out = pd.DataFrame(rows)
    if not len(out):
        return out
    order = {label: i for i, label in enumerate(sorted(out["size"].unique(), key=size_key))}
    return out.sort_values(["setup", "arch", "size"], key=lambda c: c.map(order) if c.name == "size" else c,
                           ignore_index=True)


def _frontier_panel(ax, part: pd.DataFrame, setup: str, sample_length) -> None:
    """One setup's panel of frontier.png (`part`: its rows of the frontier table)."""
    import matplotlib.ticker

    cache = part["largest_tried"].map(lambda n: sample_length(setup, int(n)))
    part["x"] = part["state_floats"].where(part["state_floats"] > 0, part["kv_floats_per_token"] * cache)
    floor = part["largest_tried"].min() / 2  # where models that solve no n sit
    top = part["largest_tried"].max()
    part["model"] = model_labels(part) if "size" in part else part["arch"]
    numbers = variant_numbers(part["model"].tolist())
    for model, rows in sorted(part.groupby("model"), key=lambda g: model_key(g[0])):
        style = arch_style(rows["arch"].iloc[0], numbers[model])
        ax.scatter(rows["x"], rows["largest_solved"].fillna(floor), marker=style["marker"], s=50, label=model, zorder=3,
                   facecolors="none" if numbers[model] else style["color"], edgecolors=style["color"])
    every = part[part["solves_all"]]
    if len(every):  # an arrow up: it might solve larger n too
        ax.scatter(every["x"], every["largest_solved"] * 1.25, marker="^", s=18, color="black", zorder=4,
                   label="solves every n tried")
    if part["largest_solved"].isna().any():
        ax.axhline(floor, color="grey", lw=0.5, ls=":")
    for i, (_, r) in enumerate(part.sort_values("x").iterrows()):  # what varies: each model's parameters beside it
        y = r["largest_solved"] if r["largest_solved"] == r["largest_solved"] else floor
        ax.annotate(f"{r['params'] / 1000:,.1f}k params", (r["x"], y), xytext=(4, -9 - 7 * (i % 2)),
                    textcoords="offset points", fontsize=8, color="dimgrey")
    ax.set_xscale("log")
    ax.set_yscale("log", base=2)
    # Limits and ticks of its own, so that a panel where nothing is solved (every
    # point on the floor) is drawn whole: the n values, and "none" for the floor.
    ns = sorted({int(v) for v in pd.concat([part["largest_solved"].dropna(), part["largest_tried"]])})
    ax.set_ylim(floor / 1.5, top * 2)
    ax.yaxis.set_major_locator(matplotlib.ticker.FixedLocator([floor, *ns]))
    ax.yaxis.set_major_formatter(matplotlib.ticker.FixedFormatter(["none", *map(str, ns)]))
    ax.yaxis.set_minor_locator(matplotlib.ticker.NullLocator())
    # Ticks at 1, 2 and 5 of each decade: a panel's points may span less than one.
    ax.xaxis.set_major_locator(matplotlib.ticker.LogLocator(base=10, subs=(1, 2, 5)))
    ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:,.0f}"))
    ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    lo, hi = part["x"].min(), part["x"].max()
    ax.set_xlim(lo / 2, hi * 2)
    ax.set_title(setup)
    ax.set_xlabel("state floats (attention only: KV cache at largest n)", fontsize=8)
    ax.grid(alpha=0.3, which="both")


def plot_frontier(table: pd.DataFrame, out_dir: Path, solved: float, sample_length=None,
                  robust: bool = False) -> Path:
    """frontier.png: largest n solved against state size, log-log, a panel per setup
    and a marker per arch, each point labelled with its model's parameters; models
    with attention carry a KV cache instead of (or beside) a fixed state, and are
    drawn at their recurrent state, or, without one, at the cache they hold at the
    largest n tried. No line is fitted or drawn through the points: a handful of
    models at a few n cannot show a slope, and a reference line would be placed by
    its own assumption. `sample_length(setup, n)` gives the tokens of a sample (the default
    task's), for the cache of models without a recurrent state. `robust`: the table
    was decided by the robust score (frontier_robust.png)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if sample_length is None:
        def sample_length(setup, n):
            return TASKS[DEFAULT_TASK][0](n=n, setup=setup).longest_sample

    setups = sorted(dict.fromkeys(table["setup"]), key=setup_key)  # the paper's order, as the other figures
    fig, axes = plt.subplots(1, len(setups), figsize=(max(5, 3.6 * len(setups)), 3.6), squeeze=False)
    for ax, setup in zip(axes[0], setups):
        _frontier_panel(ax, table[table["setup"] == setup].copy(), setup, sample_length)
    score = "robust score" if robust else "exact match"  # robust: held-out, at each seed's own rate
    axes[0][0].set_ylabel(f"largest n solved\n({score} >= {solved:g})")
    shown = {}  # every panel's entries, once each (the arrow may be drawn in one panel only)
    for ax in axes[0]:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            shown.setdefault(label, handle)
    axes[0][-1].legend(shown.values(), shown.keys(), fontsize=9, loc="best")
    fig.suptitle("Largest n solved against the recurrent state (floats), each model's parameters beside it"
                 + ("\n(robust to the learning rate)" if robust else ""), fontsize=10)
    fig.tight_layout()
    path = out_dir / ("frontier_robust.png" if robust else "frontier.png")
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


LR_WINDOW = ("lr", "seed_ids", "held_out_by_seed", "held_out", "solves", "unmeasured")


def lr_window(df: pd.DataFrame, solved: float = SOLVED) -> pd.DataFrame:
    """The learning-rate window (issue 62): per cell (arch, setup, size, n) that
    finished at two or more learning rates with a held-out exact match, and per rate,
    each seed's held-out exact match (by seed), their mean, and whether the mean
    reaches `solved`: the rates where the model solves, not only its best one.
    Recurrent models learn recall only inside a narrow window of rates (Okpekpe and
    Orvieto, 2025), so one rate per architecture can read training as capacity."""
    if "test_exact_match" not in df or "state" not in df:
        return pd.DataFrame(columns=GROUP + list(LR_WINDOW))
    done = df[df["state"] == "finished"]
    cell = done.groupby(GROUP)
    # A cell with a held-out value (runs of earlier versions have none) tried at two
    # or more rates; a trial whose held-out value is missing stays, named: it was left
    # out, and with it a model's only second rate, silently (issue 83, class 9).
    done = done[(cell["lr"].transform("nunique") >= 2) & cell["test_exact_match"].transform(lambda v: v.notna().any())]
    rows = []
    for (*cell, lr), trials in done.groupby(GROUP + ["lr"], sort=True):
        by_seed = trials.sort_values("seed")
        values = by_seed["test_exact_match"]
        unmeasured = int(values.isna().sum())
        mean = float(values.mean()) if not unmeasured else math.nan  # a mean of some seeds is not the rate's
        rows.append(dict(zip(GROUP, cell), lr=float(lr), seed_ids="/".join(str(int(s)) for s in by_seed["seed"]),
                         held_out_by_seed="/".join(f"{v:.3f}" for v in values),
                         held_out=mean, solves=not unmeasured and reaches(mean, solved), unmeasured=unmeasured))
    return pd.DataFrame(rows, columns=GROUP + list(LR_WINDOW))


def window_text(rates: pd.DataFrame) -> str:
    """One cell's window in words, from its rows of `lr_window`: "1e-3 to 3e-3 (2 of
    3 rates)", a rate inside that does not solve named ("..., not 2e-3"), "none of
    3 rates"."""
    rates = rates.sort_values("lr")
    unmeasured = rates.get("unmeasured", pd.Series(0, index=rates.index)).fillna(0).astype(int)
    missing = [f"{_rate(lr)} on {k} of {len(seeds.split('/'))} seed(s)"
               for lr, k, seeds in zip(rates["lr"], unmeasured, rates["seed_ids"]) if k]
    unsaid = f"; no held-out value at {', '.join(missing)}" if missing else ""
    solving = rates.loc[rates["solves"].astype(bool), "lr"].tolist()
    if not solving:
        return f"none of {len(rates)} rates" + (f" ({unsaid[2:]})" if unsaid else "")
    span = _rate(solving[0]) if len(solving) == 1 else f"{_rate(solving[0])} to {_rate(solving[-1])}"
    gaps = [_rate(lr) for lr, ok, k in zip(rates["lr"], rates["solves"], unmeasured)
            if not ok and not k and solving[0] < lr < solving[-1]]
    return (f"{span} ({len(solving)} of {len(rates)} rates" + (f"; not {', '.join(gaps)}" if gaps else "") + unsaid
            + ")")


def _window_spans(lrs: list[float]) -> list[tuple[float, float]]:
    """Each rate's stretch of a log axis: to the geometric midpoints with its
    neighbours (at either end, as far out as in)."""
    logs = [math.log(lr) for lr in lrs]
    mids = [(a + b) / 2 for a, b in zip(logs, logs[1:])]
    edges = [2 * logs[0] - mids[0], *mids, 2 * logs[-1] - mids[-1]]
    return [(math.exp(lo), math.exp(hi)) for lo, hi in zip(edges, edges[1:])]


def plot_lr_window(window: pd.DataFrame, out_dir: Path, solved: float = SOLVED,
                   task: str = DEFAULT_TASK) -> list[Path]:
    """lr_window_<size>.png per base size: a panel per setup (rows) and n (columns),
    held-out exact match against the learning rate, each seed a point and the mean
    over seeds a line per model, the rates where that mean reaches `solved` shaded
    in the model's colour."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    task_cls, paths = TASKS[task][1], []
    for size, part in by_base_size(window):
        setups, ns = sorted(set(part["setup"]), key=setup_key), sorted(part["n"].unique())
        fig, axes = plt.subplots(len(setups), len(ns), figsize=(max(5, 3.2 * len(ns)), 2.9 * len(setups)),
                                 sharey=True, squeeze=False)
        numbers = variant_numbers(part["model"].tolist())
        for (i, setup), (j, n) in itertools.product(enumerate(setups), enumerate(ns)):
            ax = axes[i][j]
            cell = part[(part["setup"] == setup) & (part["n"] == n)]
            for model, rows in sorted(cell.groupby("model"), key=lambda g: model_key(g[0])):
                rows = rows.sort_values("lr")
                style = arch_style(rows["arch"].iloc[0], variant=numbers[model])
                ax.plot(rows["lr"], rows["held_out"], label=model, **style)
                for lr, seeds in zip(rows["lr"], rows["held_out_by_seed"]):
                    values = [float(v) for v in seeds.split("/")]
                    ax.scatter([lr] * len(values), values, s=12, color=style["color"], alpha=0.6, zorder=3)
                for (lo, hi), ok in zip(_window_spans(rows["lr"].tolist()), rows["solves"]):
                    if ok:
                        ax.axvspan(lo, hi, color=style["color"], alpha=0.12, lw=0)
            ax.axhline(solved, color="grey", lw=0.8, ls="--")
            ax.set_xscale("log")
            ax.set_ylim(-0.02, 1.02)
            ax.set_title(f"{setup}, {task_cls.n_label} = {n}", fontsize=10)
            ax.grid(alpha=0.3)
            if i == len(setups) - 1:
                ax.set_xlabel("learning rate")
        for row in axes:
            row[0].set_ylabel("held-out exact match")
        paths.append(_saved(fig, axes[0][-1], f"{task_cls.title or task}, {size} models: the learning-rate window",
                            out_dir / f"lr_window_{size}.png", legend_size=8))
    return paths


def _lr_window_section(df: pd.DataFrame, out_dir: Path, solved: float, task: str) -> list[str]:
    """The report's section on the learning-rate window: its figures and, per base
    size, each model's window per setup and n."""
    window = lr_window(df, solved)
    if window.empty:
        return []
    lines = ["", "## The learning-rate window", "",
             "Held-out exact match against the learning rate, per cell tried at two or more rates: each seed a "
             f"point, the mean over seeds a line, and shaded the rates where that mean reaches {solved:g} (the "
             "model's window). A model that solves inside a narrow window only is a question of training as much "
             "as of capacity (docs/specs.md).", ""]
    for path in plot_lr_window(window, out_dir, solved, task):
        lines += [f"![{path.stem}]({path.name})", ""]
    for size, part in by_base_size(window):
        ns = sorted(part["n"].unique())
        lines += [f"### {size} models: the rates whose held-out exact match reaches {solved:g}", "",
                  "| setup | model | " + " | ".join(f"n={n}" for n in ns) + " |", "|---|---|" + "---|" * len(ns)]
        for (setup, model), rows in sorted(part.groupby(["setup", "model"]),
                                           key=lambda g: (setup_key(g[0][0]), model_key(g[0][1]))):
            cells = {n: window_text(r) for n, r in rows.groupby("n")}
            lines.append(f"| {setup} | {model} | " + " | ".join(cells.get(n, "-") for n in ns) + " |")
        lines.append("")
    return lines


def open_commands(run: Run, run_dir: str, local: Path) -> list[str]:
    """For each tool this run logged to, the one command (or address) that opens it
    on this run: what the console's last lines and report.md's first say. `run_dir`
    is the run directory as the user names it (a path or a URI); its files are
    looked for in `local`, where the report is written from."""
    spec, local = run.spec or {}, Path(local)
    tracking, search = spec.get("tracking") or {}, spec.get("search") or {}
    where = str(run_dir).rstrip("/")
    out = [f"a notebook: `from icr_sweep import load_run; load_run({where!r})`"]
    if tracking.get("tensorboard", True) and next(local.glob("*/events.out.tfevents.*"), None):
        out.append(f"TensorBoard: `{command('tensorboard', '--logdir', where)}`{_missing('tensorboard')}")
    mlflow = tracking.get("mlflow")
    if mlflow is not None:
        uri = mlflow.get("tracking_uri") or f"sqlite:///{where}/{MLFLOW_FILE}"
        experiment = mlflow.get("experiment") or spec.get("name", "")
        number = None if mlflow.get("tracking_uri") else _mlflow_experiment_id(local / MLFLOW_FILE, experiment)
        # MLflow 3 opens an experiment in its GenAI view (its runs table without a parameter or metric
        # column); these query parameters open the model-training view, every metric charted (issue 53).
        runs = (f", then http://127.0.0.1:5000/#/experiments/{number}/runs?workflowType=machine_learning"
                "&compareRunsMode=CHART (its runs, charted)" if number else "")
        opens = redact(uri) if uri.startswith("http") else command("mlflow", "ui", "--backend-store-uri", uri)
        out.append(f"MLflow: `{opens}`{runs} "
                   f"(experiment {experiment}; in MLflow 3's own views choose \"Model training\")"
                   + ("" if uri.startswith("http") else _missing("mlflow")))
    wandb = tracking.get("wandb")
    if wandb:
        if wandb.get("mode", "offline") == "offline":
            folder = f"{wandb.get('dir') or where}/wandb"
            out.append(f"W&B (offline): `{command('wandb', 'sync', folder)}/offline-run-*`, then the project "
                       f"{wandb['project']}; here, without upload: `{command('wandb', 'beta', 'leet', folder)}`"
                       + _missing("wandb"))
        else:
            entity = f"{wandb['entity']}/" if wandb.get("entity") else ""
            from orchestrator.tracking import wandb_app

            out.append(f"W&B: {wandb_app()}/{entity}{wandb['project']} (group {wandb.get('group') or spec.get('name')})")
        failed = small_text(local / WANDB_FAILED).strip()
        if failed:
            out[-1] += f"; W&B stopped logging some of its trials: {failed}"
    if search.get("method") == "optuna":
        storage = search.get("storage") or (f"sqlite:///{where}/{OPTUNA_FILE}" if (local / OPTUNA_FILE).exists() else None)
        if storage:
            out.append(f"Optuna: `{command('optuna-dashboard', storage)}`{_missing('optuna-dashboard')}")
    return out


# What installs each command open_commands prints, and how to tell it is here: MLflow's
# UI is not in mlflow-skinny (the project's tracker extra), whose `mlflow ui` serves no page.
_INSTALLS = {"tensorboard": "tensorboard", "mlflow": "mlflow", "wandb": "wandb", "optuna-dashboard": "optuna-dashboard"}


def _missing(tool: str) -> str:
    """'' where this environment can run the command that opens `tool`; else what to install."""
    import importlib.util
    import shutil

    here = shutil.which(tool) is not None
    if here and tool == "mlflow":
        spec = importlib.util.find_spec("mlflow")
        here = bool(spec and spec.origin and (Path(spec.origin).parent / "server" / "js" / "build").is_dir())
    return "" if here else f" (not installed here: `pip install {_INSTALLS[tool]}` first)"


def _mlflow_experiment_id(db: Path, name: str) -> Optional[str]:
    """The id of experiment `name` in an MLflow SQLite store (None where it cannot be read)."""
    import sqlite3

    if not db.is_file():
        return None
    try:
        with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as con:
            row = con.execute("SELECT experiment_id FROM experiments WHERE name = ?", (name,)).fetchone()
    except sqlite3.Error:
        return None
    return str(row[0]) if row else None


@dataclass(frozen=True)
class Written:
    """A report as write_report wrote it: its Markdown, the per-cell best table, the
    findings, and the title, trial counts and notes it opens with (the console's
    summary renders these; it never reads the Markdown back)."""

    text: str
    best: pd.DataFrame
    findings: Findings
    title: str
    counts: str
    notes: tuple[str, ...]


def write_report(run: Run, out_dir: Path, solved: float = SOLVED, location: Optional[str] = None) -> Written:
    """Writes report.md, findings.json, results.csv, best.csv and the plots of `run`
    (as orchestrator.rundir.read_run read it) into `out_dir`, and for a sweep over two
    or more n, frontier.csv and frontier.png (a cell is solved at exact match >=
    `solved`). Each cell's learning rate is chosen by the sweep's search.metric and
    search.mode. `location`: the run directory as the user names it, for the commands
    that open it in each tool (default `out_dir`)."""
    out_dir, df = Path(out_dir), run.trials
    if df.empty:
        raise FileNotFoundError(f"{out_dir}: no trial results (no */params.json)")
    owned = check_report_dir(out_dir)  # a folder of `train` trials may hold a user's report.md: RunDirError naming it
    metric, mode, tie_break = run.chosen_by
    df.to_csv(out_dir / "results.csv", index=False)
    best, falling = best_table(run)
    best.to_csv(out_dir / "best.csv", index=False)
    for stale in (p for pattern in PLOT_FILES for p in out_dir.glob(pattern) if owned is None or p.name in owned):
        stale.unlink()  # an earlier report's: a plot of a metric no longer measured must not linger
    plots = plot(best, out_dir, run.task) if not best.empty else []
    counts = df["state"].value_counts().to_dict()
    selected_by = (f"{metric} ({'highest' if mode == 'max' else 'lowest'} mean over seeds; ties by "
                   f"{'highest' if METRICS[tie_break].mode == 'max' else 'lowest'} {tie_break})")
    unfinished = unfinished_trials(run)
    title = f"Sweep report: {out_dir.name}"
    tally = f"{len(df)} trials: " + ", ".join(f"{v} {k}" for k, v in sorted(counts.items())) + "."
    partial = [partial_note(run, unfinished, location or str(out_dir))] if len(unfinished) else []
    lines = [f"# {title}", "", tally, "", *[f"**Note:** {note}\n" for note in partial],
             "Open this run in:", "", *[f"- {line}" for line in open_commands(run, location or str(out_dir), out_dir)], "",
             *[f"**Note:** {note}\n" for note in run.notes],
             _headline(best, run.task), ""]
    # What the run shows first (issue 53): the findings in one sentence each, then the
    # figures, then the tables, then each verdict's full reasoning.
    found = TASKS[run.task][1].findings(best, unfinished) if not best.empty else Findings()
    lines += _findings_summary(found)
    lines += ["## Figures", "", *[f"![{p.stem}]({p.name})" for p in plots], ""] if plots else []
    lines += [*_models_section(best), "## Best learning rate per cell", "",
              markdown_tables(best, selected_by) if not best.empty else "No finished trial yet.\n"]
    robust = robust_tables(best) if not best.empty else ""
    lines += _robust_section(robust, solved)
    lines += _lr_window_section(df, out_dir, solved, run.task)
    if not best.empty and best["n"].nunique() >= 2:
        lines += _frontier_section(best, run, out_dir, solved, robust=bool(robust))
    lines += _findings_reasons(found)
    if falling:
        lines += ["", f"**Under-trained:** the training loss of these cells fell by more than {FALLING:.0%} between "
                  "their last two evaluations, so more samples may change them (cells at exact match 1.000 on every "
                  "seed are left out): " + "; ".join(f"{' '.join(map(str, key[:3]))} n={key[3]} ({drop})"
                                                     for key, drop in falling.items()) + "."]
    lines += _trials_section(df)
    text = redact("\n".join(lines) + "\n")  # a URL's secret (a storage's, a tracker's) never in the report
    (out_dir / "report.md").write_text(text)
    found.write(out_dir)
    record_report(out_dir, [p.name for p in report_files(out_dir)])
    notes = tuple(redact(f"**Note:** {note}").split("\n")[0] for note in (*partial, *run.notes))
    return Written(text, best, found, title, tally, notes)


def unfinished_trials(run: Run) -> pd.DataFrame:
    """The run's trials that have not finished (pending, running, interrupted, error):
    their cell and state, which the findings name as not run yet (issue 64)."""
    df = run.trials
    left = df[df["state"] != "finished"] if "state" in df else df.iloc[:0]
    return left[[c for c in ("trial", *GROUP, "state") if c in left]].reset_index(drop=True)


def partial_note(run: Run, unfinished: pd.DataFrame, location: str) -> str:
    """What a report of a partial run says first: how many trials are not finished,
    that the findings read the finished ones, and the command that continues it."""
    counts = unfinished["state"].value_counts()
    left = ", ".join(f"{k} {state}" for state, k in sorted(counts.items()))
    go_on = (f"continue it with `{command('icr-sweep', 'resume', location)}`" if run.spec is not None else
             "re-run each trial's `icr-sweep train` with its --out to continue it")
    return (f"this run is partial: {left} of {len(run.trials)} trials. The findings read the finished trials; each "
            f"line names the trials it would read that have not run yet. To finish it, {go_on}.")


def _keys(best: pd.DataFrame) -> list[tuple]:
    return [tuple(r) for r in best[GROUP].itertuples(index=False)]


def best_table(run: Run) -> tuple[pd.DataFrame, dict]:
    """best.csv of `run` (what `icr_sweep.best` returns too): best_by_cell, with
    each cell's `model` (its variant named: model_label), parameters, state and
    whether its loss was still falling; and those cells' falls, by cell."""
    best = best_by_cell(run.trials, *run.chosen_by)
    falling = still_falling(run.rows, best)
    best = with_models(best, run).assign(still_training=[falling.get(key, "") for key in _keys(best)])
    best.insert(GROUP.index("size") + 1, "model", model_labels(best))
    return best, falling


def model_labels(table: pd.DataFrame) -> pd.Series:
    """Each row's model as every table names it (workloads.naming.model_label)."""
    return pd.Series([model_label(arch, size) for arch, size in zip(table["arch"], table["size"])],
                     index=table.index, dtype=object)


def with_models(best: pd.DataFrame, run: Run) -> pd.DataFrame:
    """`best` with each cell's model's trainable parameters (`params`) and recurrent
    state (`state_floats`), from the configs the run stored (the presets for a run
    that stored none; NaN where neither says): the findings compare models of equal
    size by them, and the report names them."""
    model_of, _ = cell_shapes(run)

    def facts(arch, size):
        try:
            cfg = model_of(arch, size) if model_of else preset(arch, size)
        except (KeyError, ValueError):
            return math.nan, math.nan
        return cfg.n_params, cfg.state_floats

    pairs = [facts(arch, size) for arch, size in zip(best["arch"], best["size"])]
    return best.assign(params=[p for p, _ in pairs], state_floats=[f for _, f in pairs])


def _models_section(best: pd.DataFrame) -> list[str]:
    """The models the run compares: parameters and recurrent state, which the findings read."""
    if best.empty or best["params"].isna().all():
        return []
    lines = ["## Models", "", "Trainable parameters (the frozen embedding aside) and the recurrent state a sequence "
             "carries; the findings compare models whose parameters are within 1.2x of each other.", "",
             "| arch | size | params | state floats |", "|---|---|---|---|"]
    models = best.drop_duplicates(["arch", "size"])
    order = {label: i for i, label in enumerate(sorted(models["size"].unique(), key=size_key))}
    for _, r in models.sort_values(["size", "arch"], key=lambda c: c.map(order) if c.name == "size" else c).iterrows():
        lines.append(f"| {r['arch']} | {r['size']} | {_num(r['params'], '{:,.0f}')} | {_num(r['state_floats'], '{:,.0f}')} |")
    return lines + [""]


def _robust_section(robust: str, solved: float) -> list[str]:
    if not robust:
        return []
    return ["", "## Robust to the learning rate", "",
            "Per cell, each seed's learning rate is the one its validation picks (as above), and the score is "
            "teacher-forced exact match on a held-out set (as many samples, a stream of their own) at that rate, "
            f"mean ± std over seeds; beside it, how many of the rates tried reach exact match >= {solved:g} "
            "on validation (mean over their seeds). A cell solved at one lucky rate shows 1/k.", "", robust]


LEGEND = ("*shown* / *refuted*: a comparison beyond its threshold by more than its noise margin (two standard "
          "errors: the counts' sampling error and, on the mean over seeds, the spread between the seeds), for or "
          "against the claim; *within noise*: neither; *seeds disagree*: one seed shows it and another refutes it; "
          "*by the mean only*: the seeds agree, but no seed alone has the samples to show it; *within the spread "
          "between seeds*: each seed alone shows it, but the seeds differ by as much; *holds*: a check at an n "
          "between the end points, which can only refute; *left out*: its cells can show the claim neither way (every "
          "cell at guessing level or at the ceiling, or outside the cells the claim speaks of), with their numbers; "
          "*above guessing*: exact match above what guessing scores (the answer alone 0.5, a trace 0), as a share of "
          "what guessing leaves, (exact match - chance) / (1 - chance), so that setups with different chance "
          "compare. Rules: docs/findings.md.")


def console_summary(report: Written) -> str:
    """What the console says of a report (issue 53: the report itself, raw Markdown,
    was printed): its title and trial counts, its notes, and each finding's verdict,
    with the trials it would read that have not run yet; report.md holds the rest."""
    out = [report.title, report.counts, *report.notes]
    if report.findings.lines:
        out += ["What this run shows of the paper's findings (report.md says why each):",
                *[f"  {f.verdict}{' ' + f.seeds if f.seeds else ''}: {f.finding}"
                  + (f" (not run yet: {f.not_run})" if f.not_run else "") for f in report.findings.lines]]
    return "\n".join(out)


def _findings_summary(found: Findings) -> list[str]:
    """The report's table of verdicts, each with the comparison that decided it (a
    refuted one for Not reproduced, the weakest shown one for Reproduced, the open or
    missing one else), after what the findings read."""
    if not found.lines:
        return []
    return ["## What this run shows of the paper's findings", "",
            "Decided by the rules of docs/findings.md (teacher-forced exact match; models compared at equal size, on "
            "counts of samples, on the mean over seeds with a margin of Student's t on them (one seed: the task's "
            "training-noise floor), a seed alone holding a line open only beyond its own margin; a line reads "
            "Reproduced only where every model it names has a comparison shown and none is refuted; each row gives "
            "the comparison that decided it). Each line's every comparison: "
            "[Why each verdict](#why-each-verdict).", "", *found.read, "",
            "| verdict | finding | the numbers that decide it |", "|---|---|---|",
            *[f"| {f.verdict}{' ' + f.seeds if f.seeds else ''} | {f.finding} | {f.numbers} |" for f in found.lines],
            "", LEGEND, ""]


def _findings_reasons(found: Findings) -> list[str]:
    lines = [text for text in found.markdown() if text.startswith("- ")]
    return ["", "## Why each verdict", "", *lines] if lines else []


def _frontier_section(best: pd.DataFrame, run: Run, out_dir: Path, solved: float, robust: bool) -> list[str]:
    """frontier.csv and .png (and their robust twins), and the report's tables of them."""
    model_of, longest = cell_shapes(run)
    table = frontier(best, solved, model_of)
    table.to_csv(out_dir / "frontier.csv", index=False)
    plot_frontier(table, out_dir, solved, longest)
    lines = ["", f"## Frontier: the largest n each model solves (exact match >= {solved:g})", "",
             "| setup | arch | size | params | state_floats | kv_floats_per_token | largest n solved | of n up to |",
             "|---|---|---|---|---|---|---|---|"]
    for _, r in table.iterrows():
        lines.append(f"| {r['setup']} | {r['arch']} | {r['size']} | {r['params']:,} | {r['state_floats']:,} | "
                     f"{r['kv_floats_per_token']:,} | {_solved_upto(r)} | {r['largest_tried']} |")
    lines += ["", "![frontier](frontier.png)"]
    if not robust:
        return lines
    robust_table = frontier(best, solved, model_of, "robust_exact_match")
    robust_table.to_csv(out_dir / "frontier_robust.csv", index=False)
    plot_frontier(robust_table, out_dir, solved, longest, robust=True)
    lines += ["", f"By the robust score (held-out exact match at each seed's rate >= {solved:g}):", "",
              "| setup | arch | size | largest n solved | of n up to |", "|---|---|---|---|---|"]
    for _, r in robust_table.iterrows():
        lines.append(f"| {r['setup']} | {r['arch']} | {r['size']} | {_solved_upto(r)} | {r['largest_tried']} |")
    return lines + ["", "![frontier, robust](frontier_robust.png)"]


def _solved_upto(row) -> str:
    """A frontier row's largest n solved, 'none', and '(all)' where it solves every n tried."""
    got = "none" if row["largest_solved"] != row["largest_solved"] else f"{int(row['largest_solved'])}"
    return got + (" (all)" if row["solves_all"] else "")


def _trials_section(df: pd.DataFrame) -> list[str]:
    shown = [m for m in PLOTTED if m in df and df[m].notna().any()] or [HEADLINE]
    lines = ["", "## Every trial", "", "| trial | state | samples | " + " | ".join(shown) + " | val_loss | error |",
             "|---|---|---|" + "---|" * len(shown) + "---|---|"]
    for _, r in df.sort_values("trial").iterrows():
        lines.append(f"| {r['trial']} | {r['state']} | {_num(r['samples'], '{:,.0f}')} | "
                     + "".join(f"{_num(r[m])} | " for m in shown) + f"{_num(r['val_loss'])} | {r['error']} |")
    return lines


FALLING = 0.05  # a relative drop of the training loss between the last two evaluations that counts as falling


def still_falling(rows: dict[str, list[dict]], best: pd.DataFrame) -> dict[tuple, str]:
    """Cells (at their chosen learning rate) where some seed's training loss was still
    falling at its last evaluation: by more than FALLING relative to the one before,
    as {(arch, setup, size, n): "0.943 -> 0.271"}. A cell at exact match 1 on every
    seed is left out: more samples cannot raise it, and a cosine schedule's loss falls
    to its last step. `rows`: each trial's result rows, by name."""
    out = {}
    for key, (_, cell) in zip(_keys(best), best.iterrows()):
        if cell[HEADLINE] >= 1.0:
            continue
        for name in str(cell["trials"]).split(";"):
            losses = [r["train_loss"] for r in rows.get(name, [])
                      if r.get("evaluated", True) and r.get("train_loss") is not None]
            if len(losses) >= 2 and losses[-2] > 0 and (losses[-2] - losses[-1]) / losses[-2] > FALLING:
                out[key] = f"{losses[-2]:.3f} -> {losses[-1]:.3f}"
                break
    return out


def cell_shapes(run: Run):
    """`model_of(arch, size)` and `sample_length(setup, n)` of the run's cells, from the
    configs its trials stored (the frontier's state and KV-cache axes); None where the
    run stored no config (the figure then falls back to the presets and the default task)."""
    from workloads.config import TrialConfig

    df = run.trials
    if df.empty or not run.configs:
        return None, None
    models, tasks = {}, {}
    for name, arch, size, setup, n in df[["trial", "arch", "size", "setup", "n"]].itertuples(index=False):
        config = run.configs.get(name)
        if config is None or (arch, size) in models and (setup, n) in tasks:
            continue
        trial = TrialConfig.model_validate(config)
        models.setdefault((arch, size), trial.model)
        tasks.setdefault((setup, int(n)), trial.task.longest_sample)

    def model_of(arch, size):
        return models[(arch, size)]

    def sample_length(setup, n):
        return tasks[(setup, int(n))]

    return model_of, sample_length


def _headline(best: pd.DataFrame, task: str = DEFAULT_TASK) -> str:
    """What the tables show: the paper's metric, then those of ours some cell measured."""
    text = ("Headline: teacher-forced exact match on the validation set at the last evaluation, the metric the "
            "paper reports.")
    measured = {m for m, _ in _measured(best)} if not best.empty else set()
    if "gen_accuracy" in measured:
        guess = TASKS[task][1].generation_chance
        text += (" Beside it: generation accuracy, greedy decoding with the real retriever filling every ENDSEARCH "
                 "(this project's addition" + (f"; a model that fails still scores about {guess:g} by guessing the "
                                               "answer)." if guess is not None else ")."))
    if "val_token_accuracy" in measured:
        text += " Also: teacher-forced accuracy per supervised token" + (
            " (zoology's accuracy per query)." if task == "mqar" else ".")
    return text


def report_files(out_dir: Path) -> list[Path]:
    """The files write_report wrote into `out_dir`."""
    return [p for pattern in REPORT_FILES for p in sorted(Path(out_dir).glob(pattern))]


def _num(v, fmt="{:.3f}") -> str:
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else fmt.format(v)
