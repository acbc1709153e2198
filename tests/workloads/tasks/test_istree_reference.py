"""The reference implementation's own samples, rebuilt token for token.

tests/fixtures/istree_reference.jsonl.gz holds 5,384 samples written by the paper's
code (dangxingyu/rnn-icrag). Each is rebuilt from its edge list, in its order, by
the project's renderer, and by the independent oracle that the other tests trust.
"""

import collections
import gzip
import json
from pathlib import Path

import pytest

from tests.workloads.tasks import istree_oracle as oracle
from workloads.tasks.istree import render

FIXTURE = Path(__file__).parents[2] / "fixtures" / "istree_reference.jsonl.gz"


@pytest.fixture(scope="module")
def reference():
    with gzip.open(FIXTURE, "rt") as f:
        return [json.loads(line) for line in f]


def test_fixture_covers_every_setup_family_and_size(reference):
    cells = collections.Counter((r["family"], r["setup"], r["n"]) for r in reference)
    assert len(reference) == 5384
    assert set(cells) == {(f, s, n) for f in ("binary", "random") for s in ("vanilla", "cot", "retrieval")
                          for n in (6, 8, 16, 32)}


def _mismatches(reference, build):
    bad = collections.Counter()
    for r in reference:
        got = build(r["n"], r["setup"], oracle.edges_of(r["tokens"]))
        if (got["tokens"], got["supervised"], got["label"]) != (r["tokens"], r["supervised"], r["label"]):
            bad[(r["family"], r["setup"], r["n"])] += 1
    return dict(bad)


def test_renderer_reproduces_every_reference_sample(reference):
    assert _mismatches(reference, render) == {}


def test_oracle_reproduces_every_reference_sample(reference):
    # The oracle is what the stream tests compare against: it must be the reference's rules.
    assert _mismatches(reference, oracle.sample) == {}


@pytest.mark.parametrize(
    "edges, problem",
    [([(1, 0), (2, 1)], "n-1 = 3 edges"), ([(1, 0), (2, 1), (4, 3)], "in 0..3"),
     ([(1, 0), (1, 1), (3, 2)], "distinct"), ([(1, 0), (0, 1), (3, 2)], "repeated")],
)
def test_render_refuses_what_is_not_an_istree_graph(edges, problem):
    with pytest.raises(ValueError, match=problem):
        render(4, "cot", edges)
