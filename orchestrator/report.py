"""Status and report of a run directory, from the stored results alone (no Ray).

Ray Tune writes one directory per trial holding params.json (the trial's full
resolved config) and result.json (one line per report). Everything here is
derived from those files, so a report can always be regenerated.
"""

import json
import math
from pathlib import Path

import pandas as pd

GROUP = ["arch", "setup", "size", "n"]
SIZE_ORDER = {"tiny": 0, "0.5M": 1, "1M": 2, "2M": 3}
COLUMNS = {"model.arch": "arch", "task.setup": "setup", "model.size": "size", "task.n": "n",
           "task.family": "family", "train.lr": "lr", "train.seed": "seed"}


def _read_results(path: Path) -> list[dict]:
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            pass  # a line cut short by a killed process
    return rows


def _state(trial_dir: Path, last: dict) -> tuple[str, str]:
    error_file = trial_dir / "error.txt"
    if last.get("final_eval"):
        return "finished", ""
    if error_file.exists():
        lines = [ln for ln in error_file.read_text().splitlines() if ln.strip()]
        result_file = trial_dir / "result.json"
        if result_file.exists() and result_file.stat().st_mtime > error_file.stat().st_mtime:
            return "running", ""  # retried from its checkpoint after the error
        return "error", lines[-1] if lines else "unknown error"
    return ("running" if last else "pending"), ""


def load_trials(run_dir: Path) -> pd.DataFrame:
    """One row per trial: its flattened config, state and latest metrics."""
    rows = []
    for params in sorted(Path(run_dir).glob("*/params.json")):
        trial_dir = params.parent
        config = json.loads(params.read_text())["trial"]
        results = _read_results(trial_dir / "result.json")
        last = results[-1] if results else {}
        state, error = _state(trial_dir, last)
        metrics = {k: last.get(k) for k in ("samples", "train_loss", "val_loss", "val_exact_match", "gen_accuracy", "samples_per_s")}
        flat = pd.json_normalize(config, sep=".").iloc[0].to_dict()
        rows.append({"trial": trial_dir.name, "state": state, **metrics, "error": error, **flat})
    df = pd.DataFrame(rows)
    if df.empty:
        return df
    df = df.rename(columns=COLUMNS)
    for column in ("val_exact_match", "gen_accuracy", "val_loss"):
        df[column] = pd.to_numeric(df[column], errors="coerce")
    return df


# The paper reports teacher-forced exact match (PAPER.md): it heads every table and
# figure. Generation accuracy with the real retriever is ours and stands beside it.
METRICS = {
    "val_exact_match": "teacher-forced exact match (the paper's metric)",
    "gen_accuracy": "generation accuracy (ours: greedy decoding, the real retriever in the retrieval setup)",
}


def best_by_cell(df: pd.DataFrame, metric: str = "val_exact_match", mode: str = "max") -> pd.DataFrame:
    """Per (arch, setup, size, n): the learning rate whose mean final `metric` over
    seeds is best (highest for mode max, lowest for min), with the mean and spread
    over seeds of exact match, generation accuracy and validation loss."""
    columns = GROUP + ["lr", "seeds"] + [f"{m}{s}" for m in ("val_exact_match", "gen_accuracy", "val_loss") for s in ("", "_std")]
    done = df[df["state"] == "finished"]
    if done.empty:
        return pd.DataFrame(columns=columns)
    by_lr = done.groupby(GROUP + ["lr"]).agg(
        seeds=("val_exact_match", "size"),
        **{f"{m}{suffix}": (m, how) for m in ("val_exact_match", "gen_accuracy", "val_loss")
           for suffix, how in (("", "mean"), ("_std", "std"))},
    ).reset_index()
    # A metric missing in every seed never wins over one that was measured.
    key = by_lr[metric].fillna(-math.inf if mode == "max" else math.inf)
    best = by_lr.assign(_key=key).sort_values("_key", ascending=mode == "min", kind="stable").groupby(GROUP).head(1)
    best = best.drop(columns="_key")
    std_columns = [c for c in best.columns if c.endswith("_std")]
    best[std_columns] = best[std_columns].fillna(0.0)
    return best[columns].sort_values(GROUP, key=lambda c: c.map(SIZE_ORDER) if c.name == "size" else c).reset_index(drop=True)


def _fmt(row, metric: str, with_lr: bool) -> str:
    if row[metric] != row[metric]:  # NaN: not measured
        return "-"
    text = f"{row[metric]:.3f} ± {row[metric + '_std']:.3f}"
    if with_lr:
        text += f" (lr {row['lr']:.0e}, {int(row['seeds'])} seed{'s' if row['seeds'] > 1 else ''})"
    return text


def markdown_tables(best: pd.DataFrame, selected_by: str = "val_exact_match max") -> str:
    """Per size, two tables (rows setup x arch, columns n): exact match, the headline,
    then generation accuracy of the same trials."""
    out = []
    for size in sorted(best["size"].unique(), key=SIZE_ORDER.get):
        part = best[best["size"] == size]
        ns = sorted(part["n"].unique())
        for metric, title in METRICS.items():
            first = metric == "val_exact_match"
            out.append(f"### {size} models: {title}\n")
            if first:
                out.append(f"Mean ± std over seeds at the last evaluation; per cell the lr chosen by {selected_by}.\n")
            out.append("| setup | arch | " + " | ".join(f"n={n}" for n in ns) + " |")
            out.append("|---|---|" + "---|" * len(ns))
            for (setup, arch), rows in part.groupby(["setup", "arch"], sort=True):
                cells = {r["n"]: _fmt(r, metric, with_lr=first) for _, r in rows.iterrows()}
                out.append(f"| {setup} | {arch} | " + " | ".join(cells.get(n, "-") for n in ns) + " |")
            out.append("")
    return "\n".join(out)


def plot(best: pd.DataFrame, out_dir: Path) -> list[Path]:
    """The paper's figure (accuracy against n, a panel per setup, a line per arch),
    one PNG per size and metric: exact_match_<size>.png and gen_accuracy_<size>.png."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []
    setups = [s for s in ("vanilla", "cot", "retrieval") if s in set(best["setup"])]
    for metric, title in METRICS.items():
        for size in sorted(best["size"].unique(), key=SIZE_ORDER.get):
            part = best[best["size"] == size]
            fig, axes = plt.subplots(1, len(setups), figsize=(max(6, 4 * len(setups)), 3.4), sharey=True, squeeze=False)
            for ax, setup in zip(axes[0], setups):
                for arch, rows in part[part["setup"] == setup].groupby("arch"):
                    rows = rows.sort_values("n")
                    ax.errorbar(rows["n"], rows[metric], yerr=rows[metric + "_std"], marker="o", capsize=3, label=arch)
                ax.set_title(setup)
                ax.set_xlabel("n (vertices)")
                ax.set_xscale("log", base=2)
                ax.set_xticks(sorted(part["n"].unique()), labels=[str(n) for n in sorted(part["n"].unique())])
                if metric == "gen_accuracy":
                    ax.set_ylim(0.4, 1.02)
                    ax.axhline(0.5, color="grey", lw=0.5, ls="--")  # guessing the answer
                else:
                    ax.set_ylim(-0.02, 1.02)
                ax.grid(alpha=0.3)
            axes[0][0].set_ylabel(metric)
            axes[0][-1].legend(loc="lower left", fontsize=8)
            short = "teacher-forced exact match" if metric == "val_exact_match" else "generation accuracy (ours)"
            fig.suptitle(f"IsTree, {size} models: {short}")
            fig.tight_layout()
            name = "exact_match" if metric == "val_exact_match" else metric
            path = out_dir / f"{name}_{size}.png"
            fig.savefig(path, dpi=120)
            plt.close(fig)
            paths.append(path)
    return paths


def write_report(run_dir: Path, metric: str = "val_exact_match", mode: str = "max") -> tuple[str, pd.DataFrame, pd.DataFrame]:
    """Writes report.md, results.csv, best.csv and the plots into `run_dir`; returns
    the markdown, the per-cell best table and the per-trial table. `metric` and
    `mode` choose each cell's learning rate (the spec's search.metric and mode)."""
    run_dir = Path(run_dir)
    df = load_trials(run_dir)
    if df.empty:
        raise FileNotFoundError(f"{run_dir}: no trial results (no */params.json)")
    df.to_csv(run_dir / "results.csv", index=False)
    best = best_by_cell(df, metric, mode)
    best.to_csv(run_dir / "best.csv", index=False)
    plots = plot(best, run_dir) if not best.empty else []
    counts = df["state"].value_counts().to_dict()
    selected_by = f"{metric} ({'highest' if mode == 'max' else 'lowest'} mean over seeds)"
    lines = [f"# Sweep report: {run_dir.name}", "",
             f"{len(df)} trials: " + ", ".join(f"{v} {k}" for k, v in sorted(counts.items())) + ".", "",
             "Headline: teacher-forced exact match on the validation set at the last evaluation, the metric the "
             "paper reports. Beside it: generation accuracy, greedy decoding with the real retriever filling "
             "every ENDSEARCH (this project's addition; a model that fails still scores about 0.5 by guessing).", "",
             "## Best learning rate per cell", "",
             markdown_tables(best, selected_by) if not best.empty else "No finished trial yet.\n"]
    lines += [f"![{p.stem}]({p.name})" for p in plots]
    lines += ["", "## Every trial", "", "| trial | state | samples | val_exact_match | gen_accuracy | val_loss | error |",
              "|---|---|---|---|---|---|---|"]
    for _, r in df.sort_values("trial").iterrows():
        lines.append(f"| {r['trial']} | {r['state']} | {_num(r['samples'], '{:,.0f}')} | {_num(r['val_exact_match'])} | "
                     f"{_num(r['gen_accuracy'])} | {_num(r['val_loss'])} | {r['error']} |")
    text = "\n".join(lines) + "\n"
    (run_dir / "report.md").write_text(text)
    return text, best, df


def _num(v, fmt="{:.3f}") -> str:
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else fmt.format(v)
