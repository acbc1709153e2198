"""Invariants of the IsTree data: labels, traces, retriever, loss masks, seeding."""

import networkx as nx
import numpy as np
import pytest
import torch

from tests.workloads.tasks.istree_oracle import cot_trace, edges_of
from tests.workloads.tasks.istree_oracle import sample as oracle_sample
from workloads.tasks import IsTreeConfig, IsTreeTask
from workloads.tasks.base import TRAIN_STREAM, VALID_STREAM

SETUPS = ("vanilla", "cot", "retrieval")


def task(n, setup="cot", family="binary"):
    return IsTreeTask(IsTreeConfig(n=n, setup=setup, family=family))


@pytest.mark.parametrize("family", ["binary", "random"])
@pytest.mark.parametrize("n", [4, 5, 8, 16, 64])
def test_labels_agree_with_networkx_and_classes_balance(family, n):
    t = task(n, "vanilla", family)
    count = 2000
    trees = 0
    for s in t.samples(seed=3, stream=TRAIN_STREAM, start=0, count=count):
        edges = edges_of(s["tokens"])
        assert len(edges) == n - 1
        assert all(u > v for u, v in edges), "edges are written u-v with u > v"
        assert len(set(edges)) == n - 1, "no repeated edge"
        assert all(0 <= v < u < n for u, v in edges)
        g = nx.Graph(edges)
        g.add_nodes_from(range(n))
        assert s["label"] == nx.is_tree(g)
        if not s["label"]:
            # n-1 edges and not a tree: a cycle and more than one component
            assert not nx.is_forest(g) and not nx.is_connected(g)
        trees += s["label"]
    assert abs(trees / count - 0.5) < 0.05


@pytest.mark.parametrize("family", ["binary", "random"])
@pytest.mark.parametrize("n", [4, 8, 16, 64])
def test_cot_trace_is_the_input_order_dfs_and_answer_follows(family, n):
    for s in task(n, "cot", family).samples(seed=1, stream=TRAIN_STREAM, start=0, count=1000):
        toks = s["tokens"]
        first, second = toks.index("EOS"), len(toks) - 2
        assert toks[second] == "EOS"
        trace = [int(x) for x in toks[first + 1 : second]]
        expected, is_tree = cot_trace(n, edges_of(toks))
        assert trace == expected
        assert toks[-1] == ("TRUE" if is_tree else "FALSE")
        assert s["label"] == is_tree
        # An Euler tour steps along edges only.
        adjacent = {frozenset(e) for e in edges_of(toks)}
        assert all(frozenset((a, b)) in adjacent for a, b in zip(trace, trace[1:]))
        if is_tree:
            assert len(trace) == 2 * n - 1 and trace[0] == trace[-1] == 0


def step_vertices(tokens, supervised):
    """The vertex that opens each DFS step of a retrieval trace."""
    out = []
    for i in range(tokens.index("EOS") + 1, len(tokens) - 1):
        if supervised[i] and tokens[i + 1] == "STARTSEARCH" and tokens[i - 1] != "STARTSEARCH":
            out.append(int(tokens[i]))
    return out


@pytest.mark.parametrize("family", ["binary", "random"])
@pytest.mark.parametrize("n", [8, 16, 64])
def test_retrieval_trace_replays_through_the_retriever(family, n):
    t = task(n, "retrieval", family)
    count = 1500 if n < 64 else 1000
    b = t.batch(seed=5, stream=TRAIN_STREAM, start=0, count=count)
    tokens, sup, lengths = b.tokens.numpy(), b.supervised.numpy(), b.lengths.numpy()
    end = t.token_id("ENDSEARCH")
    first_eos = t.prompt_length - 1
    assert (tokens[:, first_eos] == t.eos_id).all()
    n_queries = 0
    for row in range(count):
        length = lengths[row]
        seq = tokens[row, :length]
        answer_pos = np.flatnonzero(seq[:-1] == end) + 1
        # Only the model's own tokens after the first EOS carry loss.
        expected_sup = np.zeros(length, bool)
        expected_sup[first_eos + 1 :] = True
        expected_sup[answer_pos] = False
        assert (sup[row, :length] == expected_sup).all()
        for p in answer_pos:
            assert t.retrieve(seq[:p]) == seq[p]
        n_queries += len(answer_pos)
        assert (tokens[row, length:] == t.pad_id).all()
    assert n_queries > count * n  # every sample really asks the retriever


@pytest.mark.parametrize("family", ["binary", "random"])
@pytest.mark.parametrize("n", [8, 16, 64])
def test_retrieval_dfs_steps_through_the_cot_tour(family, n):
    cot = task(n, "cot", family).samples(seed=9, stream=TRAIN_STREAM, start=0, count=500)
    ret = task(n, "retrieval", family).samples(seed=9, stream=TRAIN_STREAM, start=0, count=500)
    for c, r in zip(cot, ret):
        assert edges_of(c["tokens"]) == edges_of(r["tokens"])
        assert c["label"] == r["label"] and c["tokens"][-1] == r["tokens"][-1]
        tour = [int(x) for x in c["tokens"][c["tokens"].index("EOS") + 1 : -2]]
        # Each retrieval step opens with the vertex the CoT tour writes, cycle or not.
        assert step_vertices(r["tokens"], r["supervised"]) == tour


@pytest.mark.parametrize("setup", SETUPS)
@pytest.mark.parametrize("family", ["binary", "random"])
@pytest.mark.parametrize("n", [5, 16, 40])
def test_stream_samples_are_what_the_oracle_writes_for_their_graph(setup, family, n):
    for s in task(n, setup, family).samples(seed=21, stream=TRAIN_STREAM, start=0, count=300):
        assert s == oracle_sample(n, setup, edges_of(s["tokens"]))


def test_retriever_answers_each_query_kind_from_the_text():
    t = task(6, "retrieval")
    enc = lambda s: [t.token_id(x) for x in s.split()]  # noqa: E731
    prompt = "BOS 3 - 0 5 - 3 4 - 0 2 - 1 5 - 1 EOS "
    cases = {
        "0 STARTSEARCH 0 - ENDSEARCH": "3",
        "0 STARTSEARCH 0 - 3 ENDSEARCH": "4",
        "0 STARTSEARCH 0 - 4 ENDSEARCH": "FAILED",
        "0 STARTSEARCH 5 - 3 ENDSEARCH": "1",
        "0 STARTSEARCH 2 - 5 ENDSEARCH": "FAILED",  # no edge {2, 5}
        "0 STARTSEARCH 3 ~ ENDSEARCH": "FAILED",  # never recorded
        "0 3 ~ 0 3 STARTSEARCH 3 ~ ENDSEARCH": "0",
        "0 3 ~ 0 0 ~ 3 STARTSEARCH 0 ~ ENDSEARCH": "FAILED",  # the root has no parent
        "0 STARTSEARCH ~ 3 ENDSEARCH": "FAILED",  # malformed
        "0 STARTSEARCH 3 ENDSEARCH": "FAILED",
    }
    for trace, want in cases.items():
        assert t.vocab[t.retrieve(enc(prompt + trace))] == want, trace


@pytest.mark.parametrize("setup", SETUPS)
def test_loss_only_after_the_first_eos(setup):
    for s in task(16, setup, "random").samples(seed=0, stream=TRAIN_STREAM, start=0, count=200):
        first = s["tokens"].index("EOS")
        assert not any(s["supervised"][: first + 1])
        assert s["supervised"][-1] == 1 and s["tokens"][-1] in ("TRUE", "FALSE")
        if setup != "retrieval":
            assert all(s["supervised"][first + 1 :])


@pytest.mark.parametrize("setup", SETUPS)
def test_samples_are_a_function_of_seed_stream_and_index(setup):
    t = task(16, setup, "random")
    a = t.batch(seed=7, stream=TRAIN_STREAM, start=0, count=40)
    b = t.batch(seed=7, stream=TRAIN_STREAM, start=0, count=40)
    assert torch.equal(a.tokens, b.tokens) and torch.equal(a.supervised, b.supervised)
    part = t.batch(seed=7, stream=TRAIN_STREAM, start=25, count=10)
    for i in range(10):
        length = int(part.lengths[i])
        assert torch.equal(part.tokens[i, :length], a.tokens[25 + i, :length])
    other_seed = t.batch(seed=8, stream=TRAIN_STREAM, start=0, count=40)
    valid = t.batch(seed=7, stream=VALID_STREAM, start=0, count=40)
    for other in (other_seed, valid):
        same = sum(
            torch.equal(a.tokens[i, : a.lengths[i]], other.tokens[i, : other.lengths[i]]) for i in range(40)
        )
        assert same == 0


@pytest.mark.parametrize("n", [4, 8, 64])
@pytest.mark.parametrize("family", ["binary", "random"])
def test_lengths_stay_within_the_bound_the_buffers_use(n, family):
    t = task(n, "retrieval", family)
    b = t.batch(seed=11, stream=TRAIN_STREAM, start=0, count=3000)
    assert int(b.lengths.max()) <= t.max_length
    assert set(b.tokens.unique().tolist()) <= set(range(t.vocab_size))


def test_vocabulary_is_the_references_and_depends_only_on_n():
    a, b = task(16, "vanilla", "binary"), task(16, "retrieval", "random")
    assert a.vocab == b.vocab and len(a.vocab) == 16 + 16 + 1
    # rnn-icrag's ids: its 16 specials in its order, then vertex v at 16 + v. With a
    # frozen sinusoidal table the id is the embedding, so these are part of the model.
    ids = {"-": 3, "PAD": 4, "EOS": 5, "TRUE": 6, "FALSE": 7, "BOS": 11, "STARTSEARCH": 12, "ENDSEARCH": 13,
           "FAILED": 14, "~": 15}
    assert {tok: a.token_id(tok) for tok in ids} == ids
    assert [a.vocab[16 + v] for v in range(17)] == [str(v) for v in range(17)]
