"""What an IsTree sweep shows of the paper's findings (PAPER.md, "What the paper
found"), decided from the report's per-cell table of teacher-forced exact match.

Each finding is reproduced, not reproduced, or not testable by this sweep (an
architecture, a setup or a second n missing), and says the cells that decide it.
The thresholds are fixed here, not tuned per run.
"""

import pandas as pd

SOLVED = 0.9  # exact match at which a model solves a cell
CLOSE = 0.1  # exact match apart that still counts as close
FALLS = 0.2  # drop in exact match from the smallest to the largest n that counts as falling
GUESS = 0.5  # vanilla exact match (one answer token, classes balanced) of a model that guesses
GUESS_BAND = 0.05


def _em(best: pd.DataFrame, arch: str, setup: str, size: str, n: int):
    row = best[(best["arch"] == arch) & (best["setup"] == setup) & (best["size"] == size) & (best["n"] == n)]
    return None if row.empty else float(row["val_exact_match"].iloc[0])


def _cells(best: pd.DataFrame, setup: str, archs: tuple) -> list[tuple[str, list[int]]]:
    """(size, sorted n) for each size where every arch of `archs` has the setup at 2+ shared n."""
    out = []
    part = best[best["setup"] == setup]
    for size in sorted(part["size"].unique()):
        shared = None
        for arch in archs:
            ns = set(part[(part["arch"] == arch) & (part["size"] == size)]["n"])
            shared = ns if shared is None else shared & ns
        if shared and len(shared) >= 2:
            out.append((size, sorted(shared)))
    return out


def _verdict(name: str, checks: list[tuple[bool, str]], untestable: str) -> str:
    if not checks:
        return f"- **Not testable here**: {name} ({untestable})."
    failed = [text for ok, text in checks if not ok]
    shown = failed or [text for _, text in checks]
    head = "Reproduced" if not failed else "Not reproduced"
    return f"- **{head}**: {name}. " + "; ".join(shown) + "."


def findings(best: pd.DataFrame) -> list[str]:
    """Markdown lines, one per finding."""
    lines = []
    # (a) With CoT the Transformer solves the largest n it trains, while Mamba falls as n grows.
    checks = []
    for size, ns in _cells(best, "cot", ("transformer", "mamba")):
        t, m0, m1 = _em(best, "transformer", "cot", size, ns[-1]), _em(best, "mamba", "cot", size, ns[0]), \
            _em(best, "mamba", "cot", size, ns[-1])
        checks.append((t >= SOLVED and m0 - m1 >= FALLS,
                       f"{size}: Transformer {t:.3f} at n={ns[-1]}, Mamba {m0:.3f} at n={ns[0]} -> {m1:.3f} at n={ns[-1]}"))
    lines.append(_verdict("with CoT the Transformer solves the largest n it trains (exact match >= "
                          f"{SOLVED:g}) while Mamba falls as n grows (by >= {FALLS:g})", checks,
                          "needs the Transformer and Mamba with CoT at two or more n"))
    # (b) Retrieval lifts Mamba close to the Transformer.
    checks = []
    for size, ns in _cells(best, "retrieval", ("transformer", "mamba")):
        n = ns[-1]
        t, m, cot = _em(best, "transformer", "retrieval", size, n), _em(best, "mamba", "retrieval", size, n), \
            _em(best, "mamba", "cot", size, n)
        lifted = cot is None or m > cot
        checks.append((abs(m - t) <= CLOSE and lifted,
                       f"{size}, n={n}: Mamba {m:.3f} with retrieval" + (f" ({cot:.3f} with CoT)" if cot is not None else "")
                       + f", Transformer {t:.3f}"))
    lines.append(_verdict(f"retrieval lifts Mamba (above its CoT) to within {CLOSE:g} of the Transformer at the "
                          "largest n", checks,
                          "needs the Transformer and Mamba with retrieval at two or more n"))
    # (c) The hybrid tracks the Transformer.
    checks = []
    for setup in sorted(best["setup"].unique()):
        for size, ns in _cells(best, setup, ("transformer", "hybrid")):
            gaps = [(abs(_em(best, "hybrid", setup, size, n) - _em(best, "transformer", setup, size, n)), n) for n in ns]
            gap, n = max(gaps)
            checks.append((gap <= CLOSE, f"{setup} {size}: largest gap {gap:.3f} at n={n} (hybrid "
                                         f"{_em(best, 'hybrid', setup, size, n):.3f}, Transformer "
                                         f"{_em(best, 'transformer', setup, size, n):.3f})"))
    lines.append(_verdict(f"the hybrid tracks the Transformer (within {CLOSE:g} in every cell)", checks,
                          "needs the hybrid and the Transformer at two or more n"))
    # (d) Vanilla is hard for all.
    vanilla = best[best["setup"] == "vanilla"]
    checks = []
    if not vanilla.empty:
        n = int(vanilla["n"].max())
        for _, r in vanilla[vanilla["n"] == n].iterrows():
            checks.append((r["val_exact_match"] < SOLVED, f"{r['arch']} {r['size']} {r['val_exact_match']:.3f} at n={n}"))
    lines.append(_verdict(f"the answer alone (vanilla) is hard for every architecture (below {SOLVED:g} at the largest n)",
                          checks, "needs the vanilla setup"))
    return lines


def at_guessing(best: pd.DataFrame) -> list[str]:
    """Cells whose exact match sits at what guessing the answer gets (vanilla: 0.5)
    or whose generation accuracy does while exact match is about 0 (CoT, retrieval)."""
    out = []
    for _, r in best.iterrows():
        em, gen = r["val_exact_match"], r.get("gen_accuracy")
        if r["setup"] == "vanilla" and abs(em - GUESS) <= GUESS_BAND:
            out.append(f"{r['arch']} {r['setup']} {r['size']} n={r['n']} (exact match {em:.3f})")
        elif r["setup"] != "vanilla" and em <= GUESS_BAND and gen == gen and gen is not None and abs(gen - GUESS) <= GUESS_BAND:
            out.append(f"{r['arch']} {r['setup']} {r['size']} n={r['n']} (exact match {em:.3f}, generation {gen:.3f})")
    return out
