"""The report's paragraph on the paper's findings, decided by the rules of
docs/findings.md: each test is one way the earlier rules said more than their data
(issue 41), with the case that showed it as input."""

import re

import pandas as pd
import pytest

from workloads.tasks._istree_findings import at_guessing, findings

# The tiny presets (`icr-sweep models`): parameters and recurrent state floats.
MODELS = {("transformer", "tiny"): (30944, 0), ("mamba", "tiny"): (29888, 3648), ("hybrid", "tiny"): (30240, 2432),
          ("mamba", "tiny-dmodel16"): (10144, 1824), ("mamba", "tiny-dmodel4"): (1672, 0),
          ("mamba", "tiny-dstate1-nlayers4"): (28320, 1024), ("mamba", "0.5M"): (523328, 38912)}
LINES = ("vanilla:", "cot:", "retrieval:", "CoT improves", "retrieval improves", "with retrieval Mamba",
         "the hybrid tracks", "State ablation")


def table(em, archs=("transformer", "mamba", "hybrid"), setups=("vanilla", "cot", "retrieval"), ns=(4, 6, 8),
          sizes=None, val_samples=300):
    """A best-per-cell table as the report writes it (one seed), em(arch, setup, n) its exact match."""
    sizes = sizes or {}
    rows = []
    for a in archs:
        for s in setups:
            for n in ns:
                size = sizes.get(a, "tiny")
                params, state = MODELS[(a, size)]
                rows.append(dict(arch=a, setup=s, size=size, n=n, lr=1e-3, val_exact_match=em(a, s, n), seeds=1,
                                 gen_accuracy=0.9, val_samples=val_samples, params=params, state_floats=state))
    return pd.DataFrame(rows)


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


def test_a_run_shaped_like_the_paper_reproduces_its_findings_and_says_where_two_of_them_pull_apart():
    lines = findings(table(paper_shape))
    assert len(verdicts(lines)) == 8 and lines[0] == "Read: validation exact match (no cell's rate was chosen among several)."
    for start in ("vanilla:", "cot:", "CoT improves", "retrieval improves", "with retrieval Mamba", "the hybrid tracks"):
        assert head(line(lines, start)) == "Reproduced", line(lines, start)
    # docs/experiment.md says Mamba falls far more "in every setup" and that with retrieval it comes
    # close: where it is close, it does not fall far more. The rule says so rather than bend.
    assert head(line(lines, "retrieval:")) == "Not reproduced"
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
    values = {("transformer", "cot"): 0.6, ("transformer", "retrieval"): 0.4, ("mamba", "cot"): 0.1,
              ("mamba", "retrieval"): 0.35, ("hybrid", "cot"): 0.42, ("hybrid", "retrieval"): 0.32}
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
        assert head(text) in ("Not decided", "State ablation: not testable here", "Not testable here"), text
    assert "no gap to close" in line(lines, "with retrieval Mamba")
    assert "lags the Transformer" in line(lines, "the hybrid tracks")
    assert "ceiling" in line(lines, "retrieval improves")


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
        assert text.startswith("- **Not decided** on 2 seeds") and "seeds disagree" in text, text
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
    assert head(text) == "Not reproduced" and "less than the Transformer at a smaller n" in text, text

    def rising(a, s, n):  # Mamba 1.0 -> 0.3 -> 0.6: it does not fall "as n grows"
        return {4: 1.0, 6: 0.3, 8: 0.6}[n] if a == "mamba" else 1.0

    text = line(findings(table(rising, archs=("transformer", "mamba"), setups=("cot",))), "cot:")
    assert head(text) == "Not reproduced" and "rises with n" in text, text


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
    return findings(pd.concat([best, other]))


def test_the_state_ablation_says_whether_the_states_size_decided_the_gap():
    same = ablation({4: 1.0, 6: 0.5, 8: 0.2}, {4: 1.0, 6: 0.5, 8: 0.2})
    assert len(verdicts(same)) == 10  # (a) in three setups, (b) to (e), the ablation in three
    text = line(same, "cot: does the size")
    assert head(text) == "State ablation: the state's size did not decide the gap", text
    assert "tiny-dstate1-nlayers4 (1,024 state floats, 28,320 params) 0.200, tiny (3,648 floats, 29,888 params) 0.200" in text
    # Issue 51: what else was varied, and how much of the gap the larger state leaves.
    assert "the larger state still lags the Transformer by 0.700" in text, text
    assert "the two Mambas differ in more than the state: nlayers4" in text, text
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
    assert head(text) == "State ablation: cannot tell" and "seeds disagree" in text, text


@pytest.mark.parametrize("variant", ["familyrandom"])
def test_a_task_variant_is_decided_on_its_own_cells(variant):
    best = table(paper_shape)
    lines = verdicts(findings(pd.concat([best, best.assign(setup=best["setup"] + "-" + variant, val_exact_match=1.0)])))
    assert len(lines) == 16
    assert head(line(lines[:8], "cot:")) == "Reproduced"
    assert lines[8].startswith(f"- [{variant}] **")


# Issue 51: crafted runs on which a line read Reproduced that its data do not support. Two
# seeds alike, 1,000 validation samples, n = 4 / 6; P is the paper's shape there.
P = {("transformer", "vanilla"): (0.95, 0.5), ("mamba", "vanilla"): (0.7, 0.5), ("hybrid", "vanilla"): (0.93, 0.51),
     ("transformer", "cot"): (1.0, 0.97), ("mamba", "cot"): (1.0, 0.4), ("hybrid", "cot"): (1.0, 0.97),
     ("transformer", "retrieval"): (0.98, 0.98), ("mamba", "retrieval"): (0.98, 0.98),
     ("hybrid", "retrieval"): (0.98, 0.98)}


def two_seeds(values=P, setups=("vanilla", "cot", "retrieval"), **changed):
    """A run of P's shape (or `values`), `changed` replacing cells: {"mamba_cot": (1.0, 0.85)}; None drops a cell."""
    cells = {**values, **{tuple(k.split("_")): v for k, v in changed.items()}}
    best = table(lambda a, s, n: 0.0, setups=setups, ns=(4, 6), val_samples=1000)
    best = with_seeds(best, lambda a, s, n: [cells[(a, s)][(4, 6).index(n)]] * 2 if cells.get((a, s)) else [0.0, 0.0])
    gone = [(a, s) for (a, s), v in cells.items() if v is None]
    return best[[(a, s) not in gone for a, s in zip(best["arch"], best["setup"])]].reset_index(drop=True)


def test_the_papers_shape_still_reproduces_what_it_shows():
    lines = findings(two_seeds())
    for start in ("cot:", "CoT improves", "with retrieval Mamba", "the hybrid tracks"):
        assert head(line(lines, start)) == "Reproduced", line(lines, start)


def test_a_claim_about_named_models_is_not_decided_on_a_subset_of_them():
    # Class A: Mamba against the hybrid alone read "far more than the Transformer's and the hybrid's".
    best = two_seeds(mamba_vanilla=(0.95, 0.55), hybrid_vanilla=(0.93, 0.93))
    best = best[~((best["arch"] == "transformer") & (best["setup"] == "vanilla") & (best["n"] == 6))]
    text = line(findings(best), "vanilla:")
    assert head(text) == "Not decided", text
    assert "Never compared" in text and "the Transformer (no two n with vanilla shared" in text, text
    assert "[shown]" in text  # the hybrid's comparison is there, and shows it
    # A comparator absent from the run, or only at another size, is named the same way.
    text = line(findings(two_seeds(hybrid_vanilla=None, hybrid_cot=None, hybrid_retrieval=None)), "cot:")
    assert head(text) == "Not decided" and "the hybrid (no hybrid in this run)" in text, text
    text = line(findings(two_seeds(hybrid_retrieval=None, hybrid_cot=None, hybrid_vanilla=None)), "CoT improves")
    assert head(text) == "Not decided" and "the hybrid (absent from this run)" in text, text
    best = two_seeds()
    best.loc[best["arch"] == "hybrid", ["size", "params"]] = ["tiny-dmodel16", 10144]
    text = line(findings(best), "cot:")
    assert head(text) == "Not decided" and "the hybrid (none of Mamba's size" in text and "2.95x apart" in text, text


def test_a_guard_never_drops_a_counterexample():
    # Class B: CoT gave Mamba nothing (both at guessing) and "CoT improves every architecture" read Reproduced.
    text = line(findings(two_seeds(mamba_vanilla=(0.5, 0.5), mamba_cot=(0.0, 0.0))), "CoT improves")
    assert head(text) == "Not decided" and "both at guessing level: no improvement shown" in text, text
    # At the ceiling: left out where CoT stays there, kept where it falls below it.
    ceiling = dict(transformer_vanilla=(1.0, 1.0), transformer_cot=(1.0, 1.0))
    assert "already at the ceiling (transformer" in line(findings(two_seeds(**ceiling)), "CoT improves")
    text = line(findings(two_seeds(**{**ceiling, "transformer_cot": (0.6, 0.6)})), "CoT improves")
    assert head(text) == "Not decided" and "contradict the claim beyond the margin" in text, text
    # Mamba still solving the largest n: left out, unless the comparator fell more than Mamba.
    text = line(findings(two_seeds(mamba_cot=(1.0, 0.95), transformer_cot=(1.0, 0.95), hybrid_cot=(1.0, 0.5))), "cot:")
    assert "Mamba still solves n=6" in text and "contradict the claim beyond the margin" in text, text
    assert head(text) != "Reproduced"


def test_mamba_and_its_comparators_are_guarded_alike():
    # Class C: Mamba 1.000 -> 0.850 against a Transformer rising from 0.300: "Mamba falls 0.800 more".
    best = two_seeds(setups=("cot",), mamba_cot=(1.0, 0.85), transformer_cot=(0.3, 0.95), hybrid_cot=(0.3, 0.95))
    text = line(findings(best), "cot:")
    assert head(text) == "Not decided" and "the Transformer does not solve n=4" in text, text
    assert "0.800 more" not in text


def test_a_rate_chosen_among_several_is_read_on_the_held_out_set():
    # Class D: four rates per cell; the Transformer's CoT n=6 at .921/.925 on validation (the rate was
    # picked by these), about .90 on the held-out set.
    best = two_seeds()
    best["rates"] = 4
    best["test_exact_match_by_seed"] = best["val_exact_match_by_seed"]
    picked = (best["arch"] == "transformer") & (best["setup"] == "cot") & (best["n"] == 6)
    best.loc[picked, "val_exact_match_by_seed"] = "0.921/0.925"
    best.loc[picked, "test_exact_match_by_seed"] = "0.9/0.899"
    lines = findings(best)
    assert lines[0].startswith("Read: the held-out exact match of the 18 cell(s)"), lines[0]
    text = line(lines, "the hybrid tracks")
    # .90 on the held-out set is not solved: the comparison is left out, and named so.
    assert "0.923" not in text and re.search(r"the Transformer does not solve it[^;]*cot n=6", text), text
    alone = findings(best.assign(rates=1))  # one rate: validation, as before, where .923 is solved
    assert alone[0] == "Read: validation exact match (no cell's rate was chosen among several)."
    assert "cot n=6: hybrid 0.970, Transformer 0.923" in line(alone, "the hybrid tracks")


def test_a_value_that_is_not_a_number_is_named_in_its_cell_and_line():
    best = two_seeds()
    cell = (best["arch"] == "mamba") & (best["setup"] == "cot") & (best["n"] == 6)
    best.loc[cell, "val_exact_match_by_seed"] = "0.4/nan"
    lines = findings(best)
    assert "Left out of every comparison, having no finite exact match: mamba cot tiny n=6 (seed 0: 0.4, seed 1: nan)" \
        in lines[1]
    for start in ("cot:", "CoT improves"):
        assert "Not read, having no finite exact match: mamba cot tiny n=6" in line(lines, start)
    assert head(line(lines, "cot:")) != "Reproduced"


def test_the_mean_showing_what_no_seed_alone_can_is_not_called_a_disagreement():
    # Identical seeds of 100 samples: a fall of 0.3 more than the Transformer's (0.2 needed), beyond the
    # pooled margin only. The seeds agree; each alone is within noise.
    best = two_seeds(setups=("cot",), mamba_cot=(1.0, 0.6), transformer_cot=(1.0, 0.9), hybrid_cot=(1.0, 0.9))
    text = line(findings(best.assign(val_samples=100)), "cot:")
    assert head(text) == "Not decided" and "seeds disagree" not in text, text
    assert "shown by the mean only, no seed alone shows it" in text, text


def test_a_setup_the_run_lacks_has_its_line():
    lines = findings(two_seeds(setups=("cot", "retrieval")))
    assert head(line(lines, "vanilla:")) == "Not testable here" and "this run has no vanilla trials" in line(lines, "vanilla:")


def test_one_seed_says_which_cells_lack_the_other():
    # Issue 51: a deciding cell with a seed still running read "(1 seed)" with no reason.
    best = with_seeds(table(paper_shape, setups=("cot",), ns=(4, 8)), lambda a, s, n: [paper_shape(a, s, n)] * 2,
                      drop=lambda a, s, n: (a, s, n) == ("mamba", "cot", 8))
    text = line(findings(best), "cot:")
    assert "(1 seed: mamba cot tiny n=8 has no other finished seed)" in text, text


def test_the_laptop_paragraphs_say_what_run_7s_findings_say():
    """README's and the stored findings of the laptop's run 7 (issue 51: README said more than its report)."""
    from pathlib import Path

    root = Path(__file__).parents[3]
    folder = root / "sweeps/calibration/istree_laptop_run7"
    from workloads.tasks.istree import IsTreeTask

    lines = IsTreeTask.findings(pd.read_csv(folder / "best.csv"))  # the report's: the findings, then who guesses
    stored = (folder / "findings_round2.md").read_text()
    assert stored.split("\n\n", 2)[2].strip() == "\n".join(lines)
    heads = {start: head(line(lines, start)) for start in ("vanilla: Mamba", "cot: Mamba", "retrieval: Mamba",
                                                           "CoT improves", "retrieval improves", "with retrieval Mamba",
                                                           "the hybrid tracks", "cot: does the size")}
    assert heads == {"vanilla: Mamba": "Not decided", "cot: Mamba": "Not reproduced", "retrieval: Mamba": "Not decided",
                     "CoT improves": "Reproduced", "retrieval improves": "Not decided",
                     "with retrieval Mamba": "Reproduced", "the hybrid tracks": "Not decided",
                     "cot: does the size": "State ablation: the state's size did not decide the gap"}
    readme = (root / "README.md").read_text().split("## What a laptop shows of the paper")[1].split("## ")[0]
    for said in ("**Not reproduced** with CoT", "**Not decided** with\n  the answer alone", "CoT improves every "
                 "architecture: **Reproduced**", "Retrieval improves every architecture more than CoT: **Not decided**",
                 "comes close to the Transformer of its size: **Reproduced**", "the Transformer of its size: **Not "
                 "decided** (of its two\n  cells with a Mamba gap", "**the state's size did not decide the gap** (one\n"
                 "  comparison"):
        assert said in readme, said
