"""The report's paragraph on the paper's findings, decided by the findings engine on
IsTree's declared claims (docs/findings.md): each test is one way earlier rules said
more than their data (issues 41, 51, 61), with the case that showed it as input."""

import re

import pandas as pd
import pytest

from workloads.tasks._istree_findings import at_guessing
from workloads.tasks._istree_findings import findings as decide

# The tiny presets (`icr-sweep models`): parameters and recurrent state floats.
MODELS = {("transformer", "tiny"): (30944, 0), ("mamba", "tiny"): (29888, 3648), ("hybrid", "tiny"): (30240, 2432),
          ("mamba", "tiny-dmodel16"): (10144, 1824), ("mamba", "tiny-dmodel4"): (1672, 0),
          ("mamba", "tiny-dstate1-nlayers4"): (28320, 1024), ("mamba", "0.5M"): (523328, 38912),
          ("transformer", "0.5M"): (525376, 0), ("transformer", "1M"): (1050688, 0), ("transformer", "2M"): (1969280, 0),
          ("mamba", "1M"): (1166208, 48640), ("mamba", "2M"): (2099072, 87552), ("hybrid", "0.5M"): (458176, 29184),
          ("hybrid", "1M"): (980480, 34048), ("hybrid", "2M"): (1796736, 68096)}
LINES = ("vanilla:", "cot:", "retrieval:", "CoT improves", "retrieval improves", "with retrieval Mamba",
         "the hybrid tracks", "State ablation")


def findings(best):
    """The report's findings lines of a best-per-cell table (the engine's Findings, rendered)."""
    return decide(best).markdown()


SPREAD = (1, -1, 1, -1)  # each seed's offset from a cell's exact match, in units of `spread`: the mean is the value


def table(em, archs=("transformer", "mamba", "hybrid"), setups=("vanilla", "cot", "retrieval"), ns=(4, 6, 8),
          sizes=None, val_samples=300, seeds=4, spread=0.01):
    """A best-per-cell table as the report writes it, em(arch, setup, n) its exact match:
    on `seeds` seeds (4, the few a run needs to measure training noise; 1: one seed),
    `spread` either side of that value, in turn (never past 0 or 1)."""
    sizes = sizes or {}
    rows = []
    for a in archs:
        for s in setups:
            for n in ns:
                size = sizes.get(a, "tiny")
                params, state = MODELS[(a, size)]
                rows.append(dict(arch=a, setup=s, size=size, n=n, lr=1e-3, val_exact_match=em(a, s, n), seeds=seeds,
                                 seed_ids="/".join(map(str, range(seeds))), gen_accuracy=0.9,
                                 val_samples=val_samples, params=params, state_floats=state))
    return respread(pd.DataFrame(rows), spread)


def respread(best, spread=0.01):
    """`best` with each cell's seeds `spread` either side of its exact match, in turn
    (never past 0 or 1): after a test set some cells' exact match."""
    def seeds(value, k):
        d = min(spread, value, 1 - value)
        return "/".join(f"{value + d * SPREAD[i % 4]:.8g}" for i in range(k)) if k > 1 else f"{value:.8g}"

    return best.assign(val_exact_match_by_seed=[seeds(v, int(k)) for v, k in zip(best["val_exact_match"], best["seeds"])])


def with_seeds(best, by_seed, drop=None):
    """The table with each cell's per-seed exact match (as best_by_cell writes it), the mean from them;
    `drop`: cells that lost their second seed."""
    values = [by_seed(r["arch"], r["setup"], r["n"]) for _, r in best.iterrows()]
    if drop:
        values = [v[:1] if drop(r["arch"], r["setup"], r["n"]) else v for v, (_, r) in zip(values, best.iterrows())]
    return best.assign(val_exact_match=[sum(v) / len(v) for v in values], seeds=[len(v) for v in values],
                       val_exact_match_by_seed=["/".join(map(str, v)) for v in values],
                       seed_ids=["/".join(str(k) for k in range(len(v))) for v in values])


def verdicts(lines):
    """The findings' lines (the notes on what they read, plain text, before them, aside)."""
    return [text for text in lines if text.startswith("- **") or text.startswith("- [")]


def line(lines, start):
    """The line of a finding, by the words its name starts with."""
    found = [text for text in verdicts(lines) if head(text).startswith(start) or name(text).startswith(start)]
    assert len(found) == 1, (start, lines)
    return found[0]


def decided(best, start):
    """The engine's finding (typed) of a claim, by the words its verdict or claim starts with."""
    found = [f for f in decide(best).lines if f.verdict.startswith(start) or f.claim.startswith(start)]
    assert len(found) == 1, (start, found)
    return found[0]


def head(text):
    return text.split("**")[1]


def name(text):
    """A line's finding, after its head and seeds: "- **Reproduced** on 2 seeds: NAME. ..." """
    return re.sub(r"^(?:- (?:\[\w+\] )?\*\*[^*]+\*\*)(?: on \d+ seeds| \([^)]*\))?: ", "", text)


PAPER = {  # (arch, setup) -> exact match at n = 4, 6, 8: the paper's shape at a laptop's n
    ("transformer", "vanilla"): (0.95, 0.9, 0.85), ("mamba", "vanilla"): (0.95, 0.6, 0.5),
    ("hybrid", "vanilla"): (0.95, 0.9, 0.85),
    ("transformer", "cot"): (1.0, 0.95, 0.9), ("mamba", "cot"): (1.0, 0.5, 0.2), ("hybrid", "cot"): (1.0, 0.95, 0.9),
    ("transformer", "retrieval"): (1.0, 1.0, 0.98), ("mamba", "retrieval"): (1.0, 0.97, 0.92),
    ("hybrid", "retrieval"): (1.0, 1.0, 0.98),
}


def paper_shape(arch, setup, n):
    return PAPER[(arch, setup)][(4, 6, 8).index(n)]


def test_a_run_shaped_like_the_paper_reproduces_its_findings():
    lines = findings(table(paper_shape))
    assert len(verdicts(lines)) == 11 and lines[0] == "Read: validation exact match (no cell's rate was chosen among several)."
    for start in ("vanilla:", "cot:", "retrieval:", "CoT improves", "retrieval improves", "with retrieval Mamba",
                  "the hybrid tracks"):
        assert head(line(lines, start)) == "Reproduced", line(lines, start)
    # Issue 61: the paper says Mamba falls with n in every setup and that with retrieval it comes close;
    # read together, with retrieval the fall is "more", not 0.2 more (docs/findings.md). Before, this line
    # read Not reproduced.
    assert "(by >= 0 more" in line(lines, "retrieval:")
    assert "mamba tiny (29,888 params) against transformer tiny (30,944 params): Mamba 1.000 / 0.500 / 0.200" in line(lines, "cot:")
    assert head(line(lines, "State ablation")) == "State ablation: not testable here"


def test_models_of_unequal_size_are_not_compared_and_every_compared_model_is_named_with_its_count():
    # Issue 41: the laptop spec's Mamba had a third of the Transformer's parameters and
    # finding (a) read Reproduced; a width-4 Mamba (1,672 params) read so too.
    for size in ("tiny-dmodel16", "tiny-dmodel4"):
        lines = findings(table(paper_shape, sizes={"mamba": size}))
        for start in ("vanilla:", "cot:", "retrieval:", "with retrieval Mamba"):
            text = line(lines, start)
            assert head(text) == "Not testable at equal size", text
            assert f"mamba {size} ({MODELS[('mamba', size)][0]:,} params) against transformer tiny (30,944 params)" in text
        assert "Reproduced" not in " ".join(lines[:3])
    for text in verdicts(findings(table(paper_shape))):
        if head(text) in ("Reproduced", "Not reproduced"):
            assert "params)" in text, text


def test_models_are_paired_by_parameters_whatever_their_labels():
    # 0.5M Mamba beside tiny Transformer and hybrid: 17x apart, never paired, whatever the grid's labels.
    best = table(paper_shape, sizes={"mamba": "0.5M"})
    lines = findings(best)
    assert head(line(lines, "cot:")) == "Not testable here"  # no pair of one base size to name either


def test_a_run_that_learnt_nothing_reproduces_nothing():
    # Issue 41: every cell at guessing level read "the answer alone is hard: Reproduced".
    lines = verdicts(findings(table(lambda a, s, n: 0.5 if s == "vanilla" else 0.0)))
    assert not [text for text in lines if head(text) in ("Reproduced", "Not reproduced")], lines
    assert len(at_guessing(table(lambda a, s, n: 0.5 if s == "vanilla" else 0.0, ns=(4,)))) == 3


def test_two_unsolved_models_being_close_is_not_tracking():
    # Issue 41: Transformer 0.4-0.6, Mamba with retrieval 0.35, hybrid 0.32-0.42 read
    # "retrieval lifts Mamba" and "the hybrid tracks" Reproduced (largest gap 0.020).
    # (The hybrid within 0.1 of the Transformer: close, and both unsolved.)
    values = {("transformer", "cot"): 0.6, ("transformer", "retrieval"): 0.4, ("mamba", "cot"): 0.1,
              ("mamba", "retrieval"): 0.35, ("hybrid", "cot"): 0.52, ("hybrid", "retrieval"): 0.32}
    lines = findings(table(lambda a, s, n: values.get((a, s), 0.5), ns=(4, 5)))
    for start in ("with retrieval Mamba", "the hybrid tracks"):
        text = line(lines, start)
        assert head(text) == "Not decided" and "does not solve" in text, text


def test_a_comparison_that_was_never_made_is_not_claimed():
    # Issue 41: a sweep without CoT read "retrieval lifts Mamba (above its CoT)" Reproduced.
    lines = findings(table(paper_shape, setups=("vanilla", "retrieval")))
    assert head(line(lines, "with retrieval Mamba")) == "Not testable here"
    assert head(line(lines, "retrieval improves")) == "Not testable here"
    assert head(line(lines, "CoT improves")) == "Not testable here"


def test_at_the_ceiling_nothing_is_decided():
    # Issue 41: every cell 1.000 read the hybrid Reproduced and retrieval Not reproduced.
    lines = findings(table(lambda a, s, n: 1.0, setups=("cot", "retrieval")))
    for text in verdicts(lines):
        assert head(text) in ("Not decided", "State ablation: not testable here", "Not testable here") or (
            head(text).startswith("Capacity or training") and head(text).endswith("not compared")), text
    for start in ("with retrieval Mamba", "the hybrid tracks", "retrieval improves"):
        assert "every cell at the ceiling" in line(lines, start), line(lines, start)


def test_an_exact_threshold_is_decided_by_counts_never_by_rounding():
    # Issue 41: a fall of exactly 0.2 read Not reproduced from 1.000 -> 0.800 and
    # Reproduced from 0.900 -> 0.700 (0.19999999999999996): on 300 samples 108 of 241
    # such falls were misjudged. Every one is now within noise of the threshold.
    heads = set()
    for right in range(60, 301):
        start, end = right / 300, (right - 60) / 300
        lines = findings(table(lambda a, s, n: (start if n == 4 else end) if a == "mamba" else 1.0,
                               setups=("cot",), ns=(4, 8)))
        heads.add(head(line(lines, "cot:")))
    assert heads == {"Not decided"}


def test_margins_follow_the_validation_sets_size():
    # A fall of 0.30 with 0.2 needed: decided on 5,000 samples, within noise on 30.
    def em(a, s, n):
        return {4: 1.0, 8: 0.6}[n] if a == "mamba" else {4: 1.0, 8: 0.9}[n]

    def cot(val_samples):
        return head(line(findings(table(em, setups=("cot",), ns=(4, 8), val_samples=val_samples)), "cot:"))

    assert cot(5000) == "Reproduced"
    assert cot(30) == "Not decided"


def test_seeds_are_counted_per_findings_own_cells():
    # Issue 41: Mamba CoT n=6 at 0.45 / 0.95 read Not decided, as it should; dropping one
    # seed of an unrelated vanilla cell made every finding "Reproduced (1 seed)".
    def split(arch, setup, n):
        v = paper_shape(arch, setup, n)
        return [0.45, 0.95] if (arch, setup, n) == ("mamba", "cot", 8) else [v, v]

    for drop in (None, lambda a, s, n: (a, s) == ("transformer", "vanilla")):
        lines = findings(with_seeds(table(paper_shape), split, drop))
        text = line(lines, "cot:")
        assert text.startswith("- **Not decided** on 2 seeds") and "seed 1 alone" in text, text
        assert "** on 2 seeds: " in line(lines, "with retrieval Mamba")  # its cells all have both seeds
    lines = findings(with_seeds(table(paper_shape), split, lambda a, s, n: (a, s) == ("transformer", "vanilla")))
    assert ("(1 seed: transformer vanilla tiny n=4, transformer vanilla tiny n=6, transformer vanilla tiny n=8 have no "
            "other finished seed)") in line(lines, "vanilla:")


def test_a_mamba_that_never_solved_the_task_does_not_fall_from_it():
    # Issue 41: Mamba CoT 0.35 -> 0.10 with the Transformer at 0.95 read (a) Reproduced.
    lines = findings(table(lambda a, s, n: ({4: 0.35, 8: 0.10}[n] if a == "mamba" else 0.95),
                           setups=("cot",), ns=(4, 8)))
    text = line(lines, "cot:")
    assert head(text) == "Not decided" and "Mamba does not solve n=4" in text, text


def test_every_n_is_read_not_only_the_end_points():
    # The end points say "far more" (1.0 -> 0.3 against 1.0 -> 0.9); at n=6 Mamba fell less
    # than the Transformer, so it is not what the cells show.
    def em(a, s, n):
        return {4: 1.0, 6: 0.8, 8: 0.3}[n] if a == "mamba" else {4: 1.0, 6: 0.4, 8: 0.9}[n]

    text = line(findings(table(em, archs=("transformer", "mamba"), setups=("cot",))), "cot:")
    assert head(text) == "Not reproduced" and "by n=6 Mamba falls -0.400 more (0 claimed" in text, text
    assert decided(table(em, archs=("transformer", "mamba"), setups=("cot",)), "cot:").decided_by.startswith(
        "mamba tiny (29,888 params) against transformer tiny (30,944 params) at n=6")

    def rising(a, s, n):  # Mamba 1.0 -> 0.3 -> 0.6: it does not fall "as n grows"
        return {4: 1.0, 6: 0.3, 8: 0.6}[n] if a == "mamba" else 1.0

    text = line(findings(table(rising, archs=("transformer", "mamba"), setups=("cot",))), "cot:")
    assert head(text) == "Not reproduced" and "it falls -0.300 from n=6 to n=8 (0 claimed" in text, text


def test_the_answer_alone_needs_mamba_to_fall_more_than_the_others():
    # Issue 41: vanilla Mamba 0.880 against 0.500 for the other two read Reproduced.
    lines = findings(table(lambda a, s, n: 0.88 if a == "mamba" else 0.5, setups=("vanilla",), ns=(4, 8)))
    assert head(line(lines, "vanilla:")) != "Reproduced"
    lines = findings(table(lambda a, s, n: ({4: 0.95, 8: 0.9}[n] if a == "mamba" else 0.5), setups=("vanilla",),
                           ns=(4, 8)))
    assert head(line(lines, "vanilla:")) != "Reproduced"


def test_a_deciding_cell_still_training_is_named_in_its_line():
    # Issue 41: the deciding cell sat in the Under-trained line only (loss 0.943 -> 0.271).
    best = table(paper_shape)
    still = (best["arch"] == "mamba") & (best["setup"] == "cot") & (best["n"] == 8)
    lines = findings(best.assign(still_training=["0.943 -> 0.271" if s else "" for s in still]))
    assert "Still training" in line(lines, "cot:") and "mamba cot tiny n=8 (loss 0.943 -> 0.271)" in line(lines, "cot:")
    assert "Still training" not in line(lines, "vanilla:")


def ablation(small, large):
    """The paper's shape with a second Mamba of equal parameters and a 3.6x smaller state
    (tiny-dstate1-nlayers4) at `small` where the preset Mamba is at `large`, with CoT."""
    best = table(paper_shape)
    other = best[best["arch"] == "mamba"].assign(size="tiny-dstate1-nlayers4", params=28320, state_floats=1024)
    cot = other["setup"] == "cot"
    other.loc[cot, "val_exact_match"] = other.loc[cot, "n"].map(small)
    best.loc[(best["arch"] == "mamba") & (best["setup"] == "cot"), "val_exact_match"] = best["n"].map(large)
    return findings(respread(pd.concat([best, other])))


def test_the_state_ablation_says_whether_the_states_size_decided_the_gap():
    same = ablation({4: 1.0, 6: 0.5, 8: 0.2}, {4: 1.0, 6: 0.5, 8: 0.2})
    assert len(verdicts(same)) == 15  # (a) in three setups, (b) to (e), the ablation in three, (g): (iii) in three
    text = line(same, "cot: does the size")
    assert head(text) == "State ablation: the state's size did not decide the gap", text
    assert "tiny-dstate1-nlayers4 (1,024 state floats, 28,320 params) 0.200, tiny (3,648 floats, 29,888 params) 0.200" in text
    # Issue 51: what else was varied, and how much of the gap the larger state leaves.
    assert "the larger state still lags it by 0.700" in text, text
    assert "the two differ in more than the state: nlayers4" in text, text
    lower = ablation({4: 1.0, 6: 0.2, 8: 0.05}, {4: 1.0, 6: 0.6, 8: 0.4})
    assert head(line(lower, "cot: does the size")) == "State ablation: the state's size decided the gap"
    # With retrieval the lookups are the retriever's: there the state did not decide Mamba's lag.
    assert head(line(lower, "retrieval: does the size")) == "State ablation: the state's size did not decide the gap"
    some = ablation({4: 1.0, 6: 0.2, 8: 0.4}, {4: 1.0, 6: 0.6, 8: 0.4})
    assert head(line(some, "cot: does the size")) == "State ablation: the state's size decided the gap at some n only"
    # Both Mambas are of the Transformer's size: each is compared, and the verdict needs both.
    assert "mamba tiny-dstate1-nlayers4 (28,320 params) against transformer tiny" in line(same, "cot: Mamba")


def test_a_state_comparison_whose_seeds_disagree_decides_nothing():
    # Laptop run 7: the answer alone at n=4, the small state 0.529 / 0.472 against the
    # preset's 0.916 / 0.472 (shown on the mean, both at guessing level on seed 1) read
    # "did not decide the gap"; it decides nothing either way.
    def by_seed(arch, setup, n):
        if (arch, setup, n) == ("mamba", "vanilla", 4):
            return [0.916, 0.472]
        return [0.8, 0.8] if (arch, setup) == ("transformer", "vanilla") else [0.5, 0.5]

    best = with_seeds(table(lambda a, s, n: 0.5, setups=("vanilla",), ns=(4,)), by_seed)
    small = best[best["arch"] == "mamba"].assign(size="tiny-dstate1-nlayers4", params=28320, state_floats=1024,
                                                 val_exact_match=0.5005, val_exact_match_by_seed="0.529/0.472")
    text = line(findings(pd.concat([best, small])), "vanilla: does the size")
    assert head(text) == "State ablation: cannot tell", text


@pytest.mark.parametrize("variant", ["familyrandom"])
def test_a_task_variant_is_decided_on_its_own_cells(variant):
    best = table(paper_shape)
    lines = verdicts(findings(respread(pd.concat([best, best.assign(setup=best["setup"] + "-" + variant,
                                                                      val_exact_match=1.0)]))))
    assert len(lines) == 22  # (a) to (e) and the three capacity-or-training questions, per variant
    assert head(line(lines[:11], "cot:")) == "Reproduced"
    assert lines[11].startswith(f"- [{variant}] **")


# Issue 51: crafted runs on which a line read Reproduced that its data do not support. Two
# seeds alike, 1,000 validation samples, n = 4 / 6; P is the paper's shape there.
P = {("transformer", "vanilla"): (0.95, 0.5), ("mamba", "vanilla"): (0.7, 0.5), ("hybrid", "vanilla"): (0.93, 0.51),
     ("transformer", "cot"): (1.0, 0.97), ("mamba", "cot"): (1.0, 0.4), ("hybrid", "cot"): (1.0, 0.97),
     ("transformer", "retrieval"): (0.98, 0.98), ("mamba", "retrieval"): (0.98, 0.98),
     ("hybrid", "retrieval"): (0.98, 0.98)}


def seeded(values=P, setups=("vanilla", "cot", "retrieval"), seeds=4, **changed):
    """A run of P's shape (or `values`) on `seeds` seeds that agree, `changed` replacing cells:
    {"mamba_cot": (1.0, 0.85)}; None drops a cell."""
    cells = {**values, **{tuple(k.split("_")): v for k, v in changed.items()}}
    best = table(lambda a, s, n: 0.0, setups=setups, ns=(4, 6), val_samples=1000)
    best = with_seeds(best, lambda a, s, n: [cells[(a, s)][(4, 6).index(n)]] * seeds if cells.get((a, s)) else
                      [0.0] * seeds)
    gone = [(a, s) for (a, s), v in cells.items() if v is None]
    return best[[(a, s) not in gone for a, s in zip(best["arch"], best["setup"])]].reset_index(drop=True)


def test_the_papers_shape_still_reproduces_what_it_shows():
    lines = findings(seeded())
    for start in ("cot:", "CoT improves", "with retrieval Mamba", "the hybrid tracks"):
        assert head(line(lines, start)) == "Reproduced", line(lines, start)


def test_a_claim_about_named_models_is_not_decided_on_a_subset_of_them():
    # Class A: Mamba against the hybrid alone read "far more than the Transformer's and the hybrid's".
    best = seeded(mamba_vanilla=(0.95, 0.55), hybrid_vanilla=(0.93, 0.93))
    best = best[~((best["arch"] == "transformer") & (best["setup"] == "vanilla") & (best["n"] == 6))]
    text = line(findings(best), "vanilla:")
    assert head(text) == "Not decided", text
    assert "Not shown for every model it names: the Transformer (never compared: no two n with vanilla shared" \
        in text, text
    assert "[shown]" in text  # the hybrid's comparison is there, and shows it
    # A comparator absent from the run, or only at another size, is named the same way.
    text = line(findings(seeded(hybrid_vanilla=None, hybrid_cot=None, hybrid_retrieval=None)), "cot:")
    assert head(text) == "Not decided" and "the hybrid (never compared: no hybrid in this run)" in text, text
    text = line(findings(seeded(hybrid_retrieval=None, hybrid_cot=None, hybrid_vanilla=None)), "CoT improves")
    assert head(text) == "Not decided" and "the hybrid (never compared: absent from this run)" in text, text
    best = seeded()
    best.loc[best["arch"] == "hybrid", ["size", "params"]] = ["tiny-dmodel16", 10144]
    text = line(findings(best), "cot:")
    assert head(text) == "Not decided" and "the hybrid (never compared: none of Mamba's size" in text, text
    assert "2.95x apart" in text, text


def test_a_guard_never_drops_a_counterexample():
    # Class B: CoT gave Mamba nothing (both at guessing) and "CoT improves every architecture" read Reproduced.
    text = line(findings(seeded(mamba_vanilla=(0.5, 0.5), mamba_cot=(0.0, 0.0))), "CoT improves")
    assert head(text) == "Not decided" and "every cell at guessing level" in text, text
    assert "Mamba (each of its comparisons left out: every cell at guessing level)" in text, text
    # At the ceiling: left out where CoT stays there; where it falls below it, a counterexample that
    # refutes (issue 61: before, it was kept "within noise" and could never refute).
    ceiling = dict(transformer_vanilla=(1.0, 1.0), transformer_cot=(1.0, 1.0))
    assert "every cell at the ceiling" in line(findings(seeded(**ceiling)), "CoT improves")
    text = line(findings(seeded(**{**ceiling, "transformer_cot": (0.6, 0.6)})), "CoT improves")
    assert head(text) == "Not reproduced" and "a gain of -0.400 (0 claimed, margin 0.025) [refuted]" in text, text
    # The comparator falling more than a Mamba that still solves the largest n: refuted.
    text = line(findings(seeded(mamba_cot=(1.0, 0.95), transformer_cot=(1.0, 0.95), hybrid_cot=(1.0, 0.5))), "cot:")
    assert head(text) == "Not reproduced" and "the hybrid 1.000 / 0.500: Mamba falls -0.450 more" in text, text


def test_mamba_and_its_comparators_are_guarded_alike():
    # Class C: Mamba 1.000 -> 0.850 against a Transformer rising from 0.300: "Mamba falls 0.800 more".
    # Issue 61: the comparator need not solve n=4 (0.87 was refused), but Mamba must itself fall far:
    # here it falls 0.150 (0.2 claimed), and the line says so, whatever the comparators did.
    best = seeded(setups=("cot",), mamba_cot=(1.0, 0.85), transformer_cot=(0.3, 0.95), hybrid_cot=(0.3, 0.95))
    found = decided(best, "cot:")
    assert found.verdict == "Not reproduced" and found.decided_by.startswith("mamba tiny (29,888 params) itself"), found
    assert "it falls 0.150 from n=4 to n=6 (0.2 claimed" in found.decided_by, found.decided_by


def test_a_rate_chosen_among_several_is_read_on_the_held_out_set():
    # Class D: four rates per cell; the Transformer's CoT n=6 at .921/.925 on validation (the rate was
    # picked by these), about .90 on the held-out set.
    best = seeded()
    best["rates"] = 4
    best["test_exact_match_by_seed"] = best["val_exact_match_by_seed"]
    picked = (best["arch"] == "transformer") & (best["setup"] == "cot") & (best["n"] == 6)
    best.loc[picked, "val_exact_match_by_seed"] = "0.921/0.925"
    best.loc[picked, "test_exact_match_by_seed"] = "0.9/0.899"
    lines = findings(best)
    assert lines[0].startswith("Read: the held-out exact match of the 18 cell(s)"), lines[0]
    text = line(lines, "the hybrid tracks")
    # .90 on the held-out set is not solved: the comparison is left out, and named so.
    assert "the Transformer 0.923" not in text and "cot n=6: the hybrid 0.970, the Transformer 0.899" in text, text
    assert "the Transformer does not solve cot n=6" in text, text
    alone = findings(best.assign(rates=1))  # one rate: validation, as before, where .923 is solved
    assert alone[0] == "Read: validation exact match (no cell's rate was chosen among several)."
    assert "cot n=6: the hybrid 0.970, the Transformer 0.923" in line(alone, "the hybrid tracks")


def test_a_value_that_is_not_a_number_is_named_in_its_cell_and_line():
    best = seeded()
    cell = (best["arch"] == "mamba") & (best["setup"] == "cot") & (best["n"] == 6)
    best.loc[cell, "val_exact_match_by_seed"] = "0.4/nan"
    lines = findings(best)
    assert "Left out of every comparison, having no finite exact match: mamba cot tiny n=6 (seed 0: 0.4, seed 1: nan)" \
        in lines[1]
    for start in ("cot:", "CoT improves"):
        assert "Not read, having no finite exact match: mamba cot tiny n=6" in line(lines, start)
    assert head(line(lines, "cot:")) != "Reproduced"


def test_the_mean_decides_and_seeds_alone_within_noise_never_hold_it():
    # Identical seeds of 100 samples: a fall of 0.3 more than the Transformer's (0.2 needed), beyond the
    # mean's margin, each seed alone within the sampling of its 100. The old rule made every seed agree,
    # so a claim shown on the mean was held undecided by seeds merely within noise (issue 84).
    best = seeded(setups=("cot",), mamba_cot=(1.0, 0.6), transformer_cot=(1.0, 0.9), hybrid_cot=(1.0, 0.9))
    text = line(findings(best.assign(val_samples=100)), "cot:")
    assert head(text) == "Reproduced" and "alone" not in text, text


def test_a_setup_the_run_lacks_has_its_line():
    lines = findings(seeded(setups=("cot", "retrieval")))
    assert head(line(lines, "vanilla:")) == "Not testable here" and "this run has no finished vanilla trial" in line(lines, "vanilla:")


def test_one_seed_says_which_cells_lack_the_other():
    # Issue 51: a deciding cell with a seed still running read "(1 seed)" with no reason.
    best = with_seeds(table(paper_shape, setups=("cot",), ns=(4, 8)), lambda a, s, n: [paper_shape(a, s, n)] * 2,
                      drop=lambda a, s, n: (a, s, n) == ("mamba", "cot", 8))
    text = line(findings(best), "cot:")
    assert "(1 seed: mamba cot tiny n=8 has no other finished seed)" in text, text


def stored_findings(run: str, starts=("vanilla: Mamba", "cot: Mamba", "retrieval: Mamba", "CoT improves",
                                       "retrieval improves", "with retrieval Mamba", "the hybrid tracks",
                                       "cot: does the size")) -> tuple[list[str], dict]:
    """A stored laptop run's findings under today's engine, checked equal to its stored
    file, and the head of each line."""
    from pathlib import Path

    from workloads.tasks.istree import IsTreeTask

    folder = Path(__file__).parents[3] / "sweeps/calibration" / run
    lines = IsTreeTask.findings(pd.read_csv(folder / "best.csv")).markdown()  # the report's, who guesses last
    stored = (folder / "findings_engine.md").read_text()
    assert stored.split("\n\n", 2)[2].strip() == "\n".join(lines)
    return lines, {start: head(line(lines, start)) for start in starts}


def test_run_7s_findings_under_the_engine():
    """Run 7 as the engine reads it: on two seeds, whose spread Student's t reads on one degree of freedom,
    nothing is decided (issue 84: its Mamba's fall with CoT, 0.100 more than the Transformer's where 0.2 is
    claimed, read Not reproduced, and its state ablation "did not decide the gap", on a margin that two seeds
    cannot measure)."""
    _, heads = stored_findings("istree_laptop_run7")
    assert heads == {"vanilla: Mamba": "Not decided", "cot: Mamba": "Not decided", "retrieval: Mamba": "Not decided",
                     "CoT improves": "Not decided", "retrieval improves": "Not decided",
                     "with retrieval Mamba": "Not decided", "the hybrid tracks": "Not decided",
                     "cot: does the size": "State ablation: cannot tell"}


def test_the_laptop_paragraphs_say_what_run_9s_findings_say():
    """README's laptop paragraph quotes run 9 through the engine, head by head (issue 51: README said more
    than its report); run 8, on two seeds, decides nothing but as run 7 does (the same numbers)."""
    from pathlib import Path

    _, run8 = stored_findings("istree_laptop_run8")
    _, run7 = stored_findings("istree_laptop_run7")
    assert run8 == run7
    lines, heads = stored_findings("istree_laptop_run9", starts=(
        "vanilla: Mamba", "cot: Mamba", "retrieval: Mamba", "CoT improves", "retrieval improves",
        "with retrieval Mamba", "the hybrid tracks"))
    assert head(line(lines, "State ablation")) == "State ablation: not testable here"  # one Mamba: no ablation
    readme = (Path(__file__).parents[3] / "README.md").read_text()
    readme = " ".join(readme.split("## What a laptop shows of the paper")[1].split("## ")[0].split())
    said = {"cot: Mamba": "**Not reproduced** with CoT", "vanilla: Mamba": "**Not decided** with the answer alone",
            "retrieval: Mamba": "and with retrieval", "CoT improves": "CoT improves every architecture: **Not decided**",
            "retrieval improves": "Retrieval improves every architecture more than CoT: **Not decided**",
            "with retrieval Mamba": "closes its gap to the Transformer of its size: **Not decided**",
            "the hybrid tracks": "The hybrid tracks the Transformer of its size: **Not decided**"}
    for start, text in said.items():
        assert text in readme, text
        word = "Not reproduced" if "Not reproduced" in text else "Not decided"
        assert word in heads[start] or (start == "retrieval: Mamba" and heads[start] == "Not decided"), start
    assert "Reproduced**" not in readme.replace("Not reproduced**", "")
    assert "On 4 seeds" in readme and "0.023 more, where 0.2 is claimed, margin 0.177" in readme


# Issue 61: the claims are declarations that one engine decides; each case below is a crafted run on
# which the round-2 rules read a line that its data do not support.


def test_a_cell_outside_a_repair_that_contradicts_it_refutes_it():
    # (e) read Reproduced while the hybrid's retrieval n=6 sat at 0.400 against the Transformer's 0.980: the
    # cell has no Mamba gap to close, so it was left out, its numbers unsaid.
    found = decided(seeded(hybrid_retrieval=(0.98, 0.40)), "the hybrid tracks")
    assert found.verdict == "Not reproduced", found
    assert "retrieval n=6: the hybrid 0.400, the Transformer 0.980" in found.decided_by
    assert "[refuted]" in found.decided_by
    # (d) the same: with CoT Mamba keeps up at n=6 (no gap), with retrieval it falls to 0.68.
    found = decided(seeded(mamba_cot=(1.0, 0.97), mamba_retrieval=(0.98, 0.68)), "with retrieval Mamba")
    assert found.verdict == "Not reproduced" and "with retrieval Mamba 0.680, the Transformer 0.980" in found.decided_by


def test_retrieval_must_narrow_a_material_gap_not_only_stay_near():
    # A lag that retrieval widens (0.15 with CoT, 0.28 with retrieval) refutes.
    found = line(findings(seeded(mamba_cot=(1.0, 0.82), mamba_retrieval=(0.98, 0.70))), "with retrieval Mamba")
    assert head(found) == "Not reproduced" and "the gap narrows by -0.130" in found, found
    # A lag of 0.006 at 5,000 samples is detectable, not material: nothing for retrieval to repair, even where
    # retrieval moves Mamba further off (0.03). Before, "a gap" and "close", Reproduced.
    best = seeded(mamba_cot=(1.0, 0.964), mamba_retrieval=(0.98, 0.95)).assign(val_samples=5000)
    found = line(findings(best), "with retrieval Mamba")
    assert head(found) == "Not decided" and "no material gap to close" in found, found


def test_a_chosen_rate_without_held_out_values_is_named_and_counted():
    best = seeded().assign(rates=4)
    best["test_exact_match_by_seed"] = best["val_exact_match_by_seed"]
    gone = (best["arch"] == "mamba") & (best["setup"] == "cot") & (best["n"] == 6)
    best.loc[gone, "test_exact_match_by_seed"] = float("nan")
    read = findings(best)[0]
    assert read.startswith("Read: the held-out exact match of the 17 cell(s)"), read
    assert ("validation exact match, biased upwards by the choice, of the 1 cell(s) whose rate was chosen among "
            "several but which have no held-out value (mamba cot tiny n=6)") in read, read


def test_the_summary_row_gives_the_comparison_that_decided_the_head():
    # Not reproduced: the refuted comparison, not the line's first (which is shown).
    broken = seeded(hybrid_cot=(1.0, 0.3))
    found = decided(broken, "the hybrid tracks")
    assert found.verdict == "Not reproduced" and found.compared[0].outcome == "shown", found
    assert "cot n=6: the hybrid 0.300" in found.decided_by and found.decided_by.endswith("[refuted]"), found.decided_by
    assert found.finding == "the hybrid tracks the Transformer of the same size"
    # Reproduced: the weakest shown comparison (the least beyond its margin).
    found = decided(seeded(), "CoT improves")
    assert found.verdict == "Reproduced" and found.decided_by.startswith(
        "transformer tiny (30,944 params) n=4: CoT 1.000 against 0.950"), found.decided_by
    # Not decided for a model never compared: the model, and why.
    found = decided(seeded(hybrid_vanilla=None, hybrid_cot=None, hybrid_retrieval=None), "cot:")
    assert found.decided_by == "not shown for every model it names: the hybrid (never compared: no hybrid in this run)"


def test_a_counterexample_beyond_the_margin_refutes():
    # Mamba 1.000 at CoT n=6 where the Transformer falls to 0.500: read Not decided before.
    found = decided(seeded(mamba_cot=(1.0, 1.0), transformer_cot=(1.0, 0.5)), "cot:")
    assert found.verdict == "Not reproduced" and "Mamba falls -0.500 more" in found.decided_by, found


def test_a_comparator_that_nearly_solves_the_smallest_n_is_compared():
    # The comparator at 0.87 at n=4 "did not solve n_1", so Mamba's fall from 0.95 to 0.50 was never compared.
    found = line(findings(seeded(setups=("cot",), mamba_cot=(0.95, 0.5), transformer_cot=(0.87, 0.85),
                                    hybrid_cot=(0.87, 0.85))), "cot:")
    assert head(found) == "Reproduced", found


def test_a_difference_inside_the_spread_between_seeds_is_not_shown():
    # Mamba's CoT n=6 seeds 0.74 and 0.64: a fall 0.28 more than the Transformer's where 0.2 is claimed, each
    # seed alone beyond it on 20,000 samples; but 0.08 past the threshold is inside the seeds' spread (0.1).
    best = seeded(setups=("cot",), mamba_cot=(1.0, 0.69), transformer_cot=(1.0, 0.97), hybrid_cot=(1.0, 0.97))
    best = best.assign(val_samples=20000)
    assert head(line(findings(best), "cot:")) == "Reproduced"  # the same mean, the seeds alike
    cell = (best["arch"] == "mamba") & (best["n"] == 6)
    best.loc[cell, "val_exact_match_by_seed"] = "0.74/0.64"
    found = line(findings(best), "cot:")
    assert head(found) == "Not decided" and "Mamba falls 0.280 more (0.2 claimed, margin 0.635) [within noise]" \
        in found, found  # two seeds 0.1 apart: Student's t on one degree of freedom, 12.7 standard errors


def test_verdicts_do_not_depend_on_row_order_seed_ids_or_model_names():
    import random

    from workloads.tasks.istree import IsTreeTask

    root = __import__("pathlib").Path(__file__).parents[3]
    runs = [seeded(), seeded(hybrid_retrieval=(0.98, 0.4)), seeded(mamba_cot=(1.0, 0.82)),
            pd.read_csv(root / "sweeps/calibration/istree_laptop_run7/best.csv")]
    rng = random.Random(61)
    for best in runs:
        want = [(f.verdict, f.seeds) for f in IsTreeTask.findings(best).lines]
        for _ in range(5):
            ids = {str(k): str(rng.randrange(10 ** (k + 1), 10 ** (k + 2))) for k in range(4)}
            base = rng.choice(["small", "s", "t9"])
            shuffled = best.sample(frac=1, random_state=rng.randrange(1000)).assign(
                size=best["size"].str.replace("tiny", base),
                seed_ids=best["seed_ids"].map(lambda s: "/".join(ids[x] for x in str(s).split("/"))))
            got = [(f.verdict, f.seeds) for f in IsTreeTask.findings(shuffled).lines]
            assert got == want


# The paper's own shape at its scale: 0.5M, 1M and 2M, n = 16 / 32 / 64, one seed, the grid's 5,000
# validation samples. Values that follow ../shared/PAPER.md, "What the paper found":
# - Mamba's exact match falls as n grows, in every setup, far more than the Transformer's and the hybrid's
#   (with retrieval, less far: it stays close);
# - CoT improves every architecture over the answer alone; retrieval improves each over CoT;
# - with retrieval Mamba comes within 0.1 of the Transformer;
# - the hybrid tracks the Transformer (within 0.02 everywhere).
AT_SCALE = {("transformer", "vanilla"): (0.95, 0.92, 0.88), ("hybrid", "vanilla"): (0.95, 0.92, 0.87),
            ("mamba", "vanilla"): (0.93, 0.70, 0.55),
            ("transformer", "cot"): (1.0, 0.99, 0.97), ("hybrid", "cot"): (1.0, 0.99, 0.96),
            ("mamba", "cot"): (1.0, 0.60, 0.25),
            ("transformer", "retrieval"): (1.0, 1.0, 0.99), ("hybrid", "retrieval"): (1.0, 1.0, 0.99),
            ("mamba", "retrieval"): (1.0, 0.97, 0.93)}
BROKEN = {  # one claim broken at a time: (the cells replaced, the line that must not read Reproduced)
    "vanilla fall": ({("mamba", "vanilla"): (0.93, 0.91, 0.87)}, "vanilla:"),
    "CoT fall": ({("mamba", "cot"): (1.0, 0.98, 0.96)}, "cot:"),
    "retrieval fall": ({("mamba", "retrieval"): (1.0, 1.0, 0.99)}, "retrieval:"),
    "CoT improves": ({("mamba", "cot"): (0.5, 0.2, 0.05)}, "CoT improves"),
    "retrieval improves more": ({("hybrid", "retrieval"): (0.9, 0.85, 0.8)}, "retrieval improves"),
    "retrieval closes the gap": ({("mamba", "retrieval"): (1.0, 0.75, 0.5)}, "with retrieval Mamba"),
    "the hybrid tracks": ({("hybrid", "cot"): (1.0, 0.6, 0.3)}, "the hybrid tracks"),
}


def at_scale(cells, seeds=4):
    rows = []
    for (arch, setup), values in cells.items():
        for size in ("0.5M", "1M", "2M"):
            params, state = MODELS[(arch, size)]
            for n, v in zip((16, 32, 64), values):
                rows.append(dict(arch=arch, setup=setup, size=size, n=n, lr=1e-3, val_exact_match=v, seeds=seeds,
                                 seed_ids="/".join(map(str, range(seeds))), gen_accuracy=0.9, val_samples=5000,
                                 params=params, state_floats=state))
    return respread(pd.DataFrame(rows), spread=0.002)  # seeds that agree, as the paper's large models' would


CLAIM_LINES = ("vanilla:", "cot:", "retrieval:", "CoT improves", "retrieval improves", "with retrieval Mamba",
               "the hybrid tracks")


def test_the_papers_shape_at_its_scale_reproduces_every_claim_and_each_broken_claim_does_not():
    lines = findings(at_scale(AT_SCALE))
    for start in CLAIM_LINES:
        assert head(line(lines, start)) == "Reproduced", line(lines, start)
    assert head(line(lines, "State ablation")) == "State ablation: not testable here"
    for claim, (cells, start) in BROKEN.items():
        found = line(findings(at_scale({**AT_SCALE, **cells})), start)
        assert head(found) in ("Not reproduced", "Not decided"), (claim, found)


def test_the_papers_grid_of_one_seed_is_read_less_confidently_than_seeds_would_read_it():
    """Issue 84: one seed had no training noise in its margin, so its verdicts were the
    most confident of any. On the paper's own grid (one seed per cell) its training
    noise is IsTree's declared floor: each line reads Reproduced only where four seeds
    of the same means do, and a margin never narrower than theirs."""
    one, four = findings(at_scale(AT_SCALE, seeds=1)), findings(at_scale(AT_SCALE))
    for start in CLAIM_LINES:
        assert head(line(one, start)) != "Reproduced" or head(line(four, start)) == "Reproduced", start
    assert sum(head(line(one, start)) == "Reproduced" for start in CLAIM_LINES) < len(CLAIM_LINES)
    first = re.search(r"margin (\d\.\d+)", line(one, "cot:")), re.search(r"margin (\d\.\d+)", line(four, "cot:"))
    assert float(first[0].group(1)) > float(first[1].group(1))


def test_without_a_declared_floor_one_seed_decides_nothing():
    from workloads.tasks._istree_findings import CHANCE, CLAIMS
    from workloads.tasks.findings import findings as engine

    lines = engine(at_scale(AT_SCALE, seeds=1), CLAIMS, CHANCE, noise=None).markdown()
    text = line(lines, "cot:")
    assert head(text) == "Not decided" and "one seed: training noise not measured" in text, text


# Issue 84: the verdicts' statistics. Each case is one the old rule read against its data.


def test_eight_seeds_show_a_fall_that_one_seed_of_eight_does_not():
    # The mean and 7 seeds: Mamba with CoT at n=6 falls 0.5 more than the Transformer; one seed at 0.85 where
    # the others are 0.40. The old rule made every seed agree: Not decided. The mean decides; the eighth seed
    # lies within its own margin, and is named.
    best = seeded(setups=("cot",), seeds=8, mamba_cot=(1.0, 0.4), transformer_cot=(1.0, 0.96), hybrid_cot=(1.0, 0.96))
    cell = (best["arch"] == "mamba") & (best["n"] == 6)
    best.loc[cell, "val_exact_match_by_seed"] = "/".join(["0.4"] * 7 + ["0.85"])
    text = line(findings(best), "cot:")
    assert head(text) == "Reproduced" and text.startswith("- **Reproduced** on 8 seeds"), text
    assert "seed 7 alone 0.110, within its own margin" in text, text


def test_one_seed_of_many_refuting_beyond_its_own_margin_holds_the_line():
    # Seven seeds show the fall far beyond the margin; the eighth shows Mamba not falling at all. With IsTree's
    # floor (0.10 a cell) a seed alone cannot see that far: it is named, within its own margin. Where a task
    # declares a training noise a seed alone can see past (0.01), it refutes beyond its own margin: the line is
    # held undecided, and says so.
    from workloads.tasks._istree_findings import CHANCE, CLAIMS
    from workloads.tasks.findings import findings as engine

    best = seeded(setups=("cot",), seeds=8, mamba_cot=(1.0, 0.2), transformer_cot=(1.0, 0.96), hybrid_cot=(1.0, 0.96))
    cell = (best["arch"] == "mamba") & (best["n"] == 6)
    best.loc[cell, "val_exact_match_by_seed"] = "/".join(["0.2", "0.201", "0.199", "0.2", "0.202", "0.198", "0.2",
                                                          "0.99"])
    text = line(findings(best), "cot:")
    assert head(text) == "Reproduced" and "seed 7 alone -0.030, within its own margin" in text, text
    text = line(engine(best, CLAIMS, CHANCE, noise=0.01).markdown(), "cot:")
    assert head(text) == "Not decided" and "seed 7 alone -0.030, beyond its own margin" in text, text
    assert "[shown by the mean; seed 7 alone" in text and ": undecided]" in text, text


def lever(mamba_best, mamba_paper, transformer=0.97, rates=3):
    """CoT at n=4 and 6: the Transformer and Mamba each chosen among `rates` rates on validation (read held
    out), Mamba at the paper's rate `mamba_paper` (best.csv's baseline)."""
    best = seeded(setups=("cot",), mamba_cot=(mamba_best, mamba_best), transformer_cot=(transformer, transformer),
                  hybrid_cot=None).assign(rates=rates)
    best["test_exact_match_by_seed"] = best["val_exact_match_by_seed"]
    mamba = best["arch"] == "mamba"
    best.loc[mamba, "baseline_exact_match_by_seed"] = "/".join([str(mamba_paper)] * 4)
    return best


def test_capacity_or_training_answers_closes_only_where_mamba_had_a_gap():
    # (g) read "the gap closes" where Mamba sat at 0.95 at every rate beside the Transformer's 0.97: no gap at the
    # baseline, nothing closed. As (d) and (e): closeness speaks only where the gap at the baseline is material.
    text = line(findings(lever(0.95, 0.95)), "Capacity or training (i)")
    assert head(text) == "Capacity or training (i) the best learning rate: not decided", text
    assert "no material gap to close" in text, text
    closes = line(findings(lever(0.95, 0.6)), "Capacity or training (i)")
    assert head(closes) == "Capacity or training (i) the best learning rate: the gap closes", closes
    stays = line(findings(lever(0.75, 0.6)), "Capacity or training (i)")
    assert head(stays) == "Capacity or training (i) the best learning rate: the gap does not close", stays
    # No Mamba at the paper's rate among its rates: no baseline, so closeness can refute, never show.
    unknown = lever(0.95, 0.6).drop(columns="baseline_exact_match_by_seed")
    text = line(findings(unknown), "Capacity or training (i)")
    assert head(text) == "Capacity or training (i) the best learning rate: not decided", text
    assert "not tried at Mamba's paper rate beside others" in text, text


@pytest.mark.parametrize("retrieval, refuted", [(0.998, False), (0.98, False), (0.5, True)])
def test_an_improvement_is_refuted_by_a_material_dip_under_the_ceiling_only(retrieval, refuted):
    # (c) read Not reproduced where retrieval sat at 0.998 under CoT's 1.000 at n=4 on 5,000 samples, and on the
    # paper's own shape with retrieval at 0.980 there: with CoT at the ceiling there is no room to improve, and
    # only a dip that matters (0.1 or more beyond the margin) is a counterexample.
    best = seeded(mamba_cot=(1.0, 0.6), mamba_retrieval=(retrieval, 0.95), transformer_cot=(1.0, 0.85),
                  transformer_retrieval=(retrieval, 0.97), hybrid_cot=(1.0, 0.85),
                  hybrid_retrieval=(retrieval, 0.97)).assign(val_samples=5000)
    text = line(findings(best), "retrieval improves")
    assert (head(text) == "Not reproduced") == refuted, text
    if not refuted:
        assert head(text) == "Reproduced" and "at the ceiling: no room to improve" in text, text


def test_findings_are_data_that_json_carries_whole_and_markdown_renders():
    # Issue 78: the engine returns typed findings; findings.json carries them whole (every field, every
    # comparison decided and left out), and the report's lines are their rendering, never parsed back.
    from workloads.tasks.istree import IsTreeTask
    from workloads.tasks.verdicts import Findings

    best = seeded(hybrid_cot=(1.0, 0.3), mamba_vanilla=(0.5, 0.5))
    best = pd.concat([best, best.assign(setup=best["setup"] + "-familyrandom")], ignore_index=True)
    pending = pd.DataFrame({"trial": ["t"], "arch": ["mamba"], "setup": ["cot"], "size": ["tiny"], "n": [6],
                            "state": ["pending"]})
    found = IsTreeTask.findings(best, pending)
    assert [part.variant for part in found.parts] == ["", "familyrandom"] and found.guessing
    assert any(f.left_out for f in found.lines) and any(f.untestable for f in found.lines)
    assert all(f.not_run == "1 cot trial pending" for f in found.parts[0].findings if "cot" in f.claim.lower()
               and not f.untestable)
    back = Findings.from_json(found.to_json())
    assert back == found and back.markdown() == found.markdown()
    tracks = next(f for f in back.lines if f.claim.startswith("the hybrid tracks"))
    assert tracks.verdict == "Not reproduced" and tracks.decided_by in [c.said for c in tracks.compared]
    assert tracks.markdown() in found.markdown()
    assert tracks.markdown().startswith(f"- **{tracks.verdict}** {tracks.seeds}: {tracks.claim}. ")
