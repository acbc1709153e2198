"""The report's figures: a metric against n per size, the state-size frontier and
the learning-rate window, each architecture in its own colour and marker."""

from __future__ import annotations

import itertools
import math
import textwrap
from pathlib import Path
from typing import Optional

import pandas as pd

from orchestrator.report.tables import by_base_size, measured_metrics, model_labels, setup_key
from workloads.metrics import HEADLINE, METRICS, SOLVED
from workloads.models import PRESETS
from workloads.tasks import DEFAULT_TASK, TASKS


def _arch_rank(arch: str) -> int:
    """An architecture's place in the model registry (one past the end if unknown)."""
    return list(PRESETS).index(arch) if arch in PRESETS else len(PRESETS)


VARIANT_MARKERS = "XPd*h"  # a preset's variants, in turn, drawn hollow
# Twenty colours: matplotlib's ten, then the darkest of each hue of tab20b and tab20c,
# none a shade of the ten's; fourteen markers. An arch's pair is its own up to 140 archs.
COLORS = (*(f"C{i}" for i in range(10)), "#393b79", "#637939", "#8c6d31", "#843c39", "#7b4173",
          "#3182bd", "#e6550d", "#31a354", "#756bb1", "#636363")
MARKERS = "soDv^<>ph*X8HP"


def arch_style(arch: str, variant: int = 0) -> dict:
    """An architecture's colour and marker, the same in every figure (frontier.png
    too), in the order of the model registry, each arch's its own (issue 79: past
    ten, a new mixer was drawn in Mamba's orange); the `variant`-th variant of a
    preset (mamba (tiny-dstate1), 1, 2, ...) is drawn dash-dotted in its arch's
    colour, with a hollow marker of its own (issue 53: the two Mambas shared colour
    and marker)."""
    i = _arch_rank(arch)
    color = COLORS[i % len(COLORS)]
    if not variant:
        return dict(color=color, marker=MARKERS[i % len(MARKERS)], ls="-")
    return dict(color=color, marker=VARIANT_MARKERS[(variant - 1) % len(VARIANT_MARKERS)], ls="-.", mfc="none")


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
    for metric, _ in measured_metrics(best):
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
        ax.annotate(f"{r['params'] / 1000:,.1f}k params", (r["x"], y), xytext=(4, -9 - 7 * (i % 3)),
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
    ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(_floats))
    ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    lo, hi = part["x"].min(), part["x"].max()
    ax.set_xlim(lo / 2, hi * 2)
    ax.set_title(setup)
    ax.set_xlabel("state floats", fontsize=8)
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
    fig, axes = plt.subplots(1, len(setups), figsize=(max(5, 3.6 * len(setups)) + 1.8, 3.9), squeeze=False)
    for ax, setup in zip(axes[0], setups):
        _frontier_panel(ax, table[table["setup"] == setup].copy(), setup, sample_length)
    score = "robust score" if robust else "exact match"  # robust: held-out, at each seed's own rate
    axes[0][0].set_ylabel(f"largest n solved\n({score} >= {solved:g})")
    shown = {}  # every panel's entries, once each (the arrow may be drawn in one panel only)
    for ax in axes[0]:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            shown.setdefault(label, handle)
    axes[0][-1].legend(shown.values(), shown.keys(), fontsize=9, loc="upper left", bbox_to_anchor=(1.02, 1))
    fig.supxlabel("attention alone: at its KV cache at the largest n tried; a state that grows with the length: at "
                  "the largest n", fontsize=8)
    title = "Largest n solved against the recurrent state (floats), each model's parameters beside it"
    width = int(fig.get_figwidth() * 15)  # characters of 10-point type across the figure: one panel's is narrow
    fig.suptitle(textwrap.fill(title, width) + ("\n(robust to the learning rate)" if robust else ""), fontsize=10)
    fig.tight_layout()
    path = out_dir / ("frontier_robust.png" if robust else "frontier.png")
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def _floats(value: float, _=None) -> str:
    """An axis tick of a count of floats, short: 500, 2k, 10k, 1.5M."""
    for scale, unit in ((1e6, "M"), (1e3, "k")):
        if value >= scale:
            return f"{value / scale:g}{unit}"
    return f"{value:g}"


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
