"""The findings engine: one place that decides every claim a task declares about a
run, from the report's per-cell table (best.csv), by the rules of docs/findings.md.

A claim is data: a few kinds of directed comparison (`Falls`, `Improves`,
`Repairs`, `StateDecides`, `Leads`), each naming the architectures it compares, the cells,
its statistic, threshold and direction (a task's module lists its claims:
`workloads/tasks/_istree_findings.py`). The engine expands each into comparisons
between models of equal size (parameter counts within 1.2x) and decides each:

- on counts of samples, never rounded floats, against the threshold;
- on the mean over the seeds its cells share, with a margin from Student's t on
  those seeds (training noise and sampling as the seeds measure them); on one seed,
  with the training-noise floor the task declares, or not at all; each seed alone
  holds the decision open only where it contradicts the mean beyond its own margin;
- where its cells can show the claim neither way (every cell at guessing level,
  every cell at the ceiling, outside the cells the claim speaks of) it leaves the
  comparison out, with the cells' numbers; a refutation is never left out, unless
  the cell whose move the claim needs was pinned at a bound.

A line reads Reproduced where every comparison left in is shown and every model the
claim names has one, Not reproduced where one is refuted, Not decided otherwise; its
summary names the comparison that decided it.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import TYPE_CHECKING, Callable, Optional, Sequence

from workloads.metrics import SOLVED as SOLVED_LEVEL
from workloads.results import BASELINE_BY_SEED, BY_SEED, HELD_OUT_BY_SEED, SEED_IDS
from workloads.tasks.verdicts import UNEQUAL, Compared, Finding, Findings, Part

if TYPE_CHECKING:
    import pandas as pd

SOLVED = Fraction(str(SOLVED_LEVEL))  # exact match at which a model solves a cell
SAME_SIZE = Fraction(6, 5)  # parameter counts within this ratio: the paper's presets differ by at most 1.19x
Z = 2.0  # a margin in standard errors where the noise is known (sampling alone; a declared training-noise floor)
T_LEVEL = 0.975  # the mean's margin: Student's t at this level on the seeds' degrees of freedom (two-sided 95%)

POOLED = "pooled"  # the seed id of a cell that gives only the mean of several seeds
MIMETIC = "initmimetic"  # the size label's part of a model with `init: mimetic` (workloads/naming.py's field_label)
MIMETIC_PARTS = (MIMETIC, "mimetic")  # its label's parts of the init: initmimetic, and mimeticdecay_bc where not all

ARCH_WORDS = {"transformer": "the Transformer", "mamba": "Mamba", "hybrid": "the hybrid"}


def arch_words(arch: str) -> str:
    return ARCH_WORDS.get(arch, arch)


# ---------------------------------------------------------------- the table


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
    right: dict  # seed -> samples right under teacher forcing
    total: int  # samples per seed
    still: str  # where its training loss was still falling: "0.943 -> 0.271", else ""
    chance: Fraction = Fraction(0)  # exact match of a model that guesses
    read: str = "validation"  # "held-out" where its rate was chosen among several; "biased": chosen, no held-out value
    noise: Optional[float] = None  # the task's training-noise floor (sd per seed), for a comparison on one seed

    @property
    def name(self) -> str:
        return f"{self.model.arch} {self.setup} {self.model.size} n={self.n}"


def rate(cell: Cell, view: tuple) -> tuple[Fraction, int]:
    """A cell's exact match under a view (its counts over the view's seeds) and the
    samples behind it."""
    total = cell.total * len(view)
    return Fraction(sum(cell.right[s] for s in view), total), total


def em(cell: Cell, view: tuple) -> str:
    return f"{float(rate(cell, view)[0]):.3f}"


def t_cdf(x: float, dof: int) -> float:
    """Student's t distribution's CDF at `x` on `dof` (a whole number) degrees of
    freedom, in closed form (Abramowitz and Stegun 26.7.3 and 26.7.4)."""
    theta = math.atan(x / math.sqrt(dof))
    c2 = math.cos(theta) ** 2
    if dof % 2:
        term, total = math.sin(theta) * math.cos(theta), 0.0
        for k in range(1, (dof - 1) // 2 + 1):  # 1 + 2/3 cos^2 + 2.4/(3.5) cos^4 + ...
            total += term
            term *= c2 * (2 * k) / (2 * k + 1)
        return 0.5 + (theta + (total if dof > 1 else 0.0)) / math.pi
    term, total = math.sin(theta), 0.0
    for k in range(1, dof // 2 + 1):  # 1 + 1/2 cos^2 + 1.3/(2.4) cos^4 + ...
        total += term
        term *= c2 * (2 * k - 1) / (2 * k)
    return 0.5 + total / 2


@functools.lru_cache(maxsize=None)
def t_quantile(p: float, dof: int) -> float:
    """The `p` quantile of Student's t on `dof` degrees of freedom (bisection on t_cdf;
    remembered: a report asks the same few, a simulation thousands of times)."""
    lo, hi = -1e6, 1e6
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if t_cdf(mid, dof) < p else (lo, mid)
    return (lo + hi) / 2


class Table:
    """The report's best-per-cell table as cells with counts per seed, and what it
    read: each cell's held-out exact match where its rate was chosen among several
    on validation (the chosen rate's validation value is biased upwards by the
    choice), validation where one rate was tried or no held-out value exists."""

    def __init__(self, best: pd.DataFrame, chance: dict, noise: Optional[float] = None):
        self.cells: dict[tuple, Cell] = {}
        self.baselines: dict[tuple, Cell] = {}  # a cell at its arch's paper rate, where its rate was chosen among several
        self.unknown_size = "val_samples" not in best or best["val_samples"].isna().any()
        self.missing: list[tuple[str, str]] = []  # (setup, cell) without a finite value: left out of every comparison
        self.held_out: list[str] = []  # cells read on the held-out set
        self.biased: list[str] = []  # cells whose rate was chosen among several, read on validation (no held-out value)
        # One model per (arch, size), its cells' keys: a state that grows with the length (log-linear
        # attention's) differs from cell to cell, and is the model's at its fullest, its largest here.
        states = {}
        for _, r in best.iterrows():
            state, key = _int(r.get("state_floats")), (r["arch"], str(r["size"]))
            states[key] = state if states.get(key) is None else max(states[key], state or 0)
        for _, r in best.iterrows():
            model = Model(r["arch"], str(r["size"]), _int(r.get("params")), states[(r["arch"], str(r["size"]))])
            name = f"{model.arch} {r['setup']} {model.size} n={int(r['n'])}"
            values, seeds, source = _by_seed(r)
            if not all(math.isfinite(v) for v in values):
                self.missing.append((r["setup"], f"{name} ({', '.join(f'seed {s}: {v:g}' for s, v in zip(seeds, values))})"))
                continue
            {"held-out": self.held_out, "biased": self.biased}.get(source, []).append(name)
            total = (_int(r.get("val_samples")) or 1) * ((_int(r["seeds"]) or 1) if seeds == [POOLED] else 1)
            still = r.get("still_training")
            key = (model.arch, model.size, r["setup"], int(r["n"]))
            level = Fraction(str(chance.get(r["setup"], 0.0)))
            self.cells[key] = Cell(model, r["setup"], int(r["n"]), {s: round(v * total) for s, v in zip(seeds, values)},
                                   total, still if isinstance(still, str) else "", level, source, noise)
            baseline = r.get(BASELINE_BY_SEED)
            if isinstance(baseline, str) and seeds != [POOLED]:
                values = [float(v) for v in baseline.split("/")]
                if all(math.isfinite(v) for v in values) and len(values) == len(seeds):
                    self.baselines[key] = Cell(model, r["setup"], int(r["n"]), {s: round(v * total) for s, v in
                                                                                 zip(seeds, values)}, total, "", level,
                                               "held-out" if source == "held-out" else "validation", noise)

    def models(self, arch: str, mimetic: bool = False) -> list[Model]:
        """The run's models of `arch`, smallest first; those with mimetic init only where
        `mimetic` (they are not the paper's: only the capacity-or-training questions read them)."""
        return sorted({c.model for c in self.cells.values() if c.model.arch == arch
                       and (mimetic or MIMETIC not in _parts(c.model))}, key=lambda m: (m.params or 0, m.size))

    def archs(self) -> list[str]:
        return sorted({c.model.arch for c in self.cells.values()})

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

    def pairs(self, a: str, b: str) -> tuple[list[tuple[Model, Model]], list[str]]:
        """The (A, B) models of archs a and b at equal size, and, where a pair of one
        base size is not, why (both counts and their ratio)."""
        pairs, unequal = [], []
        for x in self.models(a):
            for y in self.models(b):
                if same_size(x, y):
                    pairs.append((x, y))
                elif _parts(x)[0] == _parts(y)[0]:
                    ratio = (f"{max(x.params, y.params) / min(x.params, y.params):.2f}x apart" if x.params and y.params
                             else "parameter counts unknown")
                    unequal.append(f"{x} against {y}: {ratio}")
        return pairs, unequal

    def read_notes(self) -> list[str]:
        """What the findings read, and which cells they could not (plain-text lines)."""
        parts = []
        if self.held_out:
            parts.append(f"the held-out exact match of the {len(self.held_out)} cell(s) whose learning rate was chosen "
                         "among several on validation (at the rate chosen: its validation value is biased upwards by "
                         "the choice)")
        if self.biased:
            parts.append(f"validation exact match, biased upwards by the choice, of the {len(self.biased)} cell(s) "
                         f"whose rate was chosen among several but which have no held-out value ({'; '.join(self.biased)})")
        read = ("Read: " + "; ".join(parts) + "; validation exact match elsewhere (one rate tried)." if parts else
                "Read: validation exact match (no cell's rate was chosen among several).")
        missing = ([f"Left out of every comparison, having no finite exact match: {'; '.join(c for _, c in self.missing)}."]
                   if self.missing else [])
        mimetic = sorted({f"{c.model.arch} {c.model.size}" for c in self.cells.values()
                          if MIMETIC in _parts(c.model)})
        aside = ([f"Read by the capacity-or-training questions alone, not being the paper's models: "
                  f"{', '.join(mimetic)} (mimetic init)."] if mimetic else [])
        return [read, *missing, *aside]


def _by_seed(r) -> tuple[list[float], list[str], str]:
    """Each seed's exact match, the seeds' ids (POOLED where the table gives only the
    mean of several seeds), and where they were read: "held-out", "biased" (a rate
    chosen among several, no held-out value) or "validation"."""
    ids = str(r[SEED_IDS]).split("/") if isinstance(r.get(SEED_IDS), str) else None
    chosen = (_int(r.get("rates")) or 1) > 1
    held = r.get(HELD_OUT_BY_SEED)
    if chosen and isinstance(held, str):
        values = [float(v) for v in held.split("/")]
        if all(math.isfinite(v) for v in values):
            return values, ids or [str(s) for s in range(len(values))], "held-out"
    source = "biased" if chosen else "validation"
    if isinstance(r.get(BY_SEED), str):
        values = [float(v) for v in r[BY_SEED].split("/")]
        return values, ids or [str(s) for s in range(len(values))], source
    seeds = _int(r.get("seeds")) or 1
    return [float(r["val_exact_match"])], ["0" if seeds == 1 else POOLED], source


def _int(value) -> Optional[int]:
    return None if value is None or value != value else int(value)


# ---------------------------------------------------------------- statistics


class Stat:
    """A signed sum of cells' exact match, plus a constant: sum(c * k/N) + const."""

    def __init__(self, terms: list[tuple[Fraction, Cell]], const: Fraction = Fraction(0)):
        self.terms, self.const = terms, const

    def value(self, view: tuple) -> Fraction:
        return sum((c * rate(cell, view)[0] for c, cell in self.terms), self.const)

    def sampling(self, view: tuple) -> float:
        """The sampling variance of the statistic on the view's pooled counts
        (Agresti-Caffo: never zero at 0 or 1)."""
        var = 0.0
        for c, cell in self.terms:
            k, total = rate(cell, view)
            p = (float(k) * total + 1) / (total + 2)
            var += float(c) ** 2 * p * (1 - p) / total
        return var

    def by_seed(self, view: tuple) -> list[float]:
        """The statistic on each seed of the view alone."""
        return [float(self.value((s,))) for s in view]

    def margin(self, view: tuple, spread: bool = True) -> float:
        """The noise margin of the statistic on the mean over the view's seeds
        (docs/findings.md): Student's t on the seeds (S >= 2) times the standard error
        of the mean, max(s_T^2 / S, sampling); on one seed, Z standard errors of
        sampling and the cells' declared training-noise floor (infinite where a cell
        has none: the noise is not measured). `spread` False: sampling alone, Z
        standard errors (where a cell sits, at a bound or not)."""
        sampling = self.sampling(view)
        if not spread:
            return Z * math.sqrt(sampling)
        if len(view) >= 2:
            values = self.by_seed(view)
            mean = sum(values) / len(values)
            spread_var = sum((v - mean) ** 2 for v in values) / (len(values) - 1)
            return t_quantile(T_LEVEL, len(view) - 1) * math.sqrt(max(spread_var / len(view), sampling))
        if any(cell.noise is None for _, cell in self.terms):
            return math.inf
        return Z * math.sqrt(sampling + sum(float(c) ** 2 * cell.noise ** 2 for c, cell in self.terms))

    def __add__(self, other: Stat) -> Stat:
        return Stat(self.terms + other.terms, self.const + other.const)

    def __sub__(self, other: Stat) -> Stat:
        return Stat(self.terms + [(-c, cell) for c, cell in other.terms], self.const - other.const)


def one(cell: Cell) -> Stat:
    return Stat([(Fraction(1), cell)])


def skill(cell: Cell) -> Stat:
    """Exact match above chance as a share of what chance leaves: one scale for an
    answer guessed at 0.5 and a trace never guessed (0)."""
    c = cell.chance
    return Stat([(1 / (1 - c), cell)], -c / (1 - c))


@dataclass
class Test:
    """A statistic against a threshold: shown (True) where it exceeds it by more than
    its margin, refuted (False) where it falls short by more, None within noise.
    `says`: the statistic in words, with {} for its value; `fails`: what a condition
    that is not shown means (for a condition of a comparison)."""

    stat: Stat
    threshold: Fraction
    says: str
    fails: str = ""
    spread: bool = True  # the margin counts training noise (False: sampling alone, for where a cell sits)

    def against(self, view: tuple) -> Optional[bool]:
        gap, margin = self.stat.value(view) - self.threshold, self.stat.margin(view, self.spread)
        return True if gap > margin else False if gap < -margin else None

    def slack(self, view: tuple) -> float:
        """How far beyond its margin the statistic clears the threshold (negative: short)."""
        margin = self.stat.margin(view, self.spread)
        return float(self.stat.value(view) - self.threshold) - (margin if math.isfinite(margin) else 1e9)

    def describe(self, view: tuple) -> str:
        return f"{self.says.format(f'{float(self.stat.value(view)):.3f}')} ({self._against(view)})"

    def figure(self, view: tuple) -> str:
        """The deciding number alone: the statistic, the threshold and the margin."""
        return f"{float(self.stat.value(view)):.3f} ({self._against(view)})"

    def _against(self, view: tuple) -> str:
        margin = self.stat.margin(view, self.spread)
        noise = f"margin {margin:.3f}" if math.isfinite(margin) else "one seed: training noise not measured"
        return f"{float(self.threshold):g} claimed, {noise}"


def solves(cell: Cell, fails: str = "") -> Test:
    return Test(one(cell), SOLVED, f"{cell.name} {{}}",
                fails or f"{arch_words(cell.model.arch)} does not solve {cell.setup} n={cell.n} ({cell.model})")


def off_floor(cell: Cell, view: tuple) -> bool:
    """Whether the cell's samples put it above guessing (a bound: where it sits, by
    sampling alone; a cell whose seeds straddle a bound is at neither)."""
    return Test(one(cell), cell.chance, "", spread=False).against(view) is True


def at_ceiling(cell: Cell, view: tuple) -> bool:
    return Test(one(cell), Fraction(1), "", spread=False).against(view) is not False


class AnyOf:
    """A condition that holds where one of its tests is shown."""

    def __init__(self, tests: list[Test], fails: str):
        self.tests, self.fails = tests, fails

    def against(self, view: tuple) -> Optional[bool]:
        got = [t.against(view) for t in self.tests]
        return True if True in got else False if got and all(g is False for g in got) else None


# ---------------------------------------------------------------- comparisons

SHOWN, REFUTED, NOISE, OUT, HOLDS = "shown", "refuted", "within noise", "left out", "holds"


@dataclass
class Comparison:
    """One directed comparison of a claim. `claim`: shown where its statistic clears
    the threshold. `within`: where the claim speaks at all (outside, the comparison is
    left out, a refutation too). `where`: where it can show the claim (outside, it
    shows nothing: left out unless refuted). `capped`: (cell, "floor" or "ceiling"),
    the cells whose move the claim needs: pinned at that bound, they could not make
    it, so a refutation is not conclusive. `check`: it can refute, never show (an n
    between the end points). `names`: the models or archs of the claim it speaks for."""

    label: str
    cells: list[Cell]
    claim: Test
    numbers: Callable[[tuple], str]
    within: Sequence = ()
    where: Sequence = ()
    capped: Sequence[tuple[Cell, str]] = ()
    check: bool = False
    names: tuple[str, ...] = ()
    room: Sequence[tuple[Cell, Test]] = ()  # (cell, material): where the cell sits at the ceiling, the claim (an
    # improvement) has no room to be shown, and refutes only where `material` (a dip large enough to matter) is shown

    @property
    def seeds(self) -> tuple:
        shared = set.intersection(*(set(c.right) for c in self.cells)) if self.cells else set()
        return tuple(sorted(shared, key=lambda s: (0, int(s)) if s.isdigit() else (1, s)))


@dataclass
class Decision:
    comparison: Comparison
    kind: str
    text: str  # the cells' numbers, the statistic and what decided it
    mixed: bool = False  # the views disagreed: undecided
    slack: float = 0.0  # on the mean: how far beyond the margin the claim was cleared (negative: short)
    why: str = ""  # why it was left out
    figure: str = ""  # the statistic against its threshold and margin, in one figure

    @property
    def compared(self) -> Compared:
        return Compared(self.comparison.label, self.kind, self.text, self.why, self.mixed, self.figure)

    @property
    def said(self) -> str:
        return self.compared.said


def _view(comp: Comparison, view: tuple) -> tuple[str, str]:
    """A comparison's outcome under one view of the seeds, and why where it is left out."""
    if all(not off_floor(c, view) for c in comp.cells):
        return OUT, "every cell at guessing level"
    if all(at_ceiling(c, view) for c in comp.cells):
        return OUT, "every cell at the ceiling"
    for cond in comp.within:
        if cond.against(view) is not True:
            return OUT, cond.fails
    full = [(c, dip) for c, dip in comp.room if at_ceiling(c, view)]
    if full:
        c, dip = full[0]
        if dip.against(view) is True:
            return REFUTED, ""
        return OUT, (f"{c.name} at the ceiling: no room to improve, and what lies below it is no material dip "
                     f"({dip.describe(view)})")
    claim = comp.claim.against(view)
    if claim is False:
        pinned = [f"{c.name} at {'guessing level' if bound == 'floor' else 'the ceiling'}" for c, bound in comp.capped
                  if (bound == "floor" and not off_floor(c, view)) or (bound == "ceiling" and at_ceiling(c, view))]
        if not pinned:
            return REFUTED, ""
        return OUT, f"{', '.join(pinned)}: the move the claim needs was not possible from there, so it cannot refute"
    for cond in comp.where:
        if cond.against(view) is not True:
            return OUT, cond.fails
    if comp.check:
        return HOLDS, ""
    return (SHOWN if claim else NOISE), ""


def decide(comp: Comparison) -> Decision:
    """The outcome on the mean of the shared seeds (docs/findings.md), kept unless a
    seed alone contradicts it beyond its own margin; each seed that falls on the
    other side of the threshold is named beside it."""
    seeds = comp.seeds
    if not seeds:
        return Decision(comp, OUT, f"{comp.label} (its cells share no seed)", why="its cells share no seed")
    text = f"{comp.label}: {comp.numbers(seeds)}: {comp.claim.describe(seeds)}"
    figure = comp.claim.figure(seeds)
    kind, why = _view(comp, seeds)
    slack = comp.claim.slack(seeds)
    if kind == OUT:
        return Decision(comp, OUT, f"{text}; {why}", slack=slack, why=why, figure=figure)
    alone, holds = _seeds_alone(comp, seeds, kind)
    if holds:
        return Decision(comp, NOISE, f"{text} [{kind} by the mean; {alone}: undecided]", mixed=True, slack=slack,
                        figure=figure)
    return Decision(comp, kind, f"{text} ({alone})" if alone else text, slack=slack, figure=figure)


def _seeds_alone(comp: Comparison, seeds: tuple, kind: str) -> tuple[str, bool]:
    """The seeds alone that fall on the other side of the threshold from the mean, in
    words, and whether one of them contradicts a decided mean beyond its own margin:
    the margin a run of that seed alone would have (its sampling and the task's
    declared training noise; none where the task declares none: it never holds)."""
    if len(seeds) < 2:
        return "", False
    claim = comp.claim
    side = float(claim.stat.value(seeds) - claim.threshold) >= 0
    said, holds = [], False
    for s in seeds:
        value, margin = float(claim.stat.value((s,))), claim.stat.margin((s,))
        gap = value - float(claim.threshold)
        if (gap >= 0) == side:
            continue
        beyond = abs(gap) > margin
        against = (kind in (SHOWN, HOLDS) and gap < 0) or (kind == REFUTED and gap > 0)
        holds = holds or (beyond and against)
        own = f"its own margin {margin:.3f}" if math.isfinite(margin) else "its own margin not measured"
        said.append(f"seed {s} alone {value:.3f}, {'beyond' if beyond else 'within'} {own}")
    return "; ".join(said), holds


# ---------------------------------------------------------------- claims and their lines


@dataclass
class Claim:
    """A claim expanded on a run: its comparisons, each model it names with why it has
    none ("" where it has), what a run needs to test it, the pairs of unequal size,
    and, for a question rather than a claim (the state ablation), its own heads."""

    name: str
    comparisons: list[Comparison]
    named: dict = field(default_factory=dict)
    needs: str = ""
    unequal: list[str] = field(default_factory=list)
    paired: bool = True
    setups: tuple[str, ...] = ()  # the setups it reads: its line names their cells that have no value
    heads: Optional[dict] = None
    judge: Optional[Callable] = None  # how its head is decided: a claim's rule, else a question's where it has heads
    notes: str = ""  # a sentence its line ends with (cells it did not read, and why)


HEADS = {True: "Reproduced", False: "Not reproduced", None: "Not decided"}


def _judge(kept: list[Decision], uncovered: list[str]) -> tuple[object, Optional[Decision]]:
    """A claim's verdict over its decided comparisons, and the one that decided it:
    refuted where one is (the one furthest beyond its margin); shown where every one is
    and every named model has one (the weakest); else not decided (the first open one)."""
    refuted = [d for d in kept if d.kind == REFUTED]
    if refuted:
        return False, min(refuted, key=lambda d: d.slack)
    open_ = [d for d in kept if d.kind == NOISE]
    shown = [d for d in kept if d.kind == SHOWN]
    if shown and not open_ and not uncovered:
        return True, min(shown, key=lambda d: d.slack)
    return None, (open_[0] if open_ else None)


def _judge_question(kept: list[Decision], uncovered: list[str]) -> tuple[object, Optional[Decision]]:
    """A question's answer (the state ablation): yes where every comparison that agrees
    across seeds is shown, no where none is, "some" in between; a comparison whose views
    disagree decides nothing."""
    clear = [d for d in kept if not d.mixed]
    if not clear:
        return None, (kept[0] if kept else None)
    shown = [d for d in clear if d.kind == SHOWN]
    if len(shown) == len(clear):
        return True, min(shown, key=lambda d: d.slack)
    other = next(d for d in clear if d.kind != SHOWN)
    return (False if not shown else "some"), other


def line(claim: Claim, missing: list[tuple[str, str]] = ()) -> Finding:
    """A claim decided on a run: its verdict, the seeds its comparisons read, every
    comparison decided, each model it could not compare and why, those left out with
    their numbers, the deciding cells still training, the cells it could not read."""
    heads = claim.heads or HEADS
    unread = tuple(cell for setup, cell in missing if setup in claim.setups)
    if not claim.comparisons:
        if claim.unequal and not claim.paired:
            head, why = UNEQUAL, (f"parameter counts more than {float(SAME_SIZE):g}x apart: "
                                                        + "; ".join(claim.unequal))
        else:
            head, why = heads.get("untestable", "Not testable here"), claim.needs
        return Finding(claim.name, head, decided_by=why, untestable=why, unread=unread)
    decisions = [decide(c) for c in claim.comparisons]
    kept = [d for d in decisions if d.kind != OUT]
    uncovered = _uncovered(claim, decisions)
    outcome, decisive = (claim.judge or (_judge_question if claim.heads else _judge))(kept, uncovered)
    left = [d.text for d in decisions if d.kind == OUT]
    training = sorted({f"{cell.name} (loss {cell.still})" for d in kept for cell in d.comparison.cells if cell.still})
    said = decisive.said if decisive else (f"not shown for every model it names: {'; '.join(uncovered)}" if uncovered
                                           else f"no comparison can show it: {left[0]}" if left else "")
    figure = (f"{decisive.figure} [{decisive.kind}]" if decisive and not decisive.mixed else decisive.figure
              if decisive else "not shown for every model it names" if uncovered
              else "no comparison can show it" if left else "")
    return Finding(claim.name, heads[outcome], _seeds(claim.comparisons).strip(), said,
                   tuple(d.compared for d in kept), tuple(d.compared for d in decisions if d.kind == OUT),
                   tuple(uncovered), still_training=tuple(training), notes=claim.notes, unread=unread, figure=figure)


def _uncovered(claim: Claim, decisions: list[Decision]) -> list[str]:
    """Each model the claim names without a comparison decided, with why: never
    compared (and why), or each of its comparisons left out (and why)."""
    out = []
    for label, why in claim.named.items():
        own = [d for d in decisions if label in d.comparison.names]
        if any(d.kind in (SHOWN, NOISE, REFUTED) for d in own):
            continue
        reasons = list(dict.fromkeys(d.why for d in own if d.kind == OUT))
        out.append(f"{label} (each of its comparisons left out: {'; '.join(reasons)})" if reasons
                   else f"{label} (never compared: {why or 'no comparison'})")
    return out


def _seeds(comparisons: list[Comparison]) -> str:
    """" on 2 seeds", " (the mean over seeds only)", " (1 seed)", and where other cells
    have more, which cells have one only (a seed still running, failed or never run)."""
    seeds = min((c.seeds for c in comparisons), key=len)
    if seeds == (POOLED,):
        return " (the mean over seeds only)"
    if len(seeds) > 1:
        return f" on {len(seeds)} seeds"
    cells = {cell.name: cell for c in comparisons for cell in c.cells}
    if max(len(cell.right) for cell in cells.values()) < 2:
        return " (1 seed)"
    alone = sorted(name for name, cell in cells.items() if len(cell.right) < 2)
    return f" (1 seed: {', '.join(alone)} {'has' if len(alone) == 1 else 'have'} no other finished seed)"


# ---------------------------------------------------------------- the kinds of claim


def _ns(ns: Sequence[int]) -> str:
    return " / ".join(map(str, ns))


@dataclass(frozen=True)
class Falls:
    """In each of `setups`, `subject`'s exact match falls as n grows, by `more_by` more
    than that of each arch of `against` of its size (from the smallest n they share to
    the largest), and by `more_by` itself: measured from a cell it solves; at no n
    between does it fall less than the other, nor rise from one n to the next."""

    name: str  # with {setup}, {more_by} and {far} ("far " where more_by > 0)
    setups: tuple[str, ...]
    subject: str
    against: tuple[str, ...]
    more_by: dict  # setup -> the threshold

    @property
    def speaks_of(self) -> tuple[str, ...]:
        return (self.subject, *self.against)

    def expand(self, table: Table) -> list[Claim]:
        return [self._setup(table, setup) for setup in self.setups]

    def _setup(self, table: Table, setup: str) -> Claim:
        name = self.name.format(setup=setup, more_by=f"{float(self.more_by[setup]):g}",
                                far="far " if self.more_by[setup] > 0 else "")
        if setup not in table.setups():
            return Claim(name, [], needs=f"this run has no finished {setup} trial", setups=(setup,))
        comparisons, named, unequal, paired, falls = [], {}, [], False, {}
        for other in self.against:
            pairs, apart = table.pairs(self.subject, other)
            unequal += apart
            own = []
            for s, c in pairs:
                paired = True
                ns = table.ns(setup, s, c)
                if len(ns) >= 2:
                    own += self._against(table, setup, s, c, ns)
                    falls[(s, tuple(ns))] = None
            comparisons += own
            named[arch_words(other)] = "" if own else _why_no_pair(table, self.subject, other, pairs, apart,
                                                                   f"no two n with {setup} shared with a "
                                                                   f"{arch_words(self.subject)} of its size")
        for s, ns in falls:
            comparisons += self._own(table, setup, s, list(ns))
        return Claim(name, comparisons, named, f"needs {arch_words(self.subject)} and "
                     f"{' or '.join(map(arch_words, self.against))} with {setup} at two or more n", unequal, paired,
                     (setup,))

    def _against(self, table: Table, setup: str, s: Model, c: Model, ns: list[int]) -> list[Comparison]:
        ss, cs = [table.get(s, setup, n) for n in ns], [table.get(c, setup, n) for n in ns]
        words, other = arch_words(self.subject), arch_words(c.arch)

        def numbers(view):
            return (f"{words} {' / '.join(em(x, view) for x in ss)} at n={_ns(ns)}, {other} "
                    f"{' / '.join(em(x, view) for x in cs)}")

        def fall(j: int) -> Stat:
            return (one(ss[0]) - one(ss[j])) - (one(cs[0]) - one(cs[j]))

        solved = solves(ss[0], f"{words} does not solve n={ns[0]}, so it has no n to fall from")
        out = [Comparison(f"{s} against {c}", ss + cs, Test(fall(-1), self.more_by[setup], f"{words} falls {{}} more"),
                          numbers, where=[solved], capped=[(ss[-1], "floor")], names=(other,))]
        for j in range(1, len(ns) - 1):  # an n between: Mamba must not fall less than the other there
            out.append(Comparison(f"{s} against {c} at n={ns[j]}", ss + cs,
                                  Test(fall(j), Fraction(0), f"by n={ns[j]} {words} falls {{}} more"), numbers,
                                  capped=[(ss[j], "floor")], check=True, names=(other,)))
        return out

    def _own(self, table: Table, setup: str, s: Model, ns: list[int]) -> list[Comparison]:
        """The subject's own fall from the smallest n to the largest, and no rise between."""
        ss, words = [table.get(s, setup, n) for n in ns], arch_words(self.subject)

        def numbers(view):
            return f"{words} {' / '.join(em(x, view) for x in ss)} at n={_ns(ns)}"

        solved = solves(ss[0], f"{words} does not solve n={ns[0]}, so it has no n to fall from")
        out = [Comparison(f"{s} itself", ss, Test(one(ss[0]) - one(ss[-1]), self.more_by[setup],
                                                  f"it falls {{}} from n={ns[0]} to n={ns[-1]}"),
                          numbers, where=[solved], capped=[(ss[-1], "floor")])]
        for a, b, na, nb in (zip(ss, ss[1:], ns, ns[1:]) if len(ns) > 2 else ()):  # with two n, the fall above
            out.append(Comparison(f"{s} from n={na} to n={nb}", [a, b], Test(one(a) - one(b), Fraction(0),
                                  f"it falls {{}} from n={na} to n={nb}"), numbers, check=True))
        return out


def _why_no_pair(table: Table, a: str, b: str, pairs: list, apart: list[str], no_n: str) -> str:
    """Why arch b has no comparison with arch a."""
    if not table.models(b):
        return f"no {b} in this run"
    if not table.models(a):
        return f"no {a} in this run"
    if apart and not pairs:
        return f"none of {arch_words(a)}'s size: {'; '.join(apart)}"
    return no_n if pairs else f"none of a {arch_words(a)}'s size"


@dataclass(frozen=True)
class Improves:
    """`after` improves every architecture over `before` (the run's and `archs`): per
    model and n, its skill (exact match above guessing, as a share of what guessing
    leaves) is higher. Bounded on both sides: where the `after` cell sits at the
    ceiling, a shortfall is not conclusive; where the `before` cell does, there is no
    room to improve, and only a material dip (`after`'s skill `dip` or more below,
    beyond the margin) refutes."""

    name: str
    before: str
    after: str
    archs: tuple[str, ...]
    words: dict  # setup -> its name in a line
    dip: Fraction = Fraction(1, 10)

    @property
    def speaks_of(self) -> tuple[str, ...]:
        return self.archs

    def expand(self, table: Table) -> list[Claim]:
        comparisons, named = [], {}
        for arch in sorted(set(table.archs()) | set(self.archs)):
            own = []
            for model in table.models(arch):
                for n in sorted(set(table.ns(self.before, model)) & set(table.ns(self.after, model))):
                    own.append(self._gain(model, table.get(model, self.before, n), table.get(model, self.after, n)))
            comparisons += own
            named[arch_words(arch)] = "" if own else ("absent from this run" if not table.models(arch) else
                                                      f"no n with both {self.words[self.before]} and "
                                                      f"{self.words[self.after]}")
        return [Claim(self.name, comparisons, named, f"needs {self.words[self.before]} and {self.words[self.after]} "
                      "at a shared n", setups=(self.before, self.after))]

    def _gain(self, model: Model, a: Cell, b: Cell) -> Comparison:
        before, after = self.words[self.before], self.words[self.after]

        def numbers(view):
            text = f"{after} {em(b, view)} against {em(a, view)} with {before}"
            if a.chance != b.chance:
                text += (f" (above guessing: {float(skill(b).value(view)):.3f} against "
                         f"{float(skill(a).value(view)):.3f})")
            return text

        dip = Test(skill(a) - skill(b), self.dip, f"{after} below {before} by {{}}")
        return Comparison(f"{model} n={a.n}", [a, b], Test(skill(b) - skill(a), Fraction(0), f"a gain of {{}}"),
                          numbers, capped=[(b, "ceiling")], names=(arch_words(model.arch),), room=[(a, dip)])


@dataclass(frozen=True)
class Leads:
    """In each of `setups`, at each n they share, `ahead`'s exact match exceeds that of
    `behind` of its size by more than `by`: a lag of `behind` where `by` > 0, `ahead`
    within -`by` of `behind` (tracks it) where `by` < 0. Nothing trained them on the
    run, so no cell needs to be solved: the claim is about the two numbers alone."""

    name: str  # with {setup}
    ahead: str
    behind: str
    setups: tuple[str, ...]
    by: Fraction
    words: dict = field(default_factory=dict)  # setup -> its name in a line

    @property
    def speaks_of(self) -> tuple[str, ...]:
        return (self.ahead, self.behind)

    def expand(self, table: Table) -> list[Claim]:
        return [self._setup(table, setup) for setup in self.setups]

    def _setup(self, table: Table, setup: str) -> Claim:
        name = self.name.format(setup=self.words.get(setup, setup))
        if setup not in table.setups():
            return Claim(name, [], needs=f"this run has no finished {setup} trial", setups=(setup,))
        a_words, b_words = arch_words(self.ahead), arch_words(self.behind)
        pairs, apart = table.pairs(self.ahead, self.behind)
        comparisons = []
        for a, b in pairs:
            for n in table.ns(setup, a, b):
                ca, cb = table.get(a, setup, n), table.get(b, setup, n)
                comparisons.append(Comparison(
                    f"{a} against {b}, {setup} n={n}", [ca, cb],
                    Test(one(ca) - one(cb), self.by, f"{a_words} minus {b_words}: {{}}"),
                    lambda view, ca=ca, cb=cb: f"{a_words} {em(ca, view)}, {b_words} {em(cb, view)}",
                    names=(a_words, b_words)))
        why = _why_no_pair(table, self.behind, self.ahead, pairs, apart, f"no n with {setup} shared with a "
                           f"{b_words} of its size")
        named = {a_words: "" if comparisons else why, b_words: "" if comparisons else why}
        return Claim(name, comparisons, named, f"needs {a_words} and {b_words} of its size with {setup}", apart,
                     bool(pairs), (setup,))


@dataclass(frozen=True)
class Repairs:
    """Where `lagging` lags `reference` (of its size) by at least `close` beyond the
    margin in a cell of a gap setup (a material gap), `fixer` in the same n of the
    matching fix setup narrows the gap and ends at most `close` below the reference.
    `setups`: (gap setup, fix setup) pairs; the fixer is the lagging model itself where
    they are the same arch (retrieval repairing Mamba), else every fixer of the
    reference's size (the hybrid). Its closeness is checked in every cell: a fixer far
    below the reference refutes wherever it is."""

    name: str
    lagging: str
    fixer: str
    reference: str
    setups: tuple[tuple[str, str], ...]
    close: Fraction

    @property
    def speaks_of(self) -> tuple[str, ...]:
        return (self.lagging, self.fixer, self.reference)

    def expand(self, table: Table) -> list[Claim]:
        pairs, unequal = table.pairs(self.fixer, self.reference)
        comparisons = []
        for f, r in pairs:
            laggers = [f] if self.fixer == self.lagging else [m for m in table.models(self.lagging) if same_size(m, r)]
            for gap_setup, fix_setup in self.setups:
                lagged = set().union(*(table.ns(gap_setup, m, r) for m in laggers))  # a gap to read
                for n in sorted(set(table.ns(fix_setup, f, r)) & lagged):
                    comparisons += self._cell(table, f, r, laggers, gap_setup, fix_setup, n)
        words, ref, lag = arch_words(self.fixer), arch_words(self.reference), arch_words(self.lagging)
        gap, fix = " and ".join(sorted({g for g, _ in self.setups})), " and ".join(sorted({f for _, f in self.setups}))
        needs = (f"needs {words}, {ref} and {lag} of their size at a shared n" if self.fixer != self.lagging
                 else f"needs {words} and {ref} with {gap} (the gap) and with {fix} at a shared n")
        why = _why_no_pair(table, self.reference, self.fixer, pairs, unequal, needs.replace("needs ", "no n: needs "))
        return [Claim(self.name, comparisons, {words: "" if comparisons else why}, needs, unequal, bool(pairs),
                      tuple(sorted({s for pair in self.setups for s in pair})))]

    def _cell(self, table: Table, f: Model, r: Model, laggers: list[Model], gap_setup: str, fix_setup: str,
              n: int) -> list[Comparison]:
        ff, rf, rg = table.get(f, fix_setup, n), table.get(r, fix_setup, n), table.get(r, gap_setup, n)
        gaps = [(m, table.get(m, gap_setup, n)) for m in laggers]
        gaps = [(m, lg) for m, lg in gaps if lg is not None and rg is not None]
        lag, ref, fix = arch_words(self.lagging), arch_words(self.reference), arch_words(self.fixer)
        where = f"{fix_setup} n={n}" if gap_setup == fix_setup else f"n={n}"

        def numbers(view, gaps=gaps):
            text = f"{fix} {em(ff, view)}, {ref} {em(rf, view)}"
            if gap_setup != fix_setup:
                text = f"with {fix_setup} {text}; with {gap_setup} " + ", ".join(
                    f"{lag} {em(lg, view)}, {ref} {em(rg, view)}" for _, lg in gaps)
            elif self.fixer != self.lagging:
                text += "".join(f", {m} {em(lg, view)}" for m, lg in gaps)
            return text

        material = [Test(one(rg) - one(lg), self.close, "", f"no material gap to close ({lag} lags {ref} with "
                         f"{gap_setup} by less than {float(self.close):g} beyond the margin)") for _, lg in gaps]
        solved = solves(rf, f"{ref} does not solve {fix_setup} n={n}: two unsolved models being close is not "
                            "closing a gap")
        cells = list({id(c): c for c in [ff, rf, rg, *(lg for _, lg in gaps)]}.values())
        label = f"{f} against {r}, {where}"
        out = [Comparison(label, cells, Test(one(ff) - one(rf), -self.close, f"{fix} ends {{}} from {ref}"), numbers,
                          where=[AnyOf(material, material[0].fails if material else
                                       f"no {lag} of {ref}'s size to show a gap"), solved],
                          capped=[(ff, "ceiling")], names=(fix,))]
        for m, lg in gaps:
            gap, after = one(rg) - one(lg), one(rf) - one(ff)
            out.append(Comparison(f"{label}, {m}'s gap" if self.fixer != self.lagging else f"{label}, its gap",
                                  list({id(c): c for c in [ff, rf, lg, rg]}.values()),
                                  Test(gap - after, Fraction(0), f"the gap narrows by {{}}"),
                                  lambda view, own=[(m, lg)]: numbers(view, own),
                                  within=[material[[x for x, _ in gaps].index(m)]], where=[solved],
                                  capped=[(ff, "ceiling")],
                                  names=(fix,)))
        return out


@dataclass(frozen=True)
class StateDecides:
    """A question, not a claim: in each of `setups`, does the size of `arch`'s recurrent
    state decide its gap to `reference`? Per pair of `arch` models of equal size whose
    states differ `ratio`-fold or more, at each n where either lags the reference of
    their size (a gap to explain): is the smaller state below the larger?"""

    name: str  # with {setup}
    setups: tuple[str, ...]
    arch: str
    reference: str
    ratio: int
    heads: dict

    @property
    def speaks_of(self) -> tuple[str, ...]:
        return (self.arch, self.reference)

    def expand(self, table: Table) -> list[Claim]:
        ms = table.models(self.arch)
        pairs = [(s, l) for s in ms for l in ms if s.state and l.state and l.state >= self.ratio * s.state
                 and same_size(s, l)]
        if not pairs:
            return [Claim(self.name.format(setup="every setup").replace("every setup: ", ""), [], needs=(
                f"needs two {arch_words(self.arch)} models within {float(SAME_SIZE):g}x in parameters whose states "
                f"differ {self.ratio}x or more"), heads=self.heads)]
        claims = []
        for setup in [s for s in self.setups if s in table.setups()]:
            comparisons = []
            for small, large in pairs:
                refs = [t for t in table.models(self.reference) if same_size(t, small) and same_size(t, large)]
                for n in table.ns(setup, small, large):
                    tcs = [c for c in (table.get(t, setup, n) for t in refs) if c is not None]
                    comparisons.append(self._pair(table.get(small, setup, n), table.get(large, setup, n), tcs))
            if comparisons:
                claims.append(Claim(self.name.format(setup=setup), comparisons, setups=(setup,), heads=self.heads))
        return claims

    def _pair(self, s: Cell, l: Cell, tcs: list[Cell]) -> Comparison:
        def numbers(view):
            text = (f"{s.model.size} ({s.model.state:,} state floats, {s.model.params:,} params) {em(s, view)}, "
                    f"{l.model.size} ({l.model.state:,} floats, {l.model.params:,} params) {em(l, view)}"
                    + "".join(f", {arch_words(t.model.arch)} {em(t, view)}" for t in tcs))
            left = min((one(t) - one(l)).value(view) for t in tcs) if tcs else None
            if left is not None:
                text += "; the larger state still " + (f"lags it by {float(left):.3f}" if left > 0 else "reaches it")
            varied = ", ".join(sorted(f for f in set(_parts(s.model)[1:]) ^ set(_parts(l.model)[1:])
                                      if not f.startswith("dstate")))
            return text + (f"; the two differ in more than the state: {varied}" if varied else "")

        gap = AnyOf([Test(one(t) - one(x), Fraction(0), "") for t in tcs for x in (s, l)],
                    f"neither lags {arch_words(self.reference)} here: no gap to explain" if tcs
                    else f"no {arch_words(self.reference)} of the same size to show a gap")
        return Comparison(f"{s.setup} n={s.n}: {s.model} against {l.model}", [s, l, *tcs],
                          Test(one(l) - one(s), Fraction(0), "the larger state above the smaller by {}"), numbers,
                          within=[gap])


UNREAD = {"validation": "trained at one learning rate", "biased": "its rate chosen on validation, no held-out value"}


def _parts(model: Model) -> list[str]:
    """A model's size label in its parts: the base size, then each field set apart from
    it (tiny-initmimetic: tiny, initmimetic)."""
    return model.size.split("-")


@dataclass(frozen=True)
class GapCloses:
    """Questions, not claims: capacity or training? In each of `setups`, does
    `arch`'s gap to `reference` of its size close with a lever of training or of
    state: its best learning rate ("rate"), the mimetic init ("init"), a state
    `ratio` times larger ("state")? Per model X the lever gives, and T of its size,
    per n: X ends at most `close` below T (where T solves the cell); for "init" and
    "state", against the model U of X's size without the lever (the default init;
    the smaller state), X narrows U's gap where that gap is material. Answered as
    a claim is: closes (every comparison shown), does not close (one refuted), not
    decided, not compared (what the run lacks, named). "rate" reads the held-out
    set only: a cell whose rate validation chose cannot show that rate's worth on
    validation's own numbers."""

    name: str  # with {setup}
    label: str  # "(ii) mimetic init": the heads name the lever
    setups: tuple[str, ...]
    arch: str
    reference: str
    lever: str  # "rate", "init" or "state"
    close: Fraction
    ratio: int = 3

    @property
    def speaks_of(self) -> tuple[str, ...]:
        return (self.arch, self.reference)

    @property
    def heads(self) -> dict:
        head = f"Capacity or training {self.label}"
        return {True: f"{head}: the gap closes", False: f"{head}: the gap does not close",
                None: f"{head}: not decided", "untestable": f"{head}: not compared"}

    def _levers(self, table: Table) -> tuple[list[tuple[Model, Optional[Model]]], str, str]:
        """(X, U) pairs, U None where the lever has no model without it (the rate);
        X's name in a line; and why there is none."""
        ms = table.models(self.arch, mimetic=True)
        words = arch_words(self.arch)
        if self.lever == "rate":
            return ([(m, None) for m in ms if MIMETIC not in _parts(m)], f"{words} at its best rate",
                    f"no {words} with the default init in this run")
        if self.lever == "init":
            plain = {m.size: m for m in ms if MIMETIC not in _parts(m)}
            pairs = [(m, plain.get("-".join(p for p in _parts(m) if not p.startswith(MIMETIC_PARTS))))
                     for m in ms if MIMETIC in _parts(m)]  # its parts' label too: tiny-initmimetic-mimeticdecay
            return pairs, f"{words} with mimetic init", f"no {words} with init: mimetic in this run"
        pairs = [(large, small) for small in ms for large in ms if small.state and large.state
                 and large.state >= self.ratio * small.state and same_size(small, large)
                 and (MIMETIC in _parts(small)) == (MIMETIC in _parts(large))]
        return (pairs, f"the larger-state {words}", f"no two {words} models within {float(SAME_SIZE):g}x in "
                f"parameters whose states differ {self.ratio}x or more")

    def expand(self, table: Table) -> list[Claim]:
        levers, words, none = self._levers(table)
        if self.lever == "rate" and not any(c.read == "held-out" for c in table.cells.values()
                                            if c.model in {x for x, _ in levers}):
            levers, none = [], (f"no cell of {arch_words(self.arch)} whose learning rate was chosen among two or more, "
                                "read on the held-out set: each was trained at one rate, or has no held-out value")
        if not levers:
            return [Claim(self.name.format(setup="every setup"), [], needs=none, heads=self.heads, judge=_judge)]
        ref = arch_words(self.reference)
        claims = []
        for setup in [s for s in self.setups if s in table.setups()]:
            comparisons, unread, baseless = [], [], []
            for x, u in levers:
                for t in table.models(self.reference):
                    if not (same_size(t, x) and (u is None or same_size(t, u))):
                        continue
                    for n in table.ns(setup, *(m for m in (x, t, u) if m is not None)):
                        xc, tc = table.get(x, setup, n), table.get(t, setup, n)
                        if self.lever == "rate" and xc.read != "held-out":
                            unread.append(f"{xc.name} ({UNREAD[xc.read]})")
                            continue
                        uc = table.baselines.get((x.arch, x.size, setup, n)) if self.lever == "rate" else (
                            None if u is None else table.get(u, setup, n))
                        if uc is None and self.lever == "rate":
                            baseless.append(xc.name)
                        comparisons += self._cell(xc, tc, uc, words)
            unread = list(dict.fromkeys(unread))
            alone = [str(x) for x, u in levers if u is None and self.lever == "init"]
            why = (f"no cell of {arch_words(self.arch)} whose rate was chosen among two or more, read on the held-out "
                   f"set: {'; '.join(unread)}" if unread and not comparisons else
                   f"no {ref} within {float(SAME_SIZE):g}x of its parameters with {setup}")
            notes = " ".join(
                ([f"Not read, its rate not chosen on a held-out set: {'; '.join(unread)}."] if unread and comparisons
                 else []) + ([f"No gap at the baseline to read for {', '.join(alone)}: no model of the run is it "
                              "with the default init, so its closeness can refute, never show."] if alone and
                             comparisons else [])
                + ([f"No gap at the baseline to read for {'; '.join(baseless)}: not tried at {arch_words(self.arch)}'s "
                    "paper rate beside others, so its closeness can refute, never show."] if baseless else []))
            claims.append(Claim(self.name.format(setup=setup), comparisons, {ref: why, words: why}, why,
                                setups=(setup,), heads=self.heads, judge=_judge, notes=notes))
        return claims

    def _cell(self, xc: Cell, tc: Cell, uc: Optional[Cell], words: str) -> list[Comparison]:
        ref = arch_words(self.reference)
        solved = solves(tc, f"{ref} does not solve {tc.setup} n={tc.n}: two unsolved models being close is not "
                            "closing a gap")

        def numbers(view):
            text = f"{words} ({xc.model.size}) {em(xc, view)}, {ref} {em(tc, view)}"
            if uc is None:
                return text
            return text + (f", at the paper's rate {em(uc, view)}" if self.lever == "rate" else
                           f", without the lever ({uc.model.size}) {em(uc, view)}")

        cells = [xc, tc] + ([uc] if uc is not None else [])
        label = f"{tc.setup} n={tc.n}: {xc.model} against {tc.model}"
        baseline = ("at the paper's rate" if self.lever == "rate" else uc.model.size) if uc is not None else ""
        # As a repair (d, e): closeness shows only where the model without the lever had a
        # material gap (no gap: nothing to close), and refutes anywhere.
        without = f"{arch_words(self.arch)} {baseline}"  # U, the model without the lever, never X's words
        material = ([Test(one(tc) - one(uc), self.close, "", f"no material gap to close ({without} lags {ref} by less "
                          f"than {float(self.close):g} beyond the margin)")]
                    if uc is not None else [])
        gap = AnyOf(material, material[0].fails if material else "no gap at the baseline to read (no model without "
                    "the lever beside it)")
        out = [Comparison(label, cells, Test(one(xc) - one(tc), -self.close, f"it ends {{}} from {ref}"), numbers,
                          where=[gap, solved], capped=[(xc, "ceiling")], names=(ref, words))]
        if uc is not None:
            out.append(Comparison(f"{label}, {baseline}'s gap" if self.lever != "rate" else f"{label}, the gap "
                                  "at the paper's rate", cells,
                                  Test(one(xc) - one(uc), Fraction(0), "the gap narrows by {}"), numbers,
                                  within=material, where=[solved], capped=[(xc, "ceiling")], names=(ref, words)))
        return out


def capacity_or_training(setups: tuple[str, ...], close: Fraction, ratio: int) -> tuple[GapCloses, ...]:
    """Line (g) of docs/findings.md, three questions per setup (issue 62): does Mamba's
    gap to the Transformer of its size close (i) at its best learning rate, (ii) with
    mimetic init, (iii) with a `ratio` times larger state?"""
    within, narrower = (f"within {float(close):g} of the Transformer of its size",
                        f"narrower than {{}}'s where that lags by {float(close):g} or more")
    questions = (("(i) the best learning rate", "rate", f"at Mamba's best learning rate of its window (held-out exact "
                  f"match), does Mamba end {within}?"),
                 ("(ii) mimetic init", "init", f"with mimetic init, does Mamba end {within}, and "
                  f"{narrower.format('the default init')}?"),
                 (f"(iii) a {ratio}x larger state", "state", f"with a {ratio}x larger state, does Mamba end {within}, "
                  f"and {narrower.format('the smaller state')}?"))
    return tuple(GapCloses(f"capacity or training, {{setup}}: {text}", label, setups, "mamba", "transformer", lever,
                           close, ratio) for label, lever, text in questions)


BESIDE_CLOSE = Fraction(1, 10)  # "comes close" as the paper's findings read it (IsTree's CLOSE)


@dataclass(frozen=True)
class Beside:
    """The comparison every task gets, a question: each architecture of the run that
    the task's claims do not name (a user's new mixer), beside `reference` of its size
    in each setup: does it end at most `close` below it? Per model X and reference T
    of its size, per n: X - T >= -close, shown where T solves the cell (two unsolved
    models being close says nothing), refuted anywhere. Answered as a claim is: ends
    close (every comparison left in shown), falls short (one refuted), not decided,
    not compared (no reference of its size, named)."""

    named: frozenset
    reference: str = "transformer"
    close: Fraction = BESIDE_CLOSE

    @classmethod
    def of(cls, claims: Sequence) -> Beside:
        """The comparison for the architectures none of `claims` speaks of."""
        return cls(frozenset(a for claim in claims for a in claim.speaks_of))

    @property
    def speaks_of(self) -> tuple[str, ...]:
        return ()

    def expand(self, table: Table) -> list[Claim]:
        claims, setups = [], list(dict.fromkeys(c.setup for c in table.cells.values()))
        ref = arch_words(self.reference)
        for arch in [a for a in table.archs() if a not in self.named and a != self.reference]:
            words = arch_words(arch)
            head = f"Beside {ref}: {words}"
            heads = {True: f"{head} ends close", False: f"{head} falls short", None: f"{head}: not decided",
                     "untestable": f"{head}: not compared"}
            name = (f"{{setup}}: {words} beside {ref} of its size (at every n, at most {float(self.close):g} below it; "
                    f"shown where {ref} solves the cell)")
            pairs, unequal = table.pairs(arch, self.reference)
            if not pairs:
                why = _why_no_pair(table, arch, self.reference, pairs, unequal, "")
                claims.append(Claim(name.format(setup="every setup").replace("every setup: ", ""), [], {words: why},
                                    why, unequal, False, heads=heads, judge=_judge))
                continue
            for setup in setups:
                comparisons = [self._cell(table.get(x, setup, n), table.get(t, setup, n), words)
                               for x, t in pairs for n in table.ns(setup, x, t)]
                if comparisons:
                    claims.append(Claim(name.format(setup=setup), comparisons, {words: ""}, setups=(setup,),
                                        heads=heads, judge=_judge))
        return claims

    def _cell(self, xc: Cell, tc: Cell, words: str) -> Comparison:
        ref = arch_words(self.reference)
        solved = solves(tc, f"{ref} does not solve {tc.setup} n={tc.n}: two unsolved models being close says "
                            "nothing")

        def numbers(view):
            return f"{words} {em(xc, view)}, {ref} {em(tc, view)}"

        return Comparison(f"{xc.model} against {tc.model}, n={tc.n}", [xc, tc],
                          Test(one(xc) - one(tc), -self.close, f"it ends {{}} from {ref}"), numbers, where=[solved],
                          names=(words,))


def findings(best: pd.DataFrame, claims: Sequence, chance: dict, unfinished: Optional[pd.DataFrame] = None,
             noise: Optional[float] = None) -> Findings:
    """What the run shows of `claims`: what it read, then each claim expanded on it
    decided. A run with task axes (setups like cot-familyrandom) is decided per task
    variant, a `Part` each. `unfinished`: the run's trials that have not finished
    (columns setup and state: pending, running, interrupted, error): each finding
    names those of the setups it reads, as not run yet. `noise`: the task's
    training-noise floor, the sd of a cell's exact match from seed to seed, which a
    comparison on one seed is read with (None: one seed decides nothing)."""
    parts = []
    base, variants = _variants(best)
    waiting = unfinished if unfinished is not None and len(unfinished) else best.iloc[:0][["setup"]].assign(state="")
    waiting_base, waiting_variants = _variants(waiting)
    for variant in sorted(set(variants) | set(waiting_variants)):
        part = best[variants == variant].assign(setup=base[variants == variant])
        left = waiting[waiting_variants == variant].assign(setup=waiting_base[waiting_variants == variant])
        parts.append(_part(Table(part, chance, noise), claims, left, variant))
    return Findings(tuple(parts))


def _variants(frame: pd.DataFrame):
    """Each row's setup and task variant ("cot-familyrandom": cot, familyrandom; "cot": cot, "")."""
    parts = frame["setup"].map(lambda setup: ((setup if isinstance(setup, str) else "").split("-", 1) + [""])[:2])
    return parts.map(lambda p: p[0]), parts.map(lambda p: p[1])


def _part(table: Table, claims: Sequence, unfinished: pd.DataFrame, variant: str) -> Part:
    if table.unknown_size and table.cells:
        why = ("the validation set's size is not known, so no comparison can be given its noise margin; "
               "`icr-sweep report` of this run with today's version records it")
        return Part(variant, (), (Finding("the claims", "Not decided", decided_by=f"the claims ({why})",
                                          untestable=why),))
    return Part(variant, tuple(table.read_notes()),
                tuple(replace(line(claim, table.missing), not_run=_not_run(unfinished, claim.setups))
                      for declared in claims for claim in declared.expand(table)))


def _not_run(unfinished: pd.DataFrame, setups: tuple[str, ...]) -> str:
    """The trials of `setups` that have not finished, counted by setup and state:
    "16 vanilla trials pending, 2 cot trials interrupted"."""
    mine = unfinished[unfinished["setup"].isin(setups)]
    counts = mine.groupby(["setup", "state"], sort=False).size()
    order = {s: i for i, s in enumerate(setups)}
    return ", ".join(f"{k} {setup} trial{'s' if k > 1 else ''} {state}"
                     for (setup, state), k in sorted(counts.items(), key=lambda kv: (order[kv[0][0]], kv[0][1])))
