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


def line(lines, start):
    """The line of a finding, by the words its name starts with."""
    found = [text for text in lines if head(text).startswith(start) or name(text).startswith(start)]
    assert len(found) == 1, (start, lines)
    return found[0]


def head(text):
    return text.split("**")[1]


def name(text):
    """A line's finding, after its head and seeds: "- **Reproduced** on 2 seeds: NAME. ..." """
    return re.sub(r"^(?:- (?:\[\w+\] )?\*\*[^*]+\*\*)(?: on \d+ seeds| \(1 seed\)| \(the mean over seeds only\))?: ", "", text)


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
    assert len(lines) == 8
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
    for text in findings(table(paper_shape)):
        if head(text) in ("Reproduced", "Not reproduced"):
            assert "params)" in text, text


def test_models_are_paired_by_parameters_whatever_their_labels():
    # 0.5M Mamba beside tiny Transformer and hybrid: 17x apart, never paired, whatever the grid's labels.
    best = table(paper_shape, sizes={"mamba": "0.5M"})
    lines = findings(best)
    assert head(line(lines, "cot:")) == "Not testable here"  # no pair of one base size to name either


def test_a_run_that_learnt_nothing_reproduces_nothing():
    # Issue 41: every cell at guessing level read "the answer alone is hard: Reproduced".
    lines = findings(table(lambda a, s, n: 0.5 if s == "vanilla" else 0.0))
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
    for text in lines:
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
                               archs=("transformer", "mamba"), setups=("cot",), ns=(4, 8)))
        heads.add(head(line(lines, "cot:")))
    assert heads == {"Not decided"}


def test_margins_follow_the_validation_sets_size():
    # A fall of 0.30 with 0.2 needed: decided on 5,000 samples, within noise on 30.
    def em(a, s, n):
        return {4: 1.0, 8: 0.6}[n] if a == "mamba" else {4: 1.0, 8: 0.9}[n]

    def cot(val_samples):
        return head(line(findings(table(em, archs=("transformer", "mamba"), setups=("cot",), ns=(4, 8),
                                         val_samples=val_samples)), "cot:"))

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
    assert "(1 seed)" in line(lines, "vanilla:")


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
    assert len(same) == 10  # (a) in three setups, (b) to (e), the ablation in three
    text = line(same, "cot: does the size")
    assert head(text) == "State ablation: the state's size did not decide the gap", text
    assert "tiny-dstate1-nlayers4 (1,024 state floats, 28,320 params) 0.200, tiny (3,648 floats, 29,888 params) 0.200" in text
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
    lines = findings(pd.concat([best, best.assign(setup=best["setup"] + "-" + variant, val_exact_match=1.0)]))
    assert len(lines) == 16
    assert head(line(lines[:8], "cot:")) == "Reproduced"
    assert lines[8].startswith(f"- [{variant}] **")
