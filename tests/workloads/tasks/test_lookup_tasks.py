"""The look-up tasks of the paper's theory (ar, index, cgram): each sample checked against
an independent brute-force reading of its text; determinism, loss masks, the
retriever replayed, and the generation protocol end to end."""

import pytest
import torch

from tests.workloads.replay import Replay
from workloads.evaluate import answers, generate
from workloads.tasks import build_task
from workloads.tasks.ar import ARConfig
from workloads.tasks.cgram import CGramConfig
from workloads.tasks.index import IndexConfig

CONFIGS = [ARConfig(n=8, keys=12, values=10, setup=s) for s in ("vanilla", "retrieval")] + [
    ARConfig(n=40, setup="retrieval"), IndexConfig(n=12, values=5, setup="vanilla"), IndexConfig(n=30, setup="retrieval"),
    CGramConfig(n=20, c=2, values=24, setup="vanilla"), CGramConfig(n=40, c=3, values=8, setup="retrieval"),
    CGramConfig(n=60, c=5, values=3, setup="retrieval")]


def oracle(config, tokens: list[str]) -> dict:
    """What a sample must be, from its token strings alone."""
    sep, eos = tokens.index("SEP"), tokens.index("EOS")
    context, query = [int(t) for t in tokens[1:sep]], [int(t) for t in tokens[sep + 1 : eos]]
    assert tokens[0] == "BOS" and len(query) == (config.c - 1 if config.name == "cgram" else 1)
    if config.name == "cgram":
        width = len(query)
        hits = [i for i in range(len(context) - width + 1) if context[i : i + width] == query]
        assert len(hits) == 1 and hits[0] + width < len(context), "the gram occurs once, with a token after it"
        assert all(x < config.values for x in context)
        answer = context[hits[0] + width]
    elif config.name == "ar":
        keys, values = context[0::2], context[1::2]
        assert len(keys) == config.n and len(set(keys)) == config.n, "keys are distinct"
        assert all(k < config.keys for k in keys) and all(config.keys <= v < config.keys + config.values for v in values)
        answer = dict(zip(keys, values))[query[0]]
    else:
        assert len(context) == config.n and all(x < config.values for x in context)
        answer = context[query[0] - config.values]
    trace = tokens[eos + 1 : -1]
    if config.setup == "retrieval":
        assert trace == ["STARTSEARCH", *map(str, query), "ENDSEARCH", str(answer), "EOS"]
        supervised = [1] * (len(query) + 2) + [0, 1]
    else:
        assert trace == []
        supervised = []
    return {"answer": answer, "supervised": [0] * (eos + 1) + supervised + [1]}


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: f"{c.name}-{c.setup}-n{c.n}")
def test_every_sample_is_what_its_text_says(config):
    task = build_task(config)
    for s in task.samples(seed=3, stream=0, start=0, count=300):
        want = oracle(config, s["tokens"])
        assert int(s["tokens"][-1]) == want["answer"] == s["label"]
        assert s["supervised"] == want["supervised"]
        assert len(s["tokens"]) == config.longest_sample and len(s["tokens"]) <= task.max_length
        assert max(task.vocab.index(t) for t in s["tokens"]) < config.vocab_size == task.vocab_size


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: f"{c.name}-{c.setup}-n{c.n}")
def test_samples_are_a_function_of_seed_stream_and_index(config):
    task = build_task(config)
    whole = task.batch(seed=5, stream=0, start=0, count=40)
    part = task.batch(seed=5, stream=0, start=17, count=9)
    assert torch.equal(whole.tokens[17:26], part.tokens) and torch.equal(whole.labels[17:26], part.labels)
    other = task.batch(seed=5, stream=1, start=0, count=40)
    assert not torch.equal(whole.tokens, other.tokens)  # validation never repeats training
    query = config.c - 1 if config.name == "cgram" else 1
    assert torch.equal(whole.supervised.sum(1), torch.tensor(1 if config.setup == "vanilla" else query + 4).repeat(40))


@pytest.mark.parametrize("config", [c for c in CONFIGS if c.setup == "retrieval"], ids=lambda c: f"{c.name}-n{c.n}")
def test_replaying_the_retriever_reproduces_every_retrieved_token(config):
    task = build_task(config)
    batch = task.batch(seed=1, stream=0, start=0, count=200)
    for row in range(200):
        ids = batch.tokens[row, : int(batch.lengths[row])].tolist()
        at = ids.index(task.end_search_id) + 1
        assert not batch.supervised[row, at]  # the retriever's token carries no loss
        assert task.retrieve(ids[:at]) == ids[at]


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: f"{c.name}-{c.setup}-n{c.n}")
def test_generation_stops_at_the_answer_and_scores_it(config):
    task = build_task(config)
    batch = task.batch(seed=2, stream=1, start=0, count=32)
    seqs = generate(Replay(task, batch, wrong=task.pad_id), task, batch.tokens[:, : task.prompt_length],
                    autocast=torch.no_grad)
    for row in range(32):
        length = int(batch.lengths[row])
        assert seqs[row, :length].tolist() == batch.tokens[row, :length].tolist()
        assert (seqs[row, length:] == task.pad_id).all()
    assert (answers(task, seqs) == batch.labels.numpy()).all()
    wrong = seqs.copy()
    wrong[:, task.prompt_length :] = task.pad_id  # wrote nothing
    assert (answers(task, wrong) == -1).all()


def test_configs_refuse_impossible_parameters():
    with pytest.raises(ValueError, match=r"keys \(4\) must be at least n \(8\)"):
        ARConfig(n=8, keys=4)
    with pytest.raises(ValueError):
        IndexConfig(n=8, setup="cot")  # no chain of thought for look-ups
    with pytest.raises(ValueError, match=r"values\^\(c-1\) = 4 is below n \(30\)"):
        CGramConfig(n=30, c=2, values=4)  # a token that occurs once among 30 of 4 kinds: too rare
