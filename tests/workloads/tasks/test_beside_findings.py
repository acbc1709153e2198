"""The comparison every task gets (issue 79): an architecture the task's claims do not
name (a user's new mixer) is set beside the Transformer of its size, per setup, by the
findings engine (`workloads/tasks/findings.py: Beside`)."""

import pandas as pd

from tests.workloads.tasks.test_istree_findings import paper_shape, respread, table
from workloads.tasks.registry import TASKS


def with_mixer(em, params=31_000, arch="glr", base=None, setups=("vanilla", "cot", "retrieval")):
    """A run of the paper's three tiny models shaped like the paper (`base`: another run),
    and a mixer of `params` parameters whose exact match is em(setup, n)."""
    base = table(paper_shape, setups=setups) if base is None else base
    mixer = table(paper_shape, archs=("transformer",), setups=setups)
    mixer = mixer.assign(arch=arch, params=params, state_floats=4096,
                         val_exact_match=[em(s, n) for s, n in zip(mixer["setup"], mixer["n"])])
    return pd.concat([base, respread(mixer)], ignore_index=True)


def beside(found, arch="glr"):
    """Each line that sets `arch` beside the Transformer, by its setup."""
    return {f.claim.split(":")[0]: f for f in found.lines if f.verdict.startswith(f"Beside the Transformer: {arch}")}


def istree(best):
    return TASKS["istree"][1].findings(best)


def test_a_mixer_no_claim_names_is_set_beside_the_transformer_of_its_size_in_each_setup():
    tracks = beside(istree(with_mixer(lambda s, n: paper_shape("transformer", s, n) - 0.02)))
    assert sorted(tracks) == ["cot", "retrieval", "vanilla"]
    for setup, f in tracks.items():
        assert f.verdict == "Beside the Transformer: glr ends close", f.markdown()
        assert f.seeds == "on 4 seeds" and f.figure.endswith("[shown]") and "-0.1 claimed" in f.figure
        assert "glr tiny (31,000 params) against transformer tiny (30,944 params), n=4" in f.markdown()
    short = beside(istree(with_mixer(lambda s, n: 0.5 if s == "vanilla" else 0.1)))
    for setup, f in short.items():
        assert f.verdict == "Beside the Transformer: glr falls short", f.markdown()
        assert f.figure.endswith("[refuted]")


def test_beside_an_unsolved_transformer_closeness_shows_nothing_and_distance_refutes():
    unsolved = table(lambda a, s, n: 0.6 if a == "transformer" else paper_shape(a, s, n), setups=("cot",))
    close = beside(istree(with_mixer(lambda s, n: 0.58, base=unsolved, setups=("cot",))))["cot"]
    assert close.verdict == "Beside the Transformer: glr: not decided" and "does not solve cot" in close.markdown()
    far = beside(istree(with_mixer(lambda s, n: 0.2, base=unsolved, setups=("cot",))))["cot"]
    assert far.verdict == "Beside the Transformer: glr falls short"


def test_a_mixer_without_a_transformer_of_its_size_is_named_not_compared():
    apart = [f for f in istree(with_mixer(lambda s, n: 0.9, params=62_000)).lines if "glr beside" in f.claim]
    assert [f.verdict for f in apart] == ["Not testable at equal size"]
    assert "glr tiny (62,000 params) against transformer tiny (30,944 params): 2.00x apart" in apart[0].untestable
    alone = with_mixer(lambda s, n: 0.9)
    alone = alone[alone["arch"] != "transformer"]
    lines = [f for f in istree(alone).lines if "glr beside" in f.claim]
    assert [f.verdict for f in lines] == ["Beside the Transformer: glr: not compared"]
    assert lines[0].untestable == "no transformer in this run" and lines[0].beyond_spec


def test_the_papers_models_and_those_a_tasks_claims_name_are_not_set_beside():
    assert not beside(istree(table(paper_shape)), "")  # the paper's three: its own lines only
    mqar = TASKS["mqar"][1].findings(table(paper_shape, setups=("vanilla",)))  # (g) names Mamba alone
    assert list(beside(mqar, "")) == ["vanilla"] and beside(mqar, "the hybrid")


def test_a_task_without_claims_gets_the_comparison_alone():
    ar = TASKS["ar"][1]
    assert not ar.claims
    found = ar.findings(with_mixer(lambda s, n: 0.1, base=table(paper_shape, archs=("transformer",), setups=("vanilla",)),
                                   setups=("vanilla",)))
    assert [f.verdict for f in found.lines] == ["Beside the Transformer: glr falls short"]
    assert ar.findings(table(paper_shape, archs=("transformer",), setups=("vanilla",))).lines == ()


def test_a_state_that_grows_with_the_length_is_one_model_in_every_cell():
    # Log-linear attention's state is counted at each cell's longest sample, so its rows in
    # best.csv differ in state_floats by setup and n: still one model, each comparison made once,
    # and no state ablation between a model and itself (its states 1,000 to 6,000 floats: 6x).
    best = with_mixer(lambda s, n: paper_shape("transformer", s, n) - 0.02)
    mixer = best["arch"] == "glr"
    best.loc[mixer, "state_floats"] = [1000 * (1 + 2 * ((n - 4) // 2) + (s == "retrieval"))
                                       for s, n in zip(best.loc[mixer, "setup"], best.loc[mixer, "n"])]
    found = istree(best)
    for setup, f in beside(found).items():
        text = f.markdown()
        assert f.verdict == "Beside the Transformer: glr ends close", text
        for n in (4, 6, 8):
            assert text.count(f"glr tiny (31,000 params) against transformer tiny (30,944 params), n={n}:") == 1, text
    improves = next(f for f in found.lines if f.claim.startswith("retrieval improves")).markdown()
    for n in (4, 6, 8):
        assert improves.count(f"glr tiny (31,000 params) n={n}:") == 1, improves
    assert "glr" not in "".join(f.markdown() for f in found.lines if "state" in f.verdict.lower())
