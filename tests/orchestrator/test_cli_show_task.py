"""`icr-sweep show-task`: what it prints is what the experiment's rules prescribe
(docs/experiment.md)."""

import json

import pytest
from typer.testing import CliRunner

from orchestrator.cli import app
from tests.workloads.tasks import istree_oracle as oracle

runner = CliRunner()


@pytest.mark.parametrize("setup", ["vanilla", "cot", "retrieval"])
@pytest.mark.parametrize("family", ["binary", "random"])
@pytest.mark.parametrize("n", [6, 24])
def test_jsonl_samples_agree_with_the_independent_oracle(setup, family, n):
    result = runner.invoke(app, ["show-task", "istree", "--n", str(n), "--setup", setup, "--set", f"family={family}",
                                 "--seed", "4", "--count", "150", "--format", "jsonl"])
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in result.output.splitlines()]
    assert len(lines) == 150
    for s in lines:
        assert s == oracle.sample(n, setup, oracle.edges_of(s["tokens"]))
    labels = [s["label"] for s in lines]
    assert 0 < sum(labels) < len(labels)


def test_one_given_graph_is_rendered_in_its_edge_order():
    edges = "3-0,5-2,4-0,4-3,5-1"
    result = runner.invoke(app, ["show-task", "--instance", edges, "--setup", "retrieval", "--format", "jsonl"])
    assert result.exit_code == 0, result.output
    (s,) = [json.loads(line) for line in result.output.splitlines()]
    assert oracle.edges_of(s["tokens"]) == [(3, 0), (5, 2), (4, 0), (4, 3), (5, 1)]
    assert s == oracle.sample(6, "retrieval", oracle.edges_of(s["tokens"]))
    # 4's first neighbour is the root, always visited: the trace stops at that query.
    assert s["tokens"][-7:] == ["STARTSEARCH", "0", "~", "ENDSEARCH", "FAILED", "EOS", "FALSE"]
    text = runner.invoke(app, ["show-task", "--instance", edges, "--setup", "retrieval"])
    assert "not a tree" in text.output and "[FAILED]" in text.output


@pytest.mark.parametrize("edges, message", [("3-0,5-2", "n-1 = 5 edges"), ("3-0,x", "'x' is not an edge"),
                                            ("1-0,2-1,2-1", "repeated")])
def test_a_bad_instance_is_named(edges, message):
    args = ["show-task", "--instance", edges] + (["--n", "6"] if "5 edges" in message else [])
    result = runner.invoke(app, args)
    assert result.exit_code == 2 and message in result.output


@pytest.mark.parametrize("seed", ["-1", str(2**63)])
def test_seeds_outside_64_bits_are_refused(seed):
    result = runner.invoke(app, ["show-task", "--seed", seed])
    assert result.exit_code == 2 and "--seed must be in 0..9223372036854775807" in result.output


def test_a_size_beyond_the_supported_graphs_is_refused():
    result = runner.invoke(app, ["show-task", "--n", "5000"])
    assert result.exit_code == 2 and "n:" in result.output and "1024" in result.output


def test_large_counts_stream_in_chunks_that_join_seamlessly():
    from workloads.tasks import IsTreeConfig, build_task
    from workloads.tasks.base import TRAIN_STREAM

    # At n=1024 a chunk holds 2M tokens // ~56k tokens per sample = 35 samples.
    result = runner.invoke(app, ["show-task", "--n", "1024", "--setup", "retrieval", "--count", "40", "--seed", "3",
                                 "--format", "jsonl"])
    assert result.exit_code == 0
    lines = [json.loads(line) for line in result.output.splitlines()]
    expected = build_task(IsTreeConfig(n=1024, setup="retrieval")).samples(3, TRAIN_STREAM, 0, 40)
    assert len(lines) == 40 and lines == expected


@pytest.mark.parametrize("task, sets, setup", [("ar", ["keys=40", "values=20"], "retrieval"), ("index", ["values=7"], "vanilla")])
def test_every_task_prints_its_samples_with_its_parameters(task, sets, setup):
    from tests.workloads.tasks.test_lookup_tasks import oracle
    from workloads.tasks import TASKS, build_task

    args = ["show-task", task, "--n", "12", "--setup", setup, "--seed", "2", "--count", "20", "--format", "jsonl"]
    result = runner.invoke(app, args + [f"--set={s}" for s in sets])
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in result.output.splitlines()]
    config = TASKS[task][0](n=12, setup=setup, **dict(s.split("=") for s in sets))
    assert lines == build_task(config).samples(2, 0, 0, 20)
    for s in lines:
        want = oracle(config, s["tokens"])
        assert s["label"] == want["answer"] and s["supervised"] == want["supervised"]
        assert all(t.isdigit() or t.isupper() for t in s["tokens"])  # data as decimal ids, specials in capitals
    text = runner.invoke(app, args[:-2] + [f"--set={s}" for s in sets]).output
    assert "# sample 0: answer" in text and ("[" in text) == (setup == "retrieval")


@pytest.mark.parametrize("args, message", [
    (["ar", "--set", "keys=2"], "--set (ar): keys (2) must be at least n (8)"),
    (["ar", "--set", "colour=red"], "--set colour: Extra inputs are not permitted"),
    (["ar", "--set", "keys"], "--set: 'keys' is not FIELD=VALUE"),
    (["index", "--setup", "cot"], "--setup: Input should be 'vanilla' or 'retrieval'"),
    (["index", "--set", "family=random"], "--set family: Extra inputs are not permitted"),
    (["ar", "--instance", "1-0"], "--instance: ar renders no given instance (only sampled ones)"),
    (["mqar9"], "unknown task 'mqar9'; known tasks: ar, "),
])
def test_bad_task_options_name_the_flag(args, message):
    result = runner.invoke(app, ["show-task", *args])
    assert result.exit_code == 2 and message in result.output, result.output


def test_tasks_lists_every_registered_task_with_its_setups_and_parameters():
    from workloads.tasks import TASKS

    result = runner.invoke(app, ["tasks", "--format", "json"])
    assert result.exit_code == 0, result.output
    rows = {r["task"]: r for r in json.loads(result.output)}
    assert set(rows) == set(TASKS)
    assert rows["istree"]["setups"] == ["vanilla", "cot", "retrieval"] and rows["ar"]["setups"] == ["vanilla", "retrieval"]
    assert rows["mqar"]["parameters"]["seq_len"] == 64 and rows["ar"]["n"] == "key-value pairs in the context"
    for name, r in rows.items():  # each can be shown with its defaults
        shown = runner.invoke(app, ["show-task", name, "--n", "8", "--count", "1"])
        assert shown.exit_code == 0, (name, shown.output)
