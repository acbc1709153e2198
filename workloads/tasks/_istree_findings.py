"""What an IsTree sweep shows of the paper's findings (PAPER.md, "What the paper
found"), decided from the report's per-cell table of teacher-forced exact match.

Each finding is Reproduced, Not reproduced, Not decided, or Not testable by this
sweep (an architecture, a setup or a second n missing), and says the cells that
decide it. A contrast between cells that all sit at guessing level decides
nothing ("Not decided"), however the numbers order; a finding that says "solves"
needs the cell solved. A finding is Reproduced only where the cells' mean over
seeds shows it and so does each seed on its own; where seeds disagree it is Not
decided. The thresholds are fixed here, not tuned per run.
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Callable, Optional

from workloads.naming import preset_of

if TYPE_CHECKING:
    import pandas as pd

# Exact match of a model that guesses, by setup (IsTreeTask.exact_match_chance): the
# answer alone is balanced; a trace is never guessed whole.
CHANCE = {"vanilla": 0.5, "cot": 0.0, "retrieval": 0.0}
GUESS = CHANCE["vanilla"]
SOLVED = 0.9  # exact match at which a model solves a cell
CLOSE = 0.1  # exact match apart that still counts as close
FALLS = 0.2  # drop in exact match from the smallest to the largest n that counts as falling
GUESS_BAND = 0.05  # above the exact match of a model that guesses, still guessing

SEEDS_COLUMN = "val_exact_match_by_seed"  # best_by_cell: each seed's exact match, by seed, "/"-joined

# A cell's exact match: (arch, setup, size, n) -> value, or None where not run.
Lookup = Callable[[str, str, str, int], Optional[float]]


def guessing(setup: str, value: float) -> bool:
    """Whether an exact match is at what guessing scores in this setup."""
    return value <= CHANCE.get(setup, 0.0) + GUESS_BAND


def _lookups(best: pd.DataFrame) -> list[Lookup]:
    """The mean's lookup, then one per seed (as many as every cell has)."""
    index = {(r["arch"], r["setup"], r["size"], int(r["n"])): r for _, r in best.iterrows()}

    def mean(arch, setup, size, n):
        row = index.get((arch, setup, size, n))
        return None if row is None else float(row["val_exact_match"])

    by_seed = [str(r[SEEDS_COLUMN]).split("/") for r in index.values()] if SEEDS_COLUMN in best else []
    seeds = min((len(v) for v in by_seed), default=1)

    def seed(k):
        def lookup(arch, setup, size, n):
            row = index.get((arch, setup, size, n))
            return None if row is None else float(str(row[SEEDS_COLUMN]).split("/")[k])
        return lookup

    return [mean] + ([seed(k) for k in range(seeds)] if seeds > 1 else [])


def _all(parts: list[Optional[bool]]) -> Optional[bool]:
    """False if any part fails, else None if any is undecided, else True."""
    return False if False in parts else (None if None in parts else True)


def _contrast(ok: bool, setup_values: list[tuple[str, float]]) -> Optional[bool]:
    """A comparison's outcome, or None (undecided) where every cell in it is at guessing level."""
    return None if all(guessing(s, v) for s, v in setup_values) else ok


class _Check:
    """One unit of a finding (a size, a setup): `judge(em)` gives its outcome under a
    lookup and `describe(em)` the cells behind it."""

    def __init__(self, judge: Callable[[Lookup], Optional[bool]], describe: Callable[[Lookup], str]):
        self.judge, self.describe = judge, describe

    def outcome(self, lookups: list[Lookup]) -> tuple[Optional[bool], str]:
        mean, seeds = lookups[0], lookups[1:]
        verdict, text = self.judge(mean), self.describe(mean)
        if verdict and any(self.judge(em) is not True for em in seeds):
            verdict = None
            text += " (seeds disagree: " + "; ".join(f"seed #{k + 1}: {self.describe(em)}" for k, em in enumerate(seeds)) + ")"
        elif verdict is None:
            text += f" (all at guessing level: exact match within {GUESS_BAND:g} of chance)"
        return verdict, text


def _verdict(name: str, checks: list[_Check], lookups: list[Lookup], seeds: int, untestable: str) -> str:
    if not checks:
        return f"- **Not testable here**: {name} ({untestable})."
    outcomes = [c.outcome(lookups) for c in checks]
    verdict = _all([v for v, _ in outcomes])
    head = {True: "Reproduced", False: "Not reproduced", None: "Not decided"}[verdict]
    shown = [text for v, text in outcomes if v == verdict]
    on = f" on {seeds} seeds" if seeds > 1 else " (1 seed)" if seeds == 1 else ""
    return f"- **{head}**{on}: {name}. " + "; ".join(shown) + "."


class _Cells:
    """The cells one check compares: each arch's size (a variant of one base size,
    e.g. a Transformer at tiny beside a Mamba at tiny-dstate1) and the n they share."""

    def __init__(self, sizes: dict[str, str], ns: list[int]):
        self.sizes, self.ns = sizes, ns
        shown = sorted(set(sizes.values()))
        self.label = shown[0] if len(shown) == 1 else ", ".join(f"{arch} {size}" for arch, size in sizes.items())

    def __call__(self, arch: str) -> str:
        return self.sizes[arch]


def _cells(best: pd.DataFrame, setup: str, archs: tuple) -> list[_Cells]:
    """For each base size (tiny, 0.5M, ...), each choice of one variant of it per arch
    of `archs` (tiny, tiny-dstate1, ...) where they have the setup at 2+ shared n."""
    part = best[best["setup"] == setup]
    variants = {}  # (base, arch) -> its sizes of that base
    for arch, size in {(r["arch"], r["size"]) for _, r in part.iterrows()}:
        variants.setdefault((preset_of(size), arch), set()).add(size)
    out = []
    for base in sorted({b for b, _ in variants}):
        if any((base, arch) not in variants for arch in archs):
            continue
        for choice in itertools.product(*(sorted(variants[(base, arch)]) for arch in archs)):
            sizes = dict(zip(archs, choice))
            shared = None
            for arch, size in sizes.items():
                ns = set(part[(part["arch"] == arch) & (part["size"] == size)]["n"])
                shared = ns if shared is None else shared & ns
            if shared and len(shared) >= 2:
                out.append(_Cells(sizes, sorted(int(n) for n in shared)))
    return out


def _cot_checks(best: pd.DataFrame) -> list[_Check]:
    """With CoT the Transformer solves the largest n it trains, while Mamba falls as n grows."""
    checks = []
    for cells in _cells(best, "cot", ("transformer", "mamba")):
        lo, hi, t_size, m_size = cells.ns[0], cells.ns[-1], cells("transformer"), cells("mamba")

        def judge(em, lo=lo, hi=hi, t_size=t_size, m_size=m_size):
            t, m0, m1 = em("transformer", "cot", t_size, hi), em("mamba", "cot", m_size, lo), em("mamba", "cot", m_size, hi)
            return _all([t >= SOLVED, _contrast(m0 - m1 >= FALLS, [("cot", m0), ("cot", m1)])])

        def describe(em, lo=lo, hi=hi, t_size=t_size, m_size=m_size, label=cells.label):
            return (f"{label}: Transformer {em('transformer', 'cot', t_size, hi):.3f} at n={hi}, "
                    f"Mamba {em('mamba', 'cot', m_size, lo):.3f} at n={lo} -> {em('mamba', 'cot', m_size, hi):.3f} at n={hi}")

        checks.append(_Check(judge, describe))
    return checks


def _retrieval_checks(best: pd.DataFrame) -> list[_Check]:
    """Retrieval lifts Mamba above its CoT to within CLOSE of the Transformer at the largest n."""
    checks = []
    for cells in _cells(best, "retrieval", ("transformer", "mamba")):
        n, t_size, m_size = cells.ns[-1], cells("transformer"), cells("mamba")

        def judge(em, n=n, t_size=t_size, m_size=m_size):
            t, m, cot = em("transformer", "retrieval", t_size, n), em("mamba", "retrieval", m_size, n), em("mamba", "cot", m_size, n)
            parts = [_contrast(abs(m - t) <= CLOSE, [("retrieval", m), ("retrieval", t)])]
            if cot is not None:
                parts.append(_contrast(m > cot, [("retrieval", m), ("cot", cot)]))
            return _all(parts)

        def describe(em, n=n, t_size=t_size, m_size=m_size, label=cells.label):
            cot = em("mamba", "cot", m_size, n)
            return (f"{label}, n={n}: Mamba {em('mamba', 'retrieval', m_size, n):.3f} with retrieval"
                    + (f" ({cot:.3f} with CoT)" if cot is not None else "")
                    + f", Transformer {em('transformer', 'retrieval', t_size, n):.3f}")

        checks.append(_Check(judge, describe))
    return checks


def _hybrid_checks(best: pd.DataFrame) -> list[_Check]:
    """The hybrid tracks the Transformer: within CLOSE at every n where either is off guessing level."""
    checks = []
    for setup in sorted(best["setup"].unique()):
        for cells in _cells(best, setup, ("transformer", "hybrid")):
            h_size, t_size = cells("hybrid"), cells("transformer")

            def gaps(em, setup=setup, h_size=h_size, t_size=t_size, ns=cells.ns):
                pairs = [(em("hybrid", setup, h_size, n), em("transformer", setup, t_size, n), n) for n in ns]
                return [(abs(h - t), n, h, t) for h, t, n in pairs if not (guessing(setup, h) and guessing(setup, t))]

            def judge(em, gaps=gaps):
                found = gaps(em)
                return None if not found else max(found)[0] <= CLOSE

            def describe(em, setup=setup, ns=cells.ns, gaps=gaps, label=cells.label):
                found = gaps(em)
                if not found:
                    return f"{setup} {label}: hybrid and Transformer at n={', '.join(map(str, ns))}"
                gap, n, h, t = max(found)
                return f"{setup} {label}: largest gap {gap:.3f} at n={n} (hybrid {h:.3f}, Transformer {t:.3f})"

            checks.append(_Check(judge, describe))
    return checks


def _vanilla_checks(best: pd.DataFrame) -> list[_Check]:
    """The answer alone is hard for every architecture at the largest n (no contrast: no floor)."""
    vanilla = best[best["setup"] == "vanilla"]
    if vanilla.empty:
        return []
    n = int(vanilla["n"].max())
    checks = []
    for _, r in vanilla[vanilla["n"] == n].iterrows():
        arch, size = r["arch"], r["size"]
        checks.append(_Check(lambda em, arch=arch, size=size: em(arch, "vanilla", size, n) < SOLVED,
                             lambda em, arch=arch, size=size: f"{arch} {size} {em(arch, 'vanilla', size, n):.3f} at n={n}"))
    return checks


def findings(best: pd.DataFrame) -> list[str]:
    """Markdown lines, one per finding."""
    lookups = _lookups(best)
    seeds = int(best["seeds"].min()) if "seeds" in best and len(best) else 0  # 0: not known
    return [
        _verdict(f"with CoT the Transformer solves the largest n it trains (exact match >= {SOLVED:g}) while Mamba "
                 f"falls as n grows (by >= {FALLS:g})", _cot_checks(best), lookups, seeds,
                 "needs the Transformer and Mamba with CoT at two or more n"),
        _verdict(f"retrieval lifts Mamba (above its CoT) to within {CLOSE:g} of the Transformer at the largest n",
                 _retrieval_checks(best), lookups, seeds, "needs the Transformer and Mamba with retrieval at two or more n"),
        _verdict(f"the hybrid tracks the Transformer (within {CLOSE:g} in every cell off guessing level)",
                 _hybrid_checks(best), lookups, seeds, "needs the hybrid and the Transformer at two or more n"),
        _verdict(f"the answer alone (vanilla) is hard for every architecture (below {SOLVED:g} at the largest n)",
                 _vanilla_checks(best), lookups, seeds, "needs the vanilla setup"),
    ]


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
