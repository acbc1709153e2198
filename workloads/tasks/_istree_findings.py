"""What an IsTree sweep shows of the paper's findings (docs/experiment.md, "What the paper
found"), decided from the report's per-cell table by the rules of docs/findings.md,
which were written before they were run on the laptop's data.

In short: every comparison is made on counts of validation samples (exact
fractions, never rounded floats) against a threshold with a noise margin of two
standard errors; it is decided on the mean over the seeds its cells share and on
each of those seeds; models are compared only at equal size (parameter counts
within 1.2x); and a comparison whose cells cannot show the claim (a floor, a
ceiling, a missing contrast) is left out, with the reason, instead of deciding it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, Callable, Optional, Union

from workloads.metrics import SOLVED as SOLVED_LEVEL

if TYPE_CHECKING:
    import pandas as pd

# Exact match of a model that guesses, by setup (IsTreeTask.exact_match_chance): the
# answer alone is balanced; a trace is never guessed whole.
CHANCE = {"vanilla": 0.5, "cot": 0.0, "retrieval": 0.0}
GUESS = CHANCE["vanilla"]
SETUPS = tuple(CHANCE)  # in the paper's order

SOLVED = Fraction(str(SOLVED_LEVEL))  # exact match at which a model solves a cell
FAR = Fraction(1, 5)  # "falls far more": a relative fall of at least this
CLOSE = Fraction(1, 10)  # "comes close", "tracks": at most this far below
SAME_SIZE = Fraction(6, 5)  # parameter counts within this ratio: the paper's presets differ by at most 1.19x
STATE_RATIO = 3  # the state ablation's models differ in state floats by at least this
Z = 2.0  # the noise margin in standard errors

SEEDS_COLUMN = "val_exact_match_by_seed"  # best_by_cell: each seed's exact match, "/"-joined in seed order
HELD_OUT_SEEDS_COLUMN = "test_exact_match_by_seed"  # best_by_cell: each seed's held-out exact match at the cell's rate
SEED_IDS_COLUMN = "seed_ids"  # best_by_cell: those seeds, "/"-joined

Skip = str  # a comparison that its cells cannot decide: the reason


class _SeedsDisagree:
    """The outcome of a comparison that the mean and the seeds on their own decide
    differently: it decides nothing."""

    def __repr__(self) -> str:
        return "seeds disagree"


DISAGREE = _SeedsDisagree()
Outcome = Union[bool, None, Skip, _SeedsDisagree]  # shown, refuted, within noise (None), seeds disagree, or left out


@dataclass(frozen=True)
class Model:
    arch: str
    size: str
    params: Optional[int]  # trainable parameters (None: not known)
    state: Optional[int]  # recurrent state floats

    def __str__(self) -> str:
        return f"{self.arch} {self.size} ({self.params:,} params)" if self.params else f"{self.arch} {self.size}"


def same_size(a: Model, b: Model) -> bool:
    """Whether two models' parameter counts are within SAME_SIZE of each other."""
    if not a.params or not b.params:
        return False
    return Fraction(max(a.params, b.params), min(a.params, b.params)) <= SAME_SIZE


@dataclass(frozen=True)
class Cell:
    model: Model
    setup: str
    n: int
    right: dict  # seed -> validation samples right under teacher forcing
    total: int  # validation samples per seed
    still: str  # where its training loss was still falling: "0.943 -> 0.271", else ""

    @property
    def name(self) -> str:
        return f"{self.model.arch} {self.setup} {self.model.size} n={self.n}"


View = Optional[tuple]  # the seeds a comparison reads, pooled; one seed alone is a seed's view


def rate(cell: Cell, view: tuple) -> tuple[Fraction, int]:
    """A cell's exact match under a view (its counts over the view's seeds) and the
    samples behind it."""
    total = cell.total * len(view)
    return Fraction(sum(cell.right[s] for s in view), total), total


class Stat:
    """A signed sum of cells' exact match, plus a constant: sum(c * k/N) + const."""

    def __init__(self, terms: list[tuple[Fraction, Cell]], const: Fraction = Fraction(0)):
        self.terms, self.const = terms, const

    def value(self, view: tuple) -> Fraction:
        return sum((c * rate(cell, view)[0] for c, cell in self.terms), self.const)

    def margin(self, view: tuple) -> float:
        var = 0.0
        for c, cell in self.terms:
            k, total = rate(cell, view)
            p = (float(k) * total + 1) / (total + 2)
            var += float(c) ** 2 * p * (1 - p) / total
        return Z * math.sqrt(var)

    def against(self, threshold: Fraction, view: tuple) -> Optional[bool]:
        """Shown (True) where the statistic exceeds `threshold` by more than its
        margin, refuted (False) where it falls short by more, None within noise."""
        gap, margin = self.value(view) - threshold, self.margin(view)
        return True if gap > margin else False if gap < -margin else None


def one(cell: Cell) -> Stat:
    return Stat([(Fraction(1), cell)])


def minus(a: Cell, b: Cell) -> Stat:
    return Stat([(Fraction(1), a), (Fraction(-1), b)])


def chance(cell: Cell) -> Fraction:
    return Fraction(str(CHANCE.get(cell.setup, 0.0)))


def solves(cell: Cell, view: tuple) -> bool:
    return one(cell).against(SOLVED, view) is True


def off_floor(cell: Cell, view: tuple) -> bool:
    return one(cell).against(chance(cell), view) is True


def at_ceiling(cell: Cell, view: tuple) -> bool:
    return one(cell).against(Fraction(1), view) is not False


def skill(cell: Cell) -> Stat:
    """Exact match above chance as a share of what chance leaves: one scale for the
    answer alone (chance 0.5) and a trace (chance 0)."""
    c = chance(cell)
    return Stat([(1 / (1 - c), cell)], -c / (1 - c))


def em(cell: Cell, view: tuple) -> str:
    return f"{float(rate(cell, view)[0]):.3f}"


class Table:
    """The report's best-per-cell table as cells with counts per seed."""

    def __init__(self, best: pd.DataFrame):
        self.cells: dict[tuple, Cell] = {}
        self.unknown_size = "val_samples" not in best or best["val_samples"].isna().any()
        self.missing: list[tuple[str, str]] = []  # (setup, cell) without a finite value: left out of every comparison
        self.held_out = 0  # cells read on the held-out set (their rate chosen among several)
        for _, r in best.iterrows():
            model = Model(r["arch"], str(r["size"]), _int(r.get("params")), _int(r.get("state_floats")))
            total = _int(r.get("val_samples")) or 1
            values, seeds, held_out = self._by_seed(r)
            name = f"{model.arch} {r['setup']} {model.size} n={int(r['n'])}"
            if not all(math.isfinite(v) for v in values):
                self.missing.append((r["setup"], f"{name} ({', '.join(f'seed {s}: {v:g}' for s, v in zip(seeds, values))})"))
                continue
            self.held_out += held_out
            if seeds == ["pooled"]:  # the mean alone, over several seeds: one count over all their samples
                total *= _int(r["seeds"])
            right = {s: round(v * total) for s, v in zip(seeds, values)}
            still = r.get("still_training")
            self.cells[(model.arch, model.size, r["setup"], int(r["n"]))] = Cell(
                model, r["setup"], int(r["n"]), right, total, still if isinstance(still, str) else "")

    @staticmethod
    def _by_seed(r) -> tuple[list[float], list[str], bool]:
        """Each seed's exact match, the seeds' ids ("pooled" where the table gives only
        the mean of several seeds), and whether they are the held-out set's: where the
        cell's rate was chosen among several on validation, the validation values are
        biased upwards by the choice, and the held-out set (as many samples, a stream
        of its own) reads the chosen rate without that bias."""
        ids = str(r[SEED_IDS_COLUMN]).split("/") if isinstance(r.get(SEED_IDS_COLUMN), str) else None
        held = r.get(HELD_OUT_SEEDS_COLUMN)
        if (_int(r.get("rates")) or 1) > 1 and isinstance(held, str):
            values = [float(v) for v in held.split("/")]
            if all(math.isfinite(v) for v in values):
                return values, ids or [str(s) for s in range(len(values))], True
        if isinstance(r.get(SEEDS_COLUMN), str):
            values = [float(v) for v in r[SEEDS_COLUMN].split("/")]
            return values, ids or [str(s) for s in range(len(values))], False
        seeds = _int(r.get("seeds")) or 1
        return [float(r["val_exact_match"])], ["0" if seeds == 1 else "pooled"], False

    def models(self, arch: str) -> list[Model]:
        return sorted({c.model for c in self.cells.values() if c.model.arch == arch}, key=lambda m: (m.params or 0, m.size))

    def get(self, model: Model, setup: str, n: int) -> Optional[Cell]:
        return self.cells.get((model.arch, model.size, setup, n))

    def ns(self, setup: str, *models: Model) -> list[int]:
        """The n that every one of `models` has in `setup`."""
        shared = None
        for m in models:
            got = {n for (a, s, st, n) in self.cells if (a, s, st) == (m.arch, m.size, setup)}
            shared = got if shared is None else shared & got
        return sorted(shared or [])

    def setups(self) -> set[str]:
        return {c.setup for c in self.cells.values()}


def _int(value) -> Optional[int]:
    return None if value is None or value != value else int(value)


class Comparison:
    """One comparison of a line: `judge(view)` gives its outcome under a view of the
    seeds and the text that says its cells."""

    def __init__(self, cells: list[Cell], judge: Callable[[tuple], tuple[Outcome, str]], label: str):
        self.cells, self.judge, self.label = cells, judge, label
        shared = set.intersection(*(set(c.right) for c in cells)) if cells else set()
        self.seeds = tuple(sorted(shared, key=_seed_order))

    def decide(self) -> tuple[Outcome, str]:
        """The outcome on the mean of the shared seeds, kept where every seed on its
        own agrees; else None, with each seed's reading. Where the mean cannot show
        the claim, the comparison is left out."""
        if not self.seeds:
            return "its cells share no seed", ""
        outcome, text = self.judge(self.seeds)
        if isinstance(outcome, str) or len(self.seeds) < 2:
            return outcome, text
        by_seed = [(s, *self.judge((s,))) for s in self.seeds]
        if all(o == outcome for _, o, _ in by_seed):
            return outcome, text
        readings = "; ".join(f"seed {s}: {_said(o)}" for s, o, _ in by_seed)
        if isinstance(outcome, bool) and all(o is None or o == outcome for _, o, _ in by_seed):
            # The seeds agree, each alone too few samples: the mean's reading is not each seed's.
            return None, f"{text} [{_said(outcome)} by the mean only, no seed alone shows it: {readings}]"
        return DISAGREE, f"{text} [seeds disagree: mean {_said(outcome)}; {readings}]"


def _seed_order(seed: str):
    return (0, int(seed)) if seed.isdigit() else (1, seed)


def _said(outcome: Outcome) -> str:
    if isinstance(outcome, str):
        return f"cannot show it ({outcome})"
    return {True: "shown", False: "refuted", None: "within noise"}.get(outcome, str(outcome))


HEADS = {True: "Reproduced", False: "Not reproduced", None: "Not decided"}


Named = dict  # what a claim names -> (its comparisons, why there are none: absent, another size, ...)


def verdict(name: str, comparisons: list[Comparison], untestable: str, heads: dict = HEADS,
            combine: Callable[[list], object] = None, named: Optional[Named] = None) -> str:
    """The line of a finding: its verdict over its comparisons (`combine` of their
    outcomes, a key of `heads`; by default all shown, any refuted, else within
    noise), how many seeds they share, the comparisons that decide it, those left
    out and why, and the deciding cells still training. `named`: every model or
    architecture the claim names, with its comparisons; one without a decided
    comparison (never compared, or each of its comparisons left out) keeps the
    line from reading shown, and is said with why."""
    if not comparisons:
        return f"- **Not testable here**: {name} ({untestable})."
    results = [(c, *c.decide()) for c in comparisons]
    decided = [(c, o, t) for c, o, t in results if not isinstance(o, str)]
    reasons = {}  # why a comparison was left out -> the comparisons
    for c, o, _ in results:
        if isinstance(o, str):
            reasons.setdefault(o, []).append(c.label)
    left_out = [f"{reason} ({', '.join(labels)})" for reason, labels in reasons.items()]
    uncompared = _uncompared(named or {}, results)
    seeds = min(comparisons, key=lambda c: len(c.seeds)).seeds
    on = " (the mean over seeds only)" if seeds == ("pooled",) else f" on {len(seeds)} seeds" if len(seeds) > 1 else \
        _one_seed(comparisons)
    missing = (" Never compared, so the claim about every one it names is not shown: " + "; ".join(uncompared) + "."
               if uncompared else "")
    if not decided:
        return f"- **{heads[None]}**{on}: {name}. No comparison here can show it: " + "; ".join(left_out) + "." + missing
    outcome = (combine or _all)([o for _, o, _ in decided])
    if outcome is True and uncompared:
        outcome = None
    shown = [t if o is DISAGREE else f"{t} [{_said(o)}]" for _, o, t in decided]
    text = f"- **{heads[outcome]}**{on}: {name}. " + "; ".join(shown) + "." + missing
    if left_out:
        text += " Left out, as they cannot show it: " + "; ".join(left_out) + "."
    training = sorted({f"{cell.name} (loss {cell.still})" for c, _, _ in decided for cell in c.cells if cell.still})
    if training:
        text += " Still training at the last evaluation, so more samples may change this: " + "; ".join(training) + "."
    return text


def _one_seed(comparisons: list[Comparison]) -> str:
    """" (1 seed)", and where other cells have more, which cells have one only (a
    seed still running, failed or never run)."""
    cells = {cell.name: cell for c in comparisons for cell in c.cells}
    if max(len(cell.right) for cell in cells.values()) < 2:
        return " (1 seed)"
    alone = sorted(name for name, cell in cells.items() if len(cell.right) < 2)
    return f" (1 seed: {', '.join(alone)} {'has' if len(alone) == 1 else 'have'} no other finished seed)"


def _uncompared(named: Named, results: list) -> list[str]:
    """Each of `named` without a decided comparison among `results`, with why."""
    out = []
    for label, (own, why) in named.items():
        outcomes = [o for c, o, _ in results if any(c is x for x in own)]
        if any(not isinstance(o, str) for o in outcomes):
            continue
        left = sorted(set(o for o in outcomes if isinstance(o, str)))
        out.append(f"{label} ({why or ('each of its comparisons left out: ' + '; '.join(left)) or 'no comparison'})")
    return out


def _all(parts: list) -> Optional[bool]:
    """False if any part is refuted, else None if any is within noise or its seeds
    disagree, else True."""
    parts = [None if p is DISAGREE else p for p in parts]
    return False if False in parts else (None if None in parts else True)


def _pairs(table: Table, a: str, b: str) -> tuple[list[tuple[Model, Model]], list[str]]:
    """The (A, B) models of archs a and b at equal size, and, where a pair of one base
    size is not, why (both counts and their ratio)."""
    pairs, unequal = [], []
    for x in table.models(a):
        for y in table.models(b):
            if same_size(x, y):
                pairs.append((x, y))
            elif x.size.split("-")[0] == y.size.split("-")[0]:
                if x.params and y.params:
                    ratio = max(x.params, y.params) / min(x.params, y.params)
                    unequal.append(f"{x} against {y}: {ratio:.2f}x apart")
                else:
                    unequal.append(f"{x} against {y}: parameter counts unknown")
    return pairs, unequal


def _sized(name: str, comparisons: list[Comparison], unequal: list[str], needs: str, paired: bool,
           named: Optional[Named] = None) -> str:
    """A line whose models were paired by size: Not testable at equal size where
    pairs of its archs exist but none within SAME_SIZE."""
    if not comparisons and unequal and not paired:
        return (f"- **Not testable at equal size**: {name} (parameter counts more than {float(SAME_SIZE):g}x apart: "
                + "; ".join(unequal) + ").")
    return verdict(name, comparisons, needs, named=named)


def _guarded(reason: str, text: str, contradicted: bool) -> tuple[Outcome, str]:
    """What a guard gives: its cells left out (`reason`) where they can show the
    claim neither way; kept and undecided where they contradict it beyond the margin
    (a counterexample is never dropped as uninformative)."""
    if contradicted:
        return None, f"{text} ({reason}, but they contradict the claim beyond the margin: kept, undecided)"
    return reason, text


ARCH_WORDS = {"transformer": "the Transformer", "mamba": "Mamba", "hybrid": "the hybrid"}
PAPER_ARCHS = tuple(ARCH_WORDS)


def fall_name(setup: str) -> str:
    return (f"{setup}: Mamba's exact match falls as n grows, far more than the Transformer's and the hybrid's of "
            f"the same size (by >= {float(FAR):g} more from the smallest n to the largest)")


def fall_line(table: Table, setup: str) -> str:
    """(a) in one setup: Mamba falls with n far more than the same-size Transformer
    and hybrid: each of the two compared, or the line says which was not and why."""
    comparisons, unequal, paired, named = [], [], False, {}
    for other in ("transformer", "hybrid"):
        pairs, apart = _pairs(table, "mamba", other)
        unequal += apart
        own = []
        for m, c in pairs:
            paired = True
            ns = table.ns(setup, m, c)
            if len(ns) >= 2:
                own.append(_fall(table, setup, m, c, ns))
        comparisons += own
        why = ("" if own else f"no {other} in this run" if not table.models(other)
               else f"no Mamba in this run" if not table.models("mamba")
               else f"none of Mamba's size: {'; '.join(apart)}" if apart and not pairs
               else f"no two n with {setup} shared with a Mamba of its size" if pairs
               else f"none of a Mamba's size")
        named[ARCH_WORDS[other]] = (own, why)
    return _sized(fall_name(setup), comparisons, unequal,
                  f"needs Mamba and the Transformer or hybrid with {setup} at two or more n", paired, named)


def _fall(table: Table, setup: str, m: Model, c: Model, ns: list[int]) -> Comparison:
    ms, cs = [table.get(m, setup, n) for n in ns], [table.get(c, setup, n) for n in ns]
    label = c.arch.capitalize() if c.arch != "transformer" else "Transformer"

    def judge(view):
        text = (f"{m} against {c}: Mamba {' / '.join(em(x, view) for x in ms)} at n={' / '.join(map(str, ns))}, "
                f"{label} {' / '.join(em(x, view) for x in cs)}")
        falls = [Stat([(Fraction(1), ms[0]), (Fraction(-1), mj), (Fraction(-1), cs[0]), (Fraction(1), cj)])
                 for mj, cj in zip(ms[1:], cs[1:])]
        last = falls[-1]
        # Symmetric: each must solve the smallest n to have a fall of its own to compare.
        if not solves(ms[0], view):
            return f"Mamba does not solve n={ns[0]}, so it has no n to fall from", text
        if not solves(cs[0], view):
            return f"the {label} does not solve n={ns[0]}, so it has no fall of its own to compare", text
        text += f": Mamba falls {float(last.value(view)):.3f} more (margin {last.margin(view):.3f})"
        if solves(ms[-1], view):
            return _guarded(f"Mamba still solves n={ns[-1]}: these n are too small to show a fall", text,
                            last.against(Fraction(0), view) is False)
        if not off_floor(cs[-1], view):
            return _guarded(f"the {label} is at guessing level at n={ns[-1]} too: no contrast", text,
                            last.against(FAR, view) is False)
        if any(f.against(Fraction(0), view) is False for f in falls[:-1]):
            return False, text + ", but less than the " + label + " at a smaller n"
        if any(minus(b, a).against(Fraction(0), view) is True for a, b in zip(ms, ms[1:])):
            return False, text + ", but it rises with n in between"
        return last.against(FAR, view), text

    return Comparison(ms + cs, judge, f"{m} against {c}")


def cot_line(table: Table) -> str:
    """(b) CoT improves every architecture: CoT's skill above the answer alone's."""
    name = "CoT improves every architecture (its exact match above the answer alone's, each as a share of what guessing leaves)"
    return _improves(table, name, "vanilla", "cot", "needs the answer alone and CoT at a shared n")


def retrieval_line(table: Table) -> str:
    """(c) Retrieval improves every architecture more than CoT."""
    name = "retrieval improves every architecture more than CoT (its exact match above CoT's)"
    return _improves(table, name, "cot", "retrieval", "needs CoT and retrieval at a shared n")


SETUP_WORDS = {"vanilla": "the answer alone", "cot": "CoT", "retrieval": "retrieval"}


def _improves(table: Table, name: str, before: str, after: str, needs: str) -> str:
    """Per model and shared n: `after`'s skill above `before`'s. "Every
    architecture" is the paper's three and any other the run has: each must show
    it. Both at guessing level is no improvement: kept, undecided; `before` at the
    ceiling is left out unless `after` falls below it."""
    comparisons, named = [], {}
    for arch in sorted({c.model.arch for c in table.cells.values()} | set(PAPER_ARCHS)):
        own = []
        for model in table.models(arch):
            for n in sorted(set(table.ns(before, model)) & set(table.ns(after, model))):
                a, b = table.get(model, before, n), table.get(model, after, n)

                def judge(view, a=a, b=b, model=model, n=n):
                    text = f"{model} n={n}: {after} {em(b, view)} against {em(a, view)} with {SETUP_WORDS[before]}"
                    if chance(a) != chance(b):
                        text += (f" (above guessing: {float(skill(b).value(view)):.3f} against "
                                 f"{float(skill(a).value(view)):.3f})")
                    gain = Stat(skill(b).terms + [(-c, cell) for c, cell in skill(a).terms], skill(b).const - skill(a).const)
                    if not off_floor(a, view) and not off_floor(b, view):
                        return None, f"{text} (both at guessing level: no improvement shown)"
                    if at_ceiling(a, view):
                        return _guarded(f"{SETUP_WORDS[before]} is already at the ceiling", text,
                                        gain.against(Fraction(0), view) is False)
                    return gain.against(Fraction(0), view), text

                own.append(Comparison([a, b], judge, f"{model} n={n}"))
        comparisons += own
        named[ARCH_WORDS.get(arch, arch)] = (own, "" if own else "absent from this run" if not table.models(arch)
                                             else f"no n with both {SETUP_WORDS[before]} and {SETUP_WORDS[after]}")
    return verdict(name, comparisons, needs, named=named)


def close_line(table: Table) -> str:
    """(d) With retrieval Mamba comes close to the same-size Transformer, where CoT left a gap."""
    name = (f"with retrieval Mamba comes close to the Transformer of the same size (at most {float(CLOSE):g} below it, "
            "where it lags with CoT)")
    pairs, unequal = _pairs(table, "mamba", "transformer")
    comparisons = []
    for m, t in pairs:
        for n in sorted(set(table.ns("retrieval", m, t)) & set(table.ns("cot", m, t))):
            mr, tr, mc, tc = table.get(m, "retrieval", n), table.get(t, "retrieval", n), table.get(m, "cot", n), table.get(t, "cot", n)

            def judge(view, mr=mr, tr=tr, mc=mc, tc=tc, m=m, t=t, n=n):
                text = (f"{m} against {t}, n={n}: with retrieval Mamba {em(mr, view)}, Transformer {em(tr, view)} "
                        f"(with CoT {em(mc, view)} and {em(tc, view)})")
                if not solves(tr, view):
                    return _guarded("the Transformer does not solve retrieval here (unsolved models are not compared)",
                                    text, minus(mr, tr).against(-CLOSE, view) is False)
                if minus(tc, mc).against(Fraction(0), view) is not True:
                    return "Mamba does not lag the Transformer with CoT: no gap to close", text
                return minus(mr, tr).against(-CLOSE, view), text

            comparisons.append(Comparison([mr, tr, mc, tc], judge, f"{m} against {t}, n={n}"))
    needs = "needs Mamba and the Transformer with retrieval and with CoT (the gap retrieval closes) at a shared n"
    return _sized(name, comparisons, unequal, needs, bool(pairs))


def hybrid_line(table: Table) -> str:
    """(e) The hybrid tracks the same-size Transformer, where plain Mamba does not."""
    name = (f"the hybrid tracks the Transformer of the same size (at most {float(CLOSE):g} below it, where a Mamba "
            "of the same size lags)")
    pairs, unequal = _pairs(table, "hybrid", "transformer")
    mambas = table.models("mamba")
    comparisons = []
    for h, t in pairs:
        for setup in sorted(table.setups()):
            for n in table.ns(setup, h, t):
                hc, tc = table.get(h, setup, n), table.get(t, setup, n)
                ms = [c for c in (table.get(m, setup, n) for m in mambas if same_size(m, t)) if c is not None]

                def judge(view, hc=hc, tc=tc, ms=ms, h=h, t=t, setup=setup, n=n):
                    text = (f"{h} against {t}, {setup} n={n}: hybrid {em(hc, view)}, Transformer {em(tc, view)}"
                            + "".join(f", {mc.model} {em(mc, view)}" for mc in ms))
                    if not solves(tc, view):
                        return _guarded("the Transformer does not solve it (unsolved models are not compared)", text,
                                        minus(hc, tc).against(-CLOSE, view) is False)
                    if not any(minus(tc, mc).against(Fraction(0), view) is True for mc in ms):
                        return ("no Mamba of the same size lags the Transformer here" if ms
                                else "no Mamba of the same size to show a gap"), text
                    return minus(hc, tc).against(-CLOSE, view), text

                comparisons.append(Comparison([hc, tc, *ms], judge, f"{h} against {t}, {setup} n={n}"))
    return _sized(name, comparisons, unequal, "needs the hybrid and the Transformer at a shared n", bool(pairs))


STATE_HEADS = {True: "State ablation: the state's size decided the gap",
               False: "State ablation: the state's size did not decide the gap",
               "some": "State ablation: the state's size decided the gap at some n only",
               None: "State ablation: cannot tell"}


def _state_verdict(outcomes: list) -> object:
    """Decided where the smaller state is shown lower at every n that can show it,
    not where it is at none, "some" in between; a comparison whose seeds disagree
    decides nothing (None where no other does)."""
    shown = [o is True for o in outcomes if o is not DISAGREE]
    if not shown:
        return None
    return True if all(shown) else False if not any(shown) else "some"


def state_lines(table: Table) -> list[str]:
    """(f) Does the recurrent state's size decide Mamba's gap? Per setup: Mambas of
    equal parameters whose states differ STATE_RATIO-fold, where either lags the
    Transformer."""
    mambas = table.models("mamba")
    transformers = table.models("transformer")
    pairs = [(small, large) for small in mambas for large in mambas
             if small.state and large.state and large.state >= STATE_RATIO * small.state and same_size(small, large)]
    name = (f"does the size of Mamba's recurrent state decide its gap to the Transformer (Mambas of the same size whose "
            f"states differ {STATE_RATIO}x or more: is the smaller state below the larger?)")
    if not pairs:
        return [f"- **State ablation: not testable here**: {name} (needs two Mambas within {float(SAME_SIZE):g}x in "
                f"parameters whose states differ {STATE_RATIO}x or more)."]
    lines = []
    for setup in [s for s in SETUPS if s in table.setups()]:
        comparisons = []
        for small, large in pairs:
            ts = [t for t in transformers if same_size(t, small) and same_size(t, large)]
            for n in table.ns(setup, small, large):
                s, l = table.get(small, setup, n), table.get(large, setup, n)
                comparisons.append(_state(s, l, [c for c in (table.get(t, setup, n) for t in ts) if c is not None]))
        if comparisons:
            lines.append(verdict(f"{setup}: {name}", comparisons, "", STATE_HEADS, _state_verdict))
    return lines


def _state(s: Cell, l: Cell, tcs: list[Cell]) -> Comparison:
    def judge(view):
        text = (f"{s.setup} n={s.n}: {s.model.size} ({s.model.state:,} state floats, {s.model.params:,} params) "
                f"{em(s, view)}, {l.model.size} ({l.model.state:,} floats, {l.model.params:,} params) {em(l, view)}"
                + "".join(f", Transformer {em(t, view)}" for t in tcs))
        if not tcs:
            return "no Transformer of the same size to show a gap", text
        if not any(minus(t, x).against(Fraction(0), view) is True for t in tcs for x in (s, l)):
            return "neither Mamba lags the Transformer here: no gap to explain", text
        if not off_floor(s, view) and not off_floor(l, view):
            return "both at guessing level", text
        gap = minus(l, s)
        left = min(minus(t, l).value(view) for t in tcs)
        varied = _varied(s.model, l.model)
        return gap.against(Fraction(0), view), (
            text + f" (difference {float(gap.value(view)):.3f}, margin {gap.margin(view):.3f}; the larger state still "
            f"{'lags the Transformer by ' + format(float(left), '.3f') if left > 0 else 'reaches the Transformer'}"
            + (f"; the two Mambas differ in more than the state: {varied}" if varied else "") + ")")

    return Comparison([s, l, *tcs], judge, f"{s.model} against {l.model}, n={s.n}")


def _varied(a: Model, b: Model) -> str:
    """What the size labels of two variants of one preset set apart from the state
    (tiny-dstate1-nlayers4 against tiny: nlayers4), '' where nothing else."""
    def fields(m: Model) -> set[str]:  # the variant's fields, as its label writes them
        return set(m.size.split("-")[1:])

    other = sorted(f for f in fields(a) ^ fields(b) if not f.startswith("dstate"))
    return ", ".join(other)


def findings(best: pd.DataFrame) -> list[str]:
    """Markdown lines, one per finding: (a) per setup, (b) to (e), then (f), the state
    ablation, per setup. A run with task axes (setups like cot-familyrandom) is decided per
    task variant, its lines prefixed with it."""
    out = []
    labels = best["setup"].astype(str).str.partition("-")
    for variant in sorted(set(labels[2])):
        part = best[labels[2] == variant].assign(setup=labels[0][labels[2] == variant])
        lines = _lines(part)
        out += [line.replace("- **", f"- [{variant}] **", 1) for line in lines] if variant else lines
    return out


def _lines(best: pd.DataFrame) -> list[str]:
    table = Table(best)
    if table.unknown_size:
        return ["- **Not decided**: the paper's findings (the validation set's size is not known, so no comparison "
                "can be given its noise margin; `icr-sweep report` of this run with today's version records it)."]
    falls = [_missing(fall_line(table, s), table, {s}) if s in table.setups() else
             f"- **Not testable here**: {fall_name(s)} (this run has no {s} trials)." for s in SETUPS]
    return (_read_notes(table) + falls + [_missing(cot_line(table), table, {"vanilla", "cot"}),
                                          _missing(retrieval_line(table), table, {"cot", "retrieval"}),
                                          _missing(close_line(table), table, {"cot", "retrieval"}),
                                          _missing(hybrid_line(table), table, set(SETUPS))]
            + state_lines(table))


def _missing(line: str, table: Table, setups: set[str]) -> str:
    """`line` naming the cells of `setups` it could not read (no finite exact match)."""
    cells = [cell for setup, cell in table.missing if setup in setups]
    return line + (f" Not read, having no finite exact match: {'; '.join(cells)}." if cells else "")


def _read_notes(table: Table) -> list[str]:
    """What the findings read, and which cells they could not (lines of plain text)."""
    if table.held_out:
        read = (f"Read: the held-out exact match of the {table.held_out} cell(s) whose learning rate was chosen among "
                "several on validation (at the rate chosen: the chosen rate's validation value is biased upwards "
                "by the choice), validation exact match elsewhere.")
    else:
        read = "Read: validation exact match (no cell's rate was chosen among several)."
    missing = ([f"Left out of every comparison, having no finite exact match: {'; '.join(c for _, c in table.missing)}."]
               if table.missing else [])
    return [read, *missing]


def at_guessing(best: pd.DataFrame) -> list[str]:
    """Cells whose exact match is not shown above what guessing gets (vanilla 0.5,
    a trace 0) and, for a trace, whose generation accuracy is not shown apart from
    guessing the answer (0.5): models that learnt nothing."""
    out = []
    table = Table(best)
    for _, r in best.iterrows():
        cell = table.cells.get((r["arch"], str(r["size"]), r["setup"], int(r["n"])))
        if cell is None or not cell.right:
            continue
        view = tuple(cell.right)
        if off_floor(cell, view):
            continue
        value = float(rate(cell, view)[0])
        if r["setup"] == "vanilla":
            out.append(f"{r['arch']} {r['setup']} {r['size']} n={r['n']} (exact match {value:.3f})")
            continue
        gen = r.get("gen_accuracy")
        if gen is None or gen != gen:
            continue
        total = cell.total * len(view)
        guessed = Stat([(Fraction(1), Cell(cell.model, "vanilla", cell.n, {"g": round(gen * total)}, total, ""))])
        if guessed.against(Fraction(1, 2), ("g",)) is None:
            out.append(f"{r['arch']} {r['setup']} {r['size']} n={r['n']} (exact match {value:.3f}, generation {gen:.3f})")
    return out
