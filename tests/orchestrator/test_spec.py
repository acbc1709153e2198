"""The sweep spec: the shipped sweeps, expansion, and refusals of bad input."""

import itertools
import json
import os
import shutil
from pathlib import Path

import pandas as pd
import pytest
import yaml
from pydantic import ValidationError
from typer.testing import CliRunner

from orchestrator.cli import app
from orchestrator.grid import cells, expand
from orchestrator.packing import gpu_memory_gb, local_gpu_memory_gb
from orchestrator.spec import SpecError, SweepSpec, load_spec
from workloads.config import trial_config
from workloads.metrics import METRICS
from workloads.models import preset
from workloads.tasks import IsTreeConfig

SWEEPS = Path(__file__).parents[2] / "sweeps"
runner = CliRunner()


@pytest.mark.parametrize("path", sorted(SWEEPS.glob("*.yaml")), ids=lambda p: p.name)
def test_every_shipped_sweep_is_valid(path):
    result = runner.invoke(app, ["validate", str(path)])
    assert result.exit_code == 0, result.output


def test_the_paper_grid_is_81_trials_with_the_paper_learning_rates():
    trials = expand(load_spec(SWEEPS / "istree_grid.yaml"))
    assert len(trials) == 81
    combos = {(t.model.arch, t.task.setup, t.model.size, t.task.n) for t in trials}
    assert combos == set(itertools.product(["transformer", "mamba", "hybrid"], ["vanilla", "cot", "retrieval"],
                                           ["0.5M", "1M", "2M"], [16, 32, 64]))
    for t in trials:
        assert t.train.lr == (1e-3 if t.model.arch == "transformer" else 3e-4)
        assert t.train.samples == 5_000_000 and t.train.batch_size == 64 and t.train.warmup_samples == 10_000
        assert t.train.eval_every == 100_000 and t.train.val_samples == 5_000
    names = [t.name for t in trials]
    assert len(set(names)) == 81 and "transformer-cot-0.5M-n32-lr1e-3-s0" in names


def test_the_1m_grid_is_the_paper_grid_at_a_fifth_of_the_samples():
    full, cheap = load_spec(SWEEPS / "istree_grid.yaml"), load_spec(SWEEPS / "istree_grid_1m.yaml")
    assert cheap.training.samples == 1_000_000
    assert full.model_copy(update={"name": cheap.name, "training": cheap.training}) == cheap


def test_expansion_gives_the_config_icr_sweep_train_takes():
    spec = SweepSpec(name="x", axes=dict(archs=["mamba"], setups=["retrieval"], sizes=["1M"], n=[16], seeds=[3]))
    (trial,) = expand(spec)
    same = trial_config("mamba", "1M", IsTreeConfig(n=16, setup="retrieval"), seed=3)
    assert trial == same


def test_learning_rate_lists_multiply_the_grid_and_override_per_arch():
    spec = SweepSpec(name="x", axes=dict(archs=["transformer", "hybrid"], setups=["cot"], sizes=["0.5M"], n=[16, 32]),
                     lr=dict(transformer=[1e-3, 3e-3, 1e-2], hybrid=5e-4))
    trials = expand(spec)
    assert len(trials) == 2 * 3 + 2
    assert sorted({t.train.lr for t in trials if t.model.arch == "transformer"}) == [1e-3, 3e-3, 1e-2]
    assert {t.train.lr for t in trials if t.model.arch == "hybrid"} == {5e-4}


def test_training_overrides_set_each_trials_protocol_by_arch_and_setup_the_later_rule_winning():
    spec = SweepSpec.model_validate(dict(
        name="x", axes=dict(archs=["transformer", "mamba"], setups=["cot", "retrieval"], sizes=["tiny"], n=[4]),
        training=dict(samples=4000, warmup_samples=500, eval_every=2000),
        training_overrides=[dict(setups=["retrieval"], samples=2000, eval_every=1000),
                            dict(archs=["transformer"], samples=8000), dict(archs=["transformer"], setups=["retrieval"], samples=3000)]))
    got = {(t.model.arch, t.setup): (t.train.samples, t.train.eval_every, t.train.warmup_samples) for t in expand(spec)}
    assert got == {("transformer", "cot"): (8000, 2000, 500), ("transformer", "retrieval"): (3000, 1000, 500),
                   ("mamba", "cot"): (4000, 2000, 500), ("mamba", "retrieval"): (2000, 1000, 500)}
    narrowed = SweepSpec.model_validate({**json.loads(spec.model_dump_json()), "axes": dict(
        archs=["mamba"], setups=["cot"], sizes=["tiny"], n=[4])})  # rules for what it no longer sweeps stay, apply to nothing
    assert [t.train.samples for t in expand(narrowed)] == [4000]
    again = SweepSpec.model_validate(json.loads(spec.model_dump_json()))  # as a run stores it and resume reads it
    assert [t.name for t in expand(again)] == [t.name for t in expand(spec)]
    assert [t.train.samples for t in expand(again)] == [t.train.samples for t in expand(spec)]


def test_a_training_override_can_name_the_task_sizes_it_applies_to():
    """Issue 29: a budget per n (the laptop spec trains the answer alone longer at
    the n where it is still being learnt), checked as the other selectors are."""
    base = dict(name="x", axes=dict(archs=["mamba"], setups=["vanilla", "cot"], sizes=["tiny"], n=[4, 5]),
                training=dict(samples=4000, warmup_samples=500, eval_every=2000))
    spec = SweepSpec.model_validate(dict(base, training_overrides=[dict(setups=["vanilla"], n=[4], samples=6000),
                                                                   dict(n=[5], eval_every=1000)]))
    got = {(t.setup, t.task.n): (t.train.samples, t.train.eval_every) for t in expand(spec)}
    assert got == {("vanilla", 4): (6000, 2000), ("vanilla", 5): (4000, 1000), ("cot", 4): (4000, 2000),
                   ("cot", 5): (4000, 1000)}
    with pytest.raises(ValidationError, match=r"for mamba with vanilla at n 4, warmup_samples \(500\) must be below "
                                              r"samples \(400\)"):
        SweepSpec.model_validate(dict(base, training_overrides=[dict(setups=["vanilla"], n=[4], samples=400)]))


def test_each_setup_can_sweep_task_sizes_of_its_own():
    """Issue 29: the laptop spec runs the answer alone only at its largest n; the
    grid, its count, the budgets by n and the plan follow each setup's list."""
    spec = SweepSpec.model_validate(dict(
        name="x", axes=dict(archs=["transformer", "mamba"], setups=["vanilla", "cot"], sizes=["tiny"], seeds=[0, 1],
                            n={"vanilla": [5], "cot": [4, 5]}),
        training=dict(samples=4000, warmup_samples=500, eval_every=2000),
        training_overrides=[dict(n=[4], samples=6000)]))
    trials = expand(spec)
    got = sorted({(t.model.arch, t.setup, t.task.n) for t in trials})
    assert got == [(arch, setup, n) for arch in ("mamba", "transformer") for setup, n in (("cot", 4), ("cot", 5), ("vanilla", 5))]
    assert len(trials) == spec.trial_count() == 2 * 3 * 2
    assert {t.task.n: t.train.samples for t in trials} == {4: 6000, 5: 4000}
    assert spec.axes.all_n() == [4, 5]
    assert SweepSpec.model_validate(spec.model_dump()) == spec  # as launch stores it and a resume reads it back
    narrowed = spec.model_dump()
    narrowed["axes"]["setups"] = ["cot"]  # a spec narrowed to fewer setups keeps its sizes per setup
    assert {t.task.n for t in expand(SweepSpec.model_validate(narrowed))} == {4, 5}


def test_optuna_spec_has_one_cell_per_axis_combination():
    spec = load_spec(SWEEPS / "istree_lr_optuna.yaml")
    assert len(cells(spec)) == 3 * 2 * 1 * 2 * 1
    result = runner.invoke(app, ["plan", str(SWEEPS / "istree_lr_optuna.yaml"), "--format", "json"])
    rows = json.loads(result.output)
    assert len(rows) == 12 and all(r["trials"] == spec.search.num_samples for r in rows)


def test_plan_json_lists_resolved_trials():
    result = runner.invoke(app, ["plan", str(SWEEPS / "istree_smoke.yaml"), "--format", "json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)
    assert len(rows) == len(expand(load_spec(SWEEPS / "istree_smoke.yaml")))
    for r in rows:
        assert {"arch", "setup", "size", "n", "lr", "seed"} <= r.keys()
        assert r["config"]["model"]["arch"] == r["arch"] and r["config"]["train"]["lr"] == r["lr"]


def test_schema_is_json_schema_of_the_spec():
    result = runner.invoke(app, ["schema"])
    schema = json.loads(result.output)
    assert {"name", "axes", "lr", "training", "resources", "search", "storage"} <= schema["properties"].keys()


BAD_SPECS = {
    "unknown nested key": ("name: x\ntraining: {sampels: 10}\n", ["training.sampels", "unknown key", "samples, batch_size"]),
    "unknown top key": ("name: x\naxis: {n: [8]}\n", ["axis", "unknown key", "axes"]),
    "unknown arch": ("name: x\naxes: {archs: [transformer, rwkv]}\n", ["axes.archs[1]", "'transformer', 'mamba', 'hybrid', 'mamba2'", "rwkv"]),
    "unknown arch in lr": ("name: x\nlr: {rwkv: 1.0e-3}\n", ["lr", "no architecture named 'rwkv'", "mamba2, mamba2_hybrid, gated_deltanet"]),
    "dimension of no mixer": ("name: x\naxes: {model: {heads: [0]}}\n", ["axes.model", "heads: a positive integer, got 0"]),
    "unknown dimension in a model list": ("name: x\naxes: {archs: [mamba], model: {mamba: [{}, {d_stat: 1}]}}\n",
                                          ["axes.model", "mamba[1]", "'d_stat' is not a model dimension", "'d_state'"]),
    "a value no model option has": ("name: x\naxes: {archs: [mamba], model: {mamba: [{}, {init: mimetc}]}}\n",
                                    ["axes.model", "mamba[1].init: 'mimetc' is not a value of init", "default, mimetic"]),
    "a model option crossed with a bad value": ("name: x\naxes: {model: {mamba: {init: [default, 3]}}}\n",
                                                ["axes.model", "mamba.init: 3 is not a value of init"]),
    "a model option the transformer lacks": (
        "name: x\naxes: {archs: [transformer], model: {transformer: [{init: mimetic}]}}\n",
        ["axes.model.transformer", "transformer has no init"]),
    "a model listed twice": ("name: x\naxes: {archs: [mamba], model: {mamba: [{d_state: 1}, {d_state: 1}]}}\n",
                             ["axes.model", "mamba: a model is listed twice"]),
    "a model list for an arch not swept": ("name: x\naxes: {archs: [transformer], model: {mamba: [{d_state: 1}]}}\n",
                                           ["axes.model names mamba", "transformer"]),
    "n too small": ("name: x\naxes: {n: [16, 3]}\n", ["axes.n", "in 4..1024", "[3]"]),
    "n too large": ("name: x\naxes: {n: [16, 4096]}\n", ["axes.n", "in 4..1024", "[4096]"]),
    "n per setup, one missing": ("name: x\naxes: {setups: [vanilla, cot], n: {vanilla: [16]}}\n",
                                 ["axes", "n: one list per setup swept (vanilla, cot)", "no sizes for cot"]),
    "n per setup, not a setup": ("name: x\naxes: {setups: [cot], n: {cot: [16], retreival: [16]}}\n",
                                 ["axes", "retreival is not a setup of istree (vanilla, cot, retrieval)"]),
    "n per setup repeated": ("name: x\naxes: {setups: [cot], n: {cot: [16, 16]}}\n", ["axes.n", "cot: repeated values in [16, 16]"]),
    "n per setup too small": ("name: x\naxes: {setups: [cot, vanilla], n: {cot: [16], vanilla: [3]}}\n",
                              ["axes", "in 4..1024", "[3]"]),
    "lr nan": ("name: x\nlr: {transformer: .nan}\n", ["lr.transformer", "in (0, 3.4e+37]", "nan"]),
    "lr inf in a list": ("name: x\nlr: {mamba: [1.0e-3, .inf]}\n", ["lr.mamba", "in (0, 3.4e+37]", "inf"]),
    "distribution bound inf": ("name: x\nlr: {mamba: {distribution: uniform, low: 1.0e-4, high: .inf}}\n"
                               "search: {method: optuna}\n", ["lr.mamba", "finite number"]),
    "repeated lr": ("name: x\nlr: {hybrid: [3.0e-4, 1.0e-3, 3.0e-4]}\n", ["lr.hybrid", "repeated learning rates", "extra seeds"]),
    "seed beyond 63 bits": ("name: x\naxes: {seeds: [0, 9223372036854775808]}\n", ["axes.seeds[1]", "9223372036854775807"]),
    "negative seed": ("name: x\naxes: {seeds: [-1]}\n", ["axes.seeds[0]", "greater than or equal to 0"]),
    "unknown storage scheme": ("name: x\nstorage: ftp://host/runs\n", ["storage", "unknown storage scheme 'ftp://'", "s3://"]),
    "duplicate key": ("name: x\naxes: {n: [8]}\naxes: {n: [16]}\n", [":3:1: not valid YAML", "duplicate key 'axes'"]),
    "yaml alias": ("name: x\naxes: {n: &sizes [8, 16]}\nlr: {mamba: *sizes}\n", ["not valid YAML", "aliases (*sizes) are not allowed"]),
    "gpu fraction": ("name: x\nresources: {gpus_per_trial: 1.5}\n", ["resources.gpus_per_trial", "in (0, 1], or auto", "1.5"]),
    "zero gpus": ("name: x\nresources: {gpus_per_trial: 0}\n", ["resources.gpus_per_trial", "in (0, 1], or auto", "got 0"]),
    "gpu share in words": ("name: x\nresources: {gpus_per_trial: half}\n", ["resources.gpus_per_trial", "or auto", "'half'"]),
    "gpu memory": ("name: x\nresources: {gpu_memory_gb: 0}\n", ["resources.gpu_memory_gb", "greater than 0"]),
    "unknown task": ("name: x\ntask: mqar2\n", ["task", "unknown task 'mqar2'", "known tasks: ar, ", "istree"]),
    "setup the task lacks": ("name: x\ntask: ar\naxes: {setups: [vanilla, cot]}\n", ["axes.setups", "ar has the setups vanilla, retrieval", "['cot']"]),
    "task size out of range": ("name: x\ntask: index\naxes: {setups: [vanilla], n: [8, 5000]}\n", ["axes.n", "index sizes must be in 1..4096", "[5000]"]),
    "bad task parameter": ("name: x\ntask: ar\ntask_params: {keys: 4}\naxes: {setups: [vanilla], n: [8]}\n", ["task_params", "keys (4) must be at least n (8)"]),
    "unknown task parameter": ("name: x\ntask: ar\ntask_params: {colour: 4}\naxes: {setups: [vanilla], n: [8]}\n", ["task_params", "colour", "Extra inputs are not permitted"]),
    "task field in axes": ("name: x\ntask: ar\naxes: {setups: [vanilla], n: [8], family: random}\n",
                           ["axes.family: unknown key; allowed keys: archs, setups", "family is a task field (istree): give it "
                            "as task_params.family for every trial, or sweep it as axes.task.family: [...]"]),
    "unknown model axis": ("name: x\naxes: {model: {width: [64]}}\n", ["axes.model", "width", "'d_model'"]),
    "repeated model axis value": ("name: x\naxes: {model: {d_state: [4, 4]}}\n", ["axes.model", "d_state: a list of distinct values"]),
    "model axes for an arch not swept": ("name: x\naxes: {archs: [transformer], model: {mamba: {d_state: [4]}}}\n",
                                         ["axes.model names mamba, which axes.archs does not sweep (transformer)"]),
    "model axes of no arch": ("name: x\naxes: {model: {rwkv: {d_state: [4]}}}\n",
                              ["axes.model", "'rwkv' is not an arch; known: 'transformer', 'mamba', 'hybrid'"]),
    "model axes both ways": ("name: x\naxes: {model: {mamba: {d_state: [4]}, d_model: [32]}}\n",
                             ["axes.model", "or per arch", "not both"]),
    "repeated per-arch value": ("name: x\naxes: {model: {mamba: {d_state: [4, 4]}}}\n",
                                ["axes.model", "mamba.d_state: a list of distinct values"]),
    "invalid model variant": ("name: x\naxes: {archs: [transformer], sizes: [tiny], model: {d_model: [33]}}\n",
                              ["axes.model with transformer", "d_model 33 is not divisible by n_heads 2"]),
    "unknown task axis": ("name: x\ntask: mqar\naxes: {setups: [vanilla], n: [4], task: {length: [64]}}\n",
                          ["axes.task", "'length' is not a parameter of mqar", "seq_len", "vocab"]),
    "task axis over n": ("name: x\ntask: ar\naxes: {setups: [vanilla], n: [4], task: {n: [8]}}\n",
                         ["axes.task", "'n' is not a parameter of ar", "n and setup have axes of their own"]),
    "task axis also a param": ("name: x\ntask: ar\ntask_params: {keys: 64}\naxes: {setups: [vanilla], n: [4], task: {keys: [16, 64]}}\n",
                               ["axes.task", "keys is also in task_params"]),
    "repeated task axis value": ("name: x\ntask: ar\naxes: {setups: [vanilla], n: [4], task: {keys: [16, 16]}}\n",
                                 ["axes.task", "keys: a list of distinct values"]),
    "invalid task variant": ("name: x\ntask: mqar\naxes: {setups: [vanilla], n: [4, 16], task: {seq_len: [32, 64], vocab: [128]}}\n",
                             ["axes.task", "seq_len (32) must hold the n = 16 pairs", "setup vanilla-seqlen32-vocab128, n 16"]),
    "wrong type": ("name: x\ntraining: {samples: lots}\n", ["training.samples", "integer", "lots"]),
    # Issue 42, class 6: values a trial would have dropped or bent, refused by name as `train` refuses them.
    "dimension an arch lacks": ("name: x\naxes: {archs: [rwkv7], model: {rwkv7: {d_state: [4]}}}\n",
                                ["axes.model.rwkv7", "rwkv7 has no d_state", "its dimensions:", "head_dim"]),
    "dimension of no layer of a transformer": ("name: x\naxes: {archs: [transformer], model: {transformer: {d_state: [4]}}}\n",
                                               ["axes.model.transformer", "transformer has no d_state", "d_model"]),
    "dimension no arch swept has": ("name: x\naxes: {archs: [transformer], model: {d_state: [4, 16]}}\n",
                                    ["axes.model", "no arch swept (transformer) has d_state"]),
    "a boolean for a number": ("name: x\ntask: mqar\naxes: {setups: [vanilla], n: [4], task: {power_a: [true]}}\n",
                               ["axes.task.power_a", "true is a boolean", "float"]),
    "override of an n not swept": ("name: x\naxes: {n: [16, 32]}\ntraining_overrides: [{n: [3], samples: 2048}]\n",
                                   ["training_overrides[0].n", "no setup sweeps n 3", "axes.n: 16, 32"]),
    # Issue 42, class 9: messages that name the field, the value and the fix, without pydantic's class names.
    "a section given as a number": ("name: x\nlr: 1e-3\n", ["lr: a mapping of transformer, mamba", "got '1e-3'",
                                                          "YAML reads 1e-3 as text", "write 1.0e-3"]),
    # Issue 52: 1.0e6 has a point; YAML 1.1 wants the exponent's sign too.
    "a number YAML reads as text for its exponent": ("name: x\nlr: 1.0e6\n", ["YAML reads 1.0e6 as text",
                                                                           "a signed exponent): write 1.0e+6"]),
    "a name no launch can take": ("name: " + "r" * 300 + "\n", ["name", "at most 255 characters"]),
    "a section given as a list": ("name: x\ntracking: [wandb]\n", ["tracking: a mapping of wandb, mlflow, tensorboard",
                                                                  "got ['wandb']"]),
    "a metric offered and then refused": ("name: x\nsearch: {metric: nope}\n",
                                          ["search.metric", "'val_loss'", "nope"]),
    "override of no arch": ("name: x\ntraining_overrides: [{archs: [rwkv], samples: 10}]\n",
                            ["training_overrides[0].archs[0]", "'transformer', 'mamba', 'hybrid'", "rwkv"]),
    "override of no setup": ("name: x\ntraining_overrides: [{setups: [retreival], samples: 10}]\n",
                             ["training_overrides[0].setups: retreival is not a setup of istree (vanilla, cot, retrieval)"]),
    "override that sets nothing": ("name: x\ntraining_overrides: [{setups: [cot]}]\n",
                                   ["training_overrides[0]: sets no training field"]),
    "override of a field not trained": ("name: x\ntraining_overrides: [{setups: [cot], lr: 0.1}]\n",
                                        ["training_overrides[0].lr", "unknown key", "samples, batch_size"]),
    "override with a bad value": ("name: x\ntraining_overrides: [{samples: 0}]\n",
                                  ["training_overrides[0].samples", "greater than 0"]),
    "override below the warm-up": ("name: x\ntraining: {warmup_samples: 500}\naxes: {archs: [mamba], setups: [cot, retrieval]}\n"
                                   "training_overrides: [{setups: [retrieval], samples: 400}]\n",
                                   ["training_overrides: for mamba with retrieval", "warmup_samples (500) must be below samples (400)"]),
    "missing name": ("axes: {n: [8]}\n", ["name", "required"]),
    "distribution without optuna": ("name: x\nlr: {mamba: {distribution: loguniform, low: 1.0e-4, high: 1.0e-3}}\n", ["optuna"]),
    "metric against its direction": ("name: x\nlr: {mamba: {distribution: loguniform, low: 1.0e-4, high: 1.0e-3}}\n"
                                     "search: {method: optuna, metric: val_loss, mode: max}\n",
                                     ["search.mode", "val_loss is better lower", "mode: min"]),
    "generation metric of a task without generation": (
        "name: x\ntask: mqar\naxes: {setups: [vanilla], n: [4]}\n"
        "lr: {mamba: {distribution: loguniform, low: 1.0e-4, high: 1.0e-3}}\n"
        "search: {method: optuna, metric: gen_accuracy}\n", ["mqar has no generation protocol", "val_token_accuracy"]),
    "unknown metric": ("name: x\nsearch: {metric: accuracy}\n", ["search.metric", "val_exact_match", "val_token_accuracy"]),
    "optuna storage without optuna": ("name: x\nsearch: {storage: 'sqlite:////tmp/o.db'}\n",
                                      ["search.storage keeps Optuna's studies", "method: optuna"]),
    "optuna storage not a URL": ("name: x\nlr: {mamba: {distribution: loguniform, low: 1.0e-4, high: 1.0e-3}}\n"
                                 "search: {method: optuna, storage: optuna.db}\n", ["search.storage", "optuna.db", "pattern"]),
    "bad size": ("name: x\naxes: {sizes: [3M]}\n", ["axes.sizes[0]", "'tiny', '0.5M', '1M' or '2M'"]),
    "yaml syntax": ("name: x\naxes: [unclosed\n", ["not valid YAML"]),
    "not a mapping": ("- just\n- a list\n", ["must be a mapping"]),
}


@pytest.mark.parametrize("case", list(BAD_SPECS))
def test_bad_specs_are_refused_with_path_value_and_allowed_values(case, tmp_path):
    text, fragments = BAD_SPECS[case]
    path = tmp_path / "spec.yaml"
    path.write_text(text)
    with pytest.raises(SpecError) as err:
        load_spec(path)
    assert "instance of" not in str(err.value) and "test_exact_match'" not in str(err.value), str(err.value)
    for fragment in fragments:
        assert fragment in str(err.value), (fragment, str(err.value))
    assert str(path) in str(err.value)
    result = runner.invoke(app, ["validate", str(path)])
    assert result.exit_code != 0 and fragments[0] in result.output


@pytest.mark.parametrize("content, fragment", [
    (b"name: x\n\xff\xfeaxes: {}\n", "not UTF-8 text (byte 8)"),
    (b"name: x\x00\x01\x02", "a binary file"),
    (b"name: x\n" + b"# padding\n" * 200_000, "is not a spec"),
])
def test_files_that_are_not_specs_are_refused_without_reading_them_as_yaml(content, fragment, tmp_path):
    path = tmp_path / "spec.yaml"
    path.write_bytes(content)
    result = runner.invoke(app, ["validate", str(path)])
    assert result.exit_code == 2 and fragment in result.output and str(path) in result.output


def test_an_alias_bomb_is_refused_at_once(tmp_path):
    # 30 levels of doubling: 2^30 leaves once expanded, which validation would walk.
    lines = ["a0: &a0 [x, x]"] + [f"a{i}: &a{i} [*a{i - 1}, *a{i - 1}]" for i in range(1, 30)] + ["name: x"]
    path = tmp_path / "bomb.yaml"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(SpecError, match="aliases"):
        load_spec(path)


def test_an_implausible_trial_count_is_warned_about(tmp_path):
    path = tmp_path / "big.yaml"
    path.write_text("name: big\naxes: {seeds: [" + ", ".join(map(str, range(100))) + "]}\n")
    result = runner.invoke(app, ["validate", str(path)])
    assert result.exit_code == 0
    assert "warning: the spec expands to 8,100 trials" in result.output
    assert load_spec(path).trial_count() == len(expand(load_spec(path))) == 8100


def test_launch_refuses_a_bad_spec_before_starting_anything(tmp_path):
    spec = yaml.safe_load((SWEEPS / "istree_micro.yaml").read_text())
    spec["axes"]["n"] = [2]
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(spec))
    storage = tmp_path / "runs"
    result = runner.invoke(app, ["launch", str(path), "--storage", str(storage)])
    assert result.exit_code == 2 and "axes.n" in result.output
    assert not storage.exists()


def test_a_missing_spec_file_is_named():
    result = runner.invoke(app, ["validate", "no/such/spec.yaml"])
    assert result.exit_code != 0 and "no/such/spec.yaml: no such spec file" in result.output


def test_plan_gives_each_trial_its_memory_estimate_and_auto_gpu_share():
    result = runner.invoke(app, ["plan", str(SWEEPS / "istree_grid.yaml"), "--format", "json", "--device-name", "NVIDIA A100-SXM4-40GB"])
    assert result.exit_code == 0, result.output
    rows = {r["name"]: r for r in json.loads(result.output)}
    spec = load_spec(SWEEPS / "istree_grid.yaml")
    room = gpu_memory_gb(spec.resources) * 0.9
    for r in rows.values():
        assert r["gpus"] in (0.125, 0.25, 0.5, 1.0)
        assert r["gpu_mem_gb"] <= r["gpus"] * room + 0.05  # fits its share (the estimate is rounded to 0.1)
        if r["gpus"] > 0.125:
            assert r["gpu_mem_gb"] > r["gpus"] / 2 * room - 0.05  # ... and the next smaller share would not do
    # Retrieval at n=64 is the one that needs a whole GPU; short vanilla trials pack 8 to a GPU.
    assert rows["mamba-retrieval-2M-n64-lr3e-4-s0"]["gpus"] == 1.0
    assert rows["transformer-vanilla-0.5M-n16-lr1e-3-s0"]["gpus"] == 0.125
    for setup in ("vanilla", "cot", "retrieval"):
        by_n = [rows[f"mamba-{setup}-1M-n{n}-lr3e-4-s0"]["gpu_mem_gb"] for n in (16, 32, 64)]
        assert by_n == sorted(by_n)


@pytest.fixture
def gpus_here(tmp_path, monkeypatch):
    """This machine's GPUs as nvidia-smi lists them: set(names and MiB) puts a stand-in
    nvidia-smi first on PATH (set() none at all)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}" if shutil.which("nvidia-smi") is None
                       else str(bin_dir))

    def put(gpus: dict[str, int]):
        local_gpu_memory_gb.cache_clear()
        smi = bin_dir / "nvidia-smi"
        smi.unlink(missing_ok=True)
        if gpus:
            names, mib = "\\n".join(gpus), "\\n".join(map(str, gpus.values()))
            answers = f'*memory.total*) printf "{mib}\\n";; *) printf "{names}\\n";;'
            smi.write_text(f'#!/bin/sh\ncase "$*" in {answers} esac\n')
            smi.chmod(0o755)

    yield put
    local_gpu_memory_gb.cache_clear()


def test_gpu_memory_auto_packs_trials_against_this_machines_gpu(gpus_here):
    """The shipped grid's `gpu_memory_gb: auto`: the smallest local GPU's memory
    (an 80 GB H100 beside a 141 GB H200 here), so Mamba 2M at retrieval n=64
    (about 33 GB) takes half of one, where on 40 GB it takes all; none here: 40."""
    spec = load_spec(SWEEPS / "istree_grid.yaml")
    assert spec.resources.gpu_memory_gb == "auto"
    gpus_here({"NVIDIA H200": 143771, "NVIDIA H100 80GB HBM3": 81559})
    assert gpu_memory_gb(spec.resources) == pytest.approx(81559 / 1024)
    result = runner.invoke(app, ["plan", str(SWEEPS / "istree_grid.yaml"), "--format", "json"])
    assert result.exit_code == 0, result.output
    assert {r["name"]: r["gpus"] for r in json.loads(result.output)}["mamba-retrieval-2M-n64-lr3e-4-s0"] == 0.5
    assert "against 80 GB GPUs (resources.gpu_memory_gb: auto, this machine's GPU)" in runner.invoke(
        app, ["plan", str(SWEEPS / "istree_grid.yaml")]).output
    gpus_here({})
    assert gpu_memory_gb(spec.resources) == 40.0
    said = runner.invoke(app, ["plan", str(SWEEPS / "istree_grid.yaml"), "--device-name", "NVIDIA A100-SXM4-40GB"])
    assert "against 40 GB GPUs (resources.gpu_memory_gb: auto, and this machine has no GPU)" in said.output


def test_plan_warns_of_trials_that_would_not_fit_their_gpu_share(tmp_path):
    spec = yaml.safe_load((SWEEPS / "istree_grid.yaml").read_text())
    spec["resources"]["gpus_per_trial"] = 0.25
    path = tmp_path / "packed.yaml"
    path.write_text(yaml.safe_dump(spec))
    result = runner.invoke(app, ["plan", str(path), "--device-name", "NVIDIA A100-SXM4-40GB"])
    assert result.exit_code == 0
    warned = [line for line in result.output.splitlines() if line.startswith("warning:")]
    rows = json.loads(runner.invoke(app, ["plan", str(path), "--format", "json", "--device-name", "NVIDIA A100-SXM4-40GB"]).output)
    too_big = [r["name"] for r in rows if r["gpu_mem_gb"] > 0.25 * 40 * 0.9]
    assert too_big and len(warned) == len(too_big)
    assert all(any(name in line for line in warned) for name in too_big)
    assert "more than its 0.25 of a 40 GB GPU (10.0 GB)" in warned[0] and "raise resources.gpus_per_trial" in warned[0]
    spec["resources"]["device"] = "cpu"  # CPU trials: no GPU figures, no warnings
    path.write_text(yaml.safe_dump(spec))
    result = runner.invoke(app, ["plan", str(path), "--device-name", "NVIDIA A100-SXM4-40GB"])
    assert "warning" not in result.output and "gpu_mem_gb" not in result.output


def test_plan_shows_what_a_trial_gets_on_the_machine_that_runs_it(monkeypatch):
    # Issue 44: on a CPU-only machine plan showed a GPU share of 1.0 for every trial
    # of a device-auto spec, which launch there runs on CPU.
    from orchestrator.cli import plan as plan_cli

    monkeypatch.setattr(plan_cli, "local_gpus", lambda: [])
    result = runner.invoke(app, ["plan", str(SWEEPS / "istree_micro.yaml")])
    assert result.exit_code == 0, result.output
    assert "gpus" not in result.output.split("\n")[1] and "cpus" in result.output.split("\n")[1]
    assert "device auto, and this machine has no GPU: each trial runs on CPU with 1 CPU(s)" in result.output
    rows = json.loads(runner.invoke(app, ["plan", str(SWEEPS / "istree_micro.yaml"), "--format", "json"]).output)
    assert all(r["cpus"] == 1 and "gpus" not in r for r in rows)


def test_a_spec_sweeps_any_registered_task_with_its_parameters(tmp_path):
    path = tmp_path / "ar.yaml"
    path.write_text("name: x\ntask: ar\naxes: {archs: [mamba], setups: [vanilla], sizes: [tiny], n: [8, 16]}\n")
    result = runner.invoke(app, ["plan", str(path), "--format", "json"])
    assert result.exit_code == 0, result.output
    assert [(r["task"], r["n"]) for r in json.loads(result.output)] == [("ar", 8), ("ar", 16)]
    spec = SweepSpec(name="x", task="ar", task_params={"keys": 64, "values": 32},
                     axes=dict(archs=["mamba"], setups=["vanilla", "retrieval"], sizes=["tiny"], n=[8, 32]))
    trials = expand(spec)
    assert len(trials) == 4
    for t in trials:
        assert t.task.name == "ar" and t.task.keys == 64 and t.task.values == 32
        assert t.name.startswith("ar-mamba-") and f"-n{t.task.n}-" in t.name
    assert {(t.task.setup, t.task.n) for t in trials} == {(s, n) for s in ("vanilla", "retrieval") for n in (8, 32)}


def test_newer_rnns_sweep_with_their_own_dimensions_and_learning_rates():
    """Architectures are names: the newer RNNs and their hybrids take learning
    rates and their mixers' dimensions in a spec like the paper's three."""
    spec = SweepSpec(name="x", task="ar", lr={"gated_deltanet": [1e-3, 3e-3]},
                     axes=dict(archs=["gated_deltanet", "mamba2_hybrid"], setups=["vanilla"], sizes=["tiny"], n=[8],
                               model={"heads": [1, 2], "d_state": [8]}))
    trials = expand(spec)
    assert len(trials) == spec.trial_count() == 2 * 2 + 1
    gdn = {(t.model.size, t.train.lr): t.model for t in trials if t.model.arch == "gated_deltanet"}
    assert set(gdn) == {(f"tiny-heads{h}", lr) for h in (1, 2) for lr in (1e-3, 3e-3)}  # d_state is not its
    assert gdn["tiny-heads2", 1e-3].mixer.heads == 2 and gdn["tiny-heads2", 1e-3].state_floats > gdn["tiny-heads1", 1e-3].state_floats
    (hybrid,) = [t for t in trials if t.model.arch == "mamba2_hybrid"]
    assert hybrid.model.size == "tiny-dstate8" and hybrid.model.mixer.d_state == 8 and hybrid.train.lr == 3e-4
    assert hybrid.model.layers[-1] == "attention" and hybrid.model.n_heads == preset("mamba2_hybrid", "tiny").n_heads


def test_model_dimensions_are_axes_beyond_the_presets():
    from orchestrator.grid import cell_model
    from orchestrator.report import frontier

    spec = SweepSpec(name="x", task="ar", axes=dict(archs=["mamba", "hybrid", "transformer"], setups=["vanilla"],
                                                   sizes=["tiny"], n=[8], model={"d_state": [4, 32], "n_layers": [2, 4]}))
    trials = expand(spec)
    # d_state is Mamba's: the Transformer is swept over n_layers alone, not trained twice per d_state
    assert len(trials) == spec.trial_count() == 2 * 2 * 2 + 2
    assert {t.model.size for t in trials if t.model.arch == "transformer"} == {"tiny-nlayers2", "tiny-nlayers4"}
    mamba = {t.model.size: t.model for t in trials if t.model.arch == "mamba"}
    assert set(mamba) == {"tiny-dstate4-nlayers2", "tiny-dstate4-nlayers4", "tiny-dstate32-nlayers2", "tiny-dstate32-nlayers4"}
    small, big = mamba["tiny-dstate4-nlayers2"], mamba["tiny-dstate32-nlayers2"]
    assert (small.mixer.d_state, big.mixer.d_state, small.d_model) == (4, 32, preset("mamba", "tiny").d_model)
    assert small.state_floats < big.state_floats
    hybrids = [t.model for t in trials if t.model.arch == "hybrid"]
    assert all(m.attn_layer_idx == (m.n_layers - 1,) for m in hybrids)  # the attention layer stays on top
    assert all(m.attn_layer_idx == tuple(range(m.n_layers)) for t in trials if (m := t.model).arch == "transformer")
    assert "ar-mamba-vanilla-tiny-dstate4-nlayers2-n8-" in " ".join(t.name for t in trials)
    best = pd.DataFrame([dict(setup="vanilla", arch="mamba", size=label, n=8, val_exact_match=1.0) for label in mamba])
    table = frontier(best, model_of=lambda arch, size: cell_model(spec, arch, size)).set_index("size")
    assert table.loc["tiny-dstate32-nlayers4", "state_floats"] == mamba["tiny-dstate32-nlayers4"].state_floats


def test_task_parameters_are_axes_with_setups_of_their_own(tmp_path):
    from orchestrator.report import best_by_cell
    from orchestrator.rundir import load_trials

    spec = SweepSpec(name="x", task="mqar", task_params={"vocab": 256},
                     axes=dict(archs=["transformer"], setups=["vanilla"], sizes=["tiny"], n=[4, 8],
                               task={"seq_len": [32, 64], "power_a": [0.01, 1.0]}))
    trials = expand(spec)
    assert len(trials) == spec.trial_count() == 2 * 2 * 2
    assert {(t.task.seq_len, t.task.power_a, t.task.n) for t in trials} == {
        (length, a, n) for length in (32, 64) for a in (0.01, 1.0) for n in (4, 8)}
    assert all(t.task.vocab == 256 and t.task.setup == "vanilla" for t in trials)
    labels = {t.setup for t in trials}
    assert labels == {f"vanilla-seqlen{length}-powera{a}" for length in (32, 64) for a in (0.01, 1.0)}
    assert len({t.name for t in trials}) == len(trials)
    assert "mqar-transformer-vanilla-seqlen32-powera0.01-tiny-n4-" in " ".join(t.name for t in trials)
    # the report tells the variants apart, as the names do: each its own setup
    for t in trials:
        trial_dir = tmp_path / t.name
        trial_dir.mkdir()
        (trial_dir / "params.json").write_text(json.dumps({"trial": t.model_dump(mode="json")}))
        score = 1.0 if t.task.seq_len == 32 else 0.0
        (trial_dir / "result.json").write_text(json.dumps(dict(samples=1, val_exact_match=score, final_eval=True)) + "\n")
    best = best_by_cell(load_trials(tmp_path))
    assert set(best["setup"]) == labels and len(best) == len(trials)
    assert (best[best["setup"].str.contains("seqlen32")]["val_exact_match"] == 1.0).all()
    assert (best[best["setup"].str.contains("seqlen64")]["val_exact_match"] == 0.0).all()


def test_a_checkpoint_from_before_a_new_config_field_still_resumes(tmp_path):
    import torch

    from workloads.train import Checkpoints, Hooks, run_trial

    spec = SweepSpec(name="x", task="ar", task_params={"keys": 8, "values": 8},
                     axes=dict(archs=["transformer"], setups=["vanilla"], sizes=["tiny"], n=[2]),
                     training=dict(samples=64, batch_size=16, eval_every=32, val_samples=16, warmup_samples=0))
    trial = expand(spec)[0]
    run_trial(trial, Hooks(stop_after=32), Checkpoints(dir=tmp_path))
    state = torch.load(tmp_path / "checkpoint.pt", weights_only=False)
    state["config"].pop("task_label")  # as written before these fields existed
    state["config"]["train"].pop("precision")
    torch.save(state, tmp_path / "checkpoint.pt")
    assert run_trial(trial, Hooks(), Checkpoints(dir=tmp_path, resume_from=tmp_path))["samples"] == 64


def test_model_axes_per_arch_vary_only_that_arch():
    spec = SweepSpec(name="x", task="mqar", task_params={"vocab": 64, "seq_len": 32},
                     axes=dict(archs=["transformer", "mamba", "hybrid"], setups=["vanilla"], sizes=["tiny"], n=[2, 4],
                               model={"transformer": {"d_model": [64]}, "mamba": {"d_state": [1, 16]}}))
    trials = expand(spec)
    assert len(trials) == spec.trial_count() == 2 * (1 + 2 + 1)
    sizes = {(t.model.arch, t.model.size) for t in trials}
    assert sizes == {("transformer", "tiny-dmodel64"), ("mamba", "tiny-dstate1"), ("mamba", "tiny-dstate16"),
                     ("hybrid", "tiny")}
    by_size = {t.model.size: t.model for t in trials}
    assert by_size["tiny-dmodel64"].d_model == 64 and by_size["tiny"].mixer.d_state == preset("hybrid", "tiny").mixer.d_state
    assert by_size["tiny-dstate1"].state_floats < by_size["tiny-dstate16"].state_floats


def test_an_arch_can_list_its_models_one_by_one_instead_of_crossing_dimensions():
    # The laptop's state ablation: the tiny Mamba beside one with a 3.6x smaller state and
    # as many parameters (d_state 1 with a fourth layer), not the 2 x 2 crossing.
    spec = SweepSpec(name="x", axes=dict(archs=["transformer", "mamba"], setups=["cot"], sizes=["tiny"], n=[4, 6],
                                         model={"mamba": [{}, {"d_state": 1, "n_layers": 4}]}))
    trials = expand(spec)
    assert len(trials) == spec.trial_count() == 2 * 3
    models = {t.model.size: t.model for t in trials}
    assert set(models) == {"tiny", "tiny-dstate1-nlayers4"}  # the transformer's and the preset Mamba's "tiny"
    small = models["tiny-dstate1-nlayers4"]
    assert small.mixer.d_state == 1 and small.n_layers == 4 and small.arch == "mamba"
    assert preset("mamba", "tiny").state_floats >= 3 * small.state_floats
    assert 1 / 1.2 <= small.n_params / preset("mamba", "tiny").n_params <= 1.2


def test_a_model_option_is_listed_like_a_dimension_and_names_its_trials():
    # Issue 62: Mamba and Mamba-2 with the mimetic initialisation beside their presets.
    model = {"mamba": [{}, {"init": "mimetic"}], "mamba2": {"init": ["mimetic"]}}
    spec = SweepSpec(name="x", axes=dict(archs=["transformer", "mamba", "mamba2"], setups=["cot"], sizes=["tiny"],
                                         n=[4], model=model))
    trials = expand(spec)
    by_name = {t.name: t.model for t in trials}
    assert set(by_name) == {"transformer-cot-tiny-n4-lr1e-3-s0", "mamba-cot-tiny-n4-lr3e-4-s0",
                            "mamba-cot-tiny-initmimetic-n4-lr3e-4-s0", "mamba2-cot-tiny-initmimetic-n4-lr3e-4-s0"}
    mimetic = by_name["mamba-cot-tiny-initmimetic-n4-lr3e-4-s0"]
    assert mimetic.mixer.init == "mimetic" and by_name["mamba-cot-tiny-n4-lr3e-4-s0"].mixer.init == "default"
    assert mimetic.with_fields(init="default", size="tiny") == preset("mamba", "tiny")  # nothing else differs
    assert mimetic.n_params == preset("mamba", "tiny").n_params


def test_the_capacity_or_training_spec_plans_what_its_comments_say():
    # Issue 62: three Mambas of the Transformer's size (1.2x), one with mimetic init and one
    # with a 3.6x smaller state, each over three rates on two seeds.
    path = Path(__file__).parents[2] / "sweeps" / "capacity_or_training_cpu.yaml"
    trials = expand(load_spec(path))
    assert f"{len(trials)} trials;" in path.read_text() and len(trials) == 48
    models = {t.model.size: t.model for t in trials if t.model.arch == "mamba"}
    assert set(models) == {"tiny", "tiny-initmimetic", "tiny-dstate1-nlayers4"}
    transformer = preset("transformer", "tiny")
    assert all(1 / 1.2 <= m.n_params / transformer.n_params <= 1.2 for m in models.values())
    assert models["tiny"].state_floats >= 3.5 * models["tiny-dstate1-nlayers4"].state_floats
    assert {(t.model.size, t.train.lr) for t in trials} >= {(s, lr) for s in models for lr in (1e-3, 3e-3, 1e-2)}


def test_the_frontier_spec_plans_what_its_comments_say():
    spec = load_spec(Path(__file__).parents[2] / "sweeps" / "retrieval_frontier_cpu.yaml")
    trials = expand(spec)
    text = (Path(__file__).parents[2] / "sweeps" / "retrieval_frontier_cpu.yaml").read_text()
    assert f"{len(trials)} trials, {spec.training.samples // 1000}k samples each" in text
    states = sorted({t.model.state_floats for t in trials if t.model.arch == "mamba"})
    assert f"{states[0]} and {states[1]:,} floats of state" in text


def test_every_registered_metric_can_pick_the_learning_rates_except_a_held_out_one():
    for name, metric in METRICS.items():
        search = dict(method="optuna", metric=name, mode=metric.mode)
        if metric.held_out:  # measured on the set the robust score reports: no rate may be chosen on it
            with pytest.raises(ValidationError, match=f"{name} is measured on the held-out set"):
                SweepSpec(name="x", lr=dict(mamba=dict(distribution="loguniform", low=1e-4, high=1e-3)), search=search)
            continue
        spec = SweepSpec(name="x", lr=dict(mamba=dict(distribution="loguniform", low=1e-4, high=1e-3)), search=search)
        assert spec.search.metric == name  # val_token_accuracy among them (it once could not be chosen)
    assert any(metric.held_out for metric in METRICS.values())


def test_a_stored_spec_that_no_longer_validates_names_its_field(tmp_path):
    # Issue 42, class 9: "damaged (ValidationError: 1 validation error for SweepSpec)".
    from orchestrator.rundir import SPEC_FILE
    from orchestrator.spec import run_spec

    stored = SweepSpec(name="old").model_dump(mode="json")
    stored["axes"]["colour"] = "red"
    (tmp_path / SPEC_FILE).write_text(json.dumps({"spec": stored}))
    with pytest.raises(SpecError, match=r"is damaged \(axes.colour: unknown key; allowed keys: archs, setups"):
        run_spec(tmp_path)


def test_a_run_stored_when_axes_held_the_family_still_loads(tmp_path):
    # Specs stored while axes.family was a field (before 2026-11-26) hold it, and
    # those stored before it defaulted to the task's own hold family: binary for
    # tasks without graphs too; resume and report read them as they ran.
    from orchestrator.rundir import SPEC_FILE
    from orchestrator.spec import run_spec

    for task, n, family in (("ar", 8, "binary"), ("istree", 6, "binary"), ("istree", 6, "random")):
        spec = SweepSpec(name="old", task=task, axes=dict(setups=["vanilla"], n=[n], sizes=["tiny"], archs=["mamba"]),
                         task_params={"family": family} if task == "istree" else {})
        stored = spec.model_dump(mode="json")
        stored["axes"]["family"] = stored["task_params"].pop("family", family)
        run = tmp_path / f"{task}-{family}"
        run.mkdir()
        (run / SPEC_FILE).write_text(json.dumps({"spec": stored}))
        loaded = run_spec(run)
        assert [(t.name, t.task) for t in expand(loaded)] == [(t.name, t.task) for t in expand(spec)]
        assert loaded.task_params.get("family") == (family if task == "istree" else None) and "family" not in loaded.axes
    path = tmp_path / "new.yaml"  # a spec written today: axes.family is refused, saying where the field goes
    path.write_text("name: x\ntask: istree\naxes: {setups: [cot], n: [6], family: binary}\n")
    with pytest.raises(SpecError, match=r"axes.family: unknown key.*give it as task_params.family"):
        load_spec(path)


def _written(tmp_path, spec: dict) -> str:
    path = tmp_path / f"{spec['name']}.yaml"
    path.write_text(yaml.safe_dump(spec))
    return str(path)


def test_a_family_in_task_params_is_one_field_like_the_rest(tmp_path):
    """`task_params: {family: random}` reaches every trial and plan's family column
    (issue 28, class 4: every command crashed with TypeError)."""
    spec = dict(name="fam", task="istree", task_params=dict(family="random"),
                axes=dict(archs=["mamba"], setups=["cot"], sizes=["tiny"], n=[5], seeds=[0]))
    path = _written(tmp_path, spec)
    assert runner.invoke(app, ["validate", path]).exit_code == 0
    assert {t.task.family for t in expand(load_spec(path))} == {"random"}
    plan = runner.invoke(app, ["plan", path, "--format", "json"])
    assert plan.exit_code == 0, plan.output
    assert {row["family"] for row in json.loads(plan.output)} == {"random"}


def test_plan_of_an_optuna_spec_with_an_arch_at_a_fixed_rate(tmp_path):
    """One arch searched, another at fixed rates: plan lists the fixed arch's cells
    with their rates and one trial each (issue 28, class 4: AttributeError)."""
    spec = dict(name="mixed", axes=dict(archs=["transformer", "mamba"], setups=["cot"], sizes=["tiny"], n=[5], seeds=[0]),
                lr=dict(transformer=1.0e-3, mamba=dict(distribution="loguniform", low=1.0e-3, high=1.0e-2)),
                search=dict(method="optuna", num_samples=3), training=dict(samples=1000, warmup_samples=10))
    result = runner.invoke(app, ["plan", _written(tmp_path, spec), "--format", "json"])
    assert result.exit_code == 0, result.output
    rows = {row["arch"]: row for row in json.loads(result.output)}
    assert (rows["transformer"]["lr"], rows["transformer"]["trials"]) == ("0.001", 1)
    assert (rows["mamba"]["lr"], rows["mamba"]["trials"]) == ("loguniform(0.001, 0.01)", 3)
    table = runner.invoke(app, ["plan", _written(tmp_path, spec)])
    assert table.exit_code == 0 and "4 trials" in table.output, table.output


def test_a_spec_with_trackers_at_their_defaults_validates_again_from_its_dump():
    """A spec is stored and read back (launch --storage re-validates its dump): an
    MLflow section at its defaults holds tracking_uri None, which must stay valid."""
    spec = SweepSpec(name="t", tracking=dict(mlflow={}, wandb=dict(project="p")))
    assert SweepSpec.model_validate(spec.model_dump()) == spec


def test_a_tie_break_that_is_the_metric_itself_is_refused_and_the_default_follows_the_metric():
    base = dict(name="x", lr=dict(mamba=dict(distribution="loguniform", low=1e-4, high=1e-3)))
    with pytest.raises(ValidationError, match=r"search.tie_break: val_exact_match is search.metric already.*val_loss"):
        SweepSpec(**base, search=dict(method="optuna", tie_break="val_exact_match"))
    assert SweepSpec(**base, search=dict(method="optuna")).search.ties_by == "val_loss"
    assert SweepSpec(**base, search=dict(method="optuna", metric="val_loss", mode="min")).search.ties_by == "val_exact_match"
    assert SweepSpec(**base, search=dict(method="optuna", tie_break="val_token_accuracy")).search.ties_by == "val_token_accuracy"


@pytest.mark.parametrize("task", ["istree", "ar", "mqar"])
def test_a_spec_naming_no_setups_sweeps_every_setup_of_its_task(task):
    from workloads.tasks import TASKS

    spec = SweepSpec(name="d", task=task, axes=dict(archs=["transformer"], sizes=["tiny"], n=[8]),
                     training=dict(samples=100, warmup_samples=10, eval_every=100))
    assert spec.axes.setups == list(TASKS[task][0].setups())
    assert {t.task.setup for t in expand(spec)} == set(TASKS[task][0].setups())


def test_a_spec_with_no_axes_at_all_takes_the_papers_setups():
    assert SweepSpec(name="d").axes.setups == ["vanilla", "cot", "retrieval"]


def test_the_graph_family_is_a_task_field_swept_like_the_others(tmp_path):
    """Issue 31: IsTree's family goes through the generic task axis: axes.task sweeps
    it (a setup label per family, as any task field), task_params sets it for every
    trial, and either is refused naming the field when given twice or with a value
    the task does not have. axes.family (issue 43: retired) says where it goes."""
    base = dict(name="fam", axes=dict(archs=["mamba"], setups=["cot"], sizes=["tiny"], n=[6], seeds=[0]))
    swept = load_spec(_written(tmp_path, {**base, "axes": {**base["axes"], "task": {"family": ["binary", "random"]}}}))
    assert [(t.name, t.task.family) for t in expand(swept)] == [
        ("mamba-cot-familybinary-tiny-n6-lr3e-4-s0", "binary"), ("mamba-cot-familyrandom-tiny-n6-lr3e-4-s0", "random")]
    plan = runner.invoke(app, ["plan", _written(tmp_path, swept.model_dump(mode="json")), "--format", "json"])
    assert [row["family"] for row in json.loads(plan.output)] == ["binary", "random"]
    for given, said in (({"task_params": {"family": "random"}, "axes": {**base["axes"], "task": {"family": ["binary"]}}},
                         "axes.task: family is also in task_params; give it in one place"),
                        ({"task_params": {"family": "tree"}}, "task_params: family: Input should be 'binary' or 'random'"),
                        ({"axes": {**base["axes"], "family": "random"}},
                         "axes.family: unknown key; allowed keys: archs, setups, sizes, n, seeds, model, task; family is "
                         "a task field (istree): give it as task_params.family for every trial")):
        result = runner.invoke(app, ["validate", _written(tmp_path, {**base, **given})])
        assert result.exit_code == 2 and said in result.output, result.output


def test_a_spec_nested_hundreds_deep_is_named_not_a_traceback(tmp_path):
    """Issue 52, class 10: a 1.8 KB spec nesting 900 lists printed a 998-frame
    RecursionError from `validate`."""
    path = tmp_path / "deep.yaml"
    path.write_text("name: deep\naxes:\n  n: " + "[" * 900 + "4" + "]" * 900 + "\n")
    result = CliRunner().invoke(app, ["validate", str(path)])
    assert result.exit_code == 2 and "nested hundreds deep" in result.output and "Traceback" not in result.output


def _leaves(data, path=()):
    """(path, value) of every number in a spec's data."""
    if isinstance(data, dict):
        for key, value in data.items():
            yield from _leaves(value, (*path, key))
    elif isinstance(data, list):
        for i, value in enumerate(data):
            yield from _leaves(value, (*path, i))
    elif isinstance(data, (int, float)) and not isinstance(data, bool):
        yield path, data


EXTREMES = dict(
    base=dict(name="edge", axes=dict(archs=["transformer"], setups=["cot"], sizes=["tiny"], n=[5], seeds=[0]),
              lr=dict(transformer=3e-3), training=dict(samples=2048, batch_size=32, warmup_samples=256, eval_every=1024,
                                                       val_samples=64, eval_batch_size=64, grad_clip=1.0,
                                                       checkpoint_every_s=60.0, length_groups=4, val_seed=1234),
              resources=dict(cpus_per_trial=1, max_failures=1, max_concurrent=2, gpu_memory_gb=40.0)),
    # each integer past int64 and past 2^53, each float past float32's range, and the largest values kept
    ints=(10**26, 2**64, 2**63, 2**53, 2**63 - 1), floats=(1e300, 3.4e37))


def _what_launch_does_before_and_at_a_trials_first_steps(spec: SweepSpec, tmp_path) -> str:
    """The launch's own checks and a trial's start as launch runs them (Ray aside):
    the plan, its work, the memory and model checks (a refusal naming the trial is
    an answer), TensorBoard's HParams of the trials, and a trial's first two steps."""
    from orchestrator.grid import plan, planned_work, shape_trials
    from orchestrator.trackers.common import swept_fields
    from orchestrator.trackers.tensorboard import TensorBoard, hparams_of
    from workloads.preflight import check_models, cpu_memory_problems
    from workloads.train import Checkpoints, Hooks, run_trial

    plan(spec)
    planned_work(spec)
    trials = shape_trials(spec)
    problems = cpu_memory_problems(trials, 1)[0] or check_models(trials)
    if problems:
        return f"refused at launch: {problems[0]}"
    TensorBoard(swept_fields(spec), hparams_of(spec)).write_experiment(str(tmp_path))
    run_trial(trials[0], Hooks(stop_after=2 * trials[0].train.batch_size), Checkpoints(dir=tmp_path / "checkpoint"))
    return "ran"


def test_whatever_validate_accepts_launch_can_run_or_refuses_naming_the_trial(tmp_path):
    """Issue 83, class 8: `samples: 1e26` validated and the launch failed with a
    TypeError (TensorBoard's HParams); `lr: 1e300` validated and every try of the
    trial failed (a float32 overflow) with "retry" advice. Every number of a spec at
    an extreme value is refused by validate naming its field, or launch's own work
    before and at a trial's first steps runs with it."""
    base = EXTREMES["base"]
    outcomes = {}
    for path, value in _leaves(base):
        for extreme in EXTREMES["ints"] if isinstance(value, int) else EXTREMES["floats"]:
            data = json.loads(json.dumps(base))
            node = data
            for key in path[:-1]:
                node = node[key]
            node[path[-1]] = extreme
            where = ".".join(map(str, path))
            try:
                spec = SweepSpec.model_validate(data)
            except ValidationError as e:
                said = str(e)
                field = ".".join(map(str, path[:-1] if isinstance(path[-1], int) else path))
                assert field in said or where in said or said.count("\n") and path[0] in said, (where, said)
                outcomes[where, extreme] = "refused"
                continue
            run = tmp_path / f"{where}-{extreme!r}"
            run.mkdir()
            outcomes[where, extreme] = _what_launch_does_before_and_at_a_trials_first_steps(spec, run)
    assert outcomes["training.samples", 10**26] == outcomes["lr.transformer", 1e300] == "refused"
    assert outcomes["training.samples", 2**53] == outcomes["lr.transformer", 3.4e37] == "ran"


def test_validate_and_plan_say_the_rate_of_each_architecture_lr_leaves_out(tmp_path):
    # Issue 79: a mixer missing from `lr:` ran at a default nothing printed (a new mixer at 1e-3 beside Mamba's 3e-3).
    from typer.testing import CliRunner

    from orchestrator.cli import app

    spec = {"name": "rates", "axes": {"archs": ["transformer", "mamba", "mamba2"], "setups": ["cot"], "sizes": ["tiny"],
                                      "n": [5], "seeds": [0]}, "lr": {"transformer": 3.0e-3}}
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(spec))
    for command in ("validate", "plan"):
        out = CliRunner().invoke(app, [command, str(tmp_path / "s.yaml")]).output
        line = next(x for x in out.splitlines() if x.startswith("lr: not given for "))
        assert "mamba at 3e-4 (the paper's rule" in line and "mamba2 at 3e-4 (its mixer's own default" in line, out
        assert "transformer" not in line, line  # given: said nowhere
    spec["lr"] = {"transformer": 3.0e-3, "mamba": 1e-3, "mamba2": 1e-3}
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(spec))
    assert "lr: not given" not in CliRunner().invoke(app, ["validate", str(tmp_path / "s.yaml")]).output


def test_the_levers_take_a_bare_on_and_off_as_yaml_writes_them_and_name_a_bad_value(tmp_path):
    """YAML 1.1 reads `on` and `off` as booleans: the levers take them as the words;
    any other value is named with the field and the three allowed."""
    path = tmp_path / "levers.yaml"
    data = yaml.safe_load((SWEEPS / "istree_micro.yaml").read_text())
    data["training"]["cuda_graphs"] = True  # what `cuda_graphs: on` reads as
    data["resources"]["mps"] = False  # `mps: off`
    path.write_text(yaml.safe_dump(data))
    loaded = load_spec(path)
    assert (loaded.training.cuda_graphs, loaded.resources.mps) == ("on", "off")
    assert {t.train.cuda_graphs for t in expand(loaded)} == {"on"}
    data["training"]["cuda_graphs"] = "sometimes"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(SpecError, match=r"training\.cuda_graphs: Input should be 'auto', 'on' or 'off' \(got 'sometimes'\)"):
        load_spec(path)
