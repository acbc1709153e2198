"""The loop of a trial array (workloads/array_train.py, issue 50): each member is its
trial, exactly. Its rows are its lone trial's (at the same samples, within fp32
rounding), its checkpoint is the lone trial's file (a member continues as a lone
trial and lone trials as an array), a stopped and resumed array ends where a
straight one does, and a member whose loss is not finite fails alone, with its
lone trial's error, while the others train on unchanged."""

import dataclasses
import math
import shutil

import pytest
import torch

from tests.workloads.test_train import FakeClock
from workloads.array_train import ArrayHooks, run_array
from workloads.checkpoint import CHECKPOINT_FILE, CheckpointError
from workloads.config import trial_config
from workloads.tasks import IsTreeConfig
from workloads.train import Checkpoints, Hooks, NonFiniteLoss, run_trial

RATES, SEEDS = (3e-3, 1e-3, 5e-3), (0, 1, 2)
FIGURES = ("train_loss", "val_loss", "val_exact_match", "test_exact_match")


def _configs(arch="transformer", rates=RATES, **train):
    """Tiny members whose checkpoint interval (2.5 s; the fake clock reads 1 s a
    step) falls between evaluations; one pass per batch on both sides (see
    test_arrays._configs)."""
    protocol = dict(samples=384, batch_size=16, warmup_samples=32, eval_every=128, val_samples=32, eval_batch_size=32,
                    grad_clip=0.5, length_groups=1, checkpoint_every_s=2.5) | train
    return [trial_config(arch, "tiny", IsTreeConfig(n=6, setup="cot"), lr=lr, seed=seed, **protocol)
            for lr, seed in zip(rates, SEEDS)]


def _lone_rows(config, **checkpoints):
    rows = []
    run_trial(config, Hooks(report=lambda m, _: rows.append(m), clock=FakeClock(1.0)), Checkpoints(**checkpoints))
    return rows


def _array_rows(configs, rows=None, failed=None, **hooks):
    rows = {c.name: [] for c in configs} if rows is None else rows

    def report(by_name, folder):
        for name, row in by_name.items():
            rows[name].append(row)
            assert folder is None or (folder / name / CHECKPOINT_FILE).exists()  # its checkpoint, before its row

    fail = None if failed is None else (lambda name, error: failed.append((name, error)))
    return rows, ArrayHooks(report=report, fail=fail, clock=FakeClock(1.0), **hooks)


def _same_rows(array_rows, lone_rows, what):
    """Row for row: the same samples, steps, kinds and rates; figures within rounding."""
    assert len(array_rows) == len(lone_rows), what
    for a, b in zip(array_rows, lone_rows):
        for key in ("samples", "step", "evaluated", "final_eval", "checkpoint_reason", "lr", "config", "device_used"):
            assert a.get(key) == b.get(key), (what, key, a.get(key), b.get(key))
        for key in FIGURES:
            if key in b and b[key] is not None and not (isinstance(b[key], float) and math.isnan(b[key])):
                assert a[key] == pytest.approx(b[key], rel=1e-4, abs=1e-5), (what, b["samples"], key)


NEWER = ["mamba2", "gated_deltanet", "gated_deltaproduct", "rwkv7"]  # each fused in an array by a form of its own
LATEST = ["kda", "gated_deltanet2", "log_linear_mamba2"]  # the fused forms of the mixers fla added last


def _untimed(rows):
    return [{k: v for k, v in r.items() if k not in ("samples_per_s", "tokens_per_s")} for r in rows]


def _weights(folder):
    return torch.load(folder / CHECKPOINT_FILE, weights_only=False)


def _close_weights(a, b, what, lr):
    """Each weight tensor the other's within fp32 rounding as Adam carries it: each
    element within one step at the peak rate (Adam scales a gradient near zero, whose
    sign rounding can turn, to a step of about lr whatever its size: seen, 0.31 lr on a
    norm weight of a mamba member, with the CPU scan compiled afresh or loaded from
    numba's cache, whose arithmetic differs), and the tensor as a whole within 1e-3 of
    its norm (seen at most 6.6e-4). Seen against it (the Transformer's and mamba's
    members): its rate 5% off, 1.1-3.1 lr and 6e-3-3e-2 of the norm; Adam's eps at
    1e-6, 8-10 lr and 2e-2-8e-2."""
    for name, w in b["model"].items():
        torch.testing.assert_close(a["model"][name], w, rtol=1e-4, atol=lr, msg=lambda m: f"{what} {name}: {m}")
        assert (a["model"][name] - w).norm() <= 1e-3 * w.norm() + 1e-6, (what, name)


@pytest.mark.parametrize("arch", ["transformer", "mamba", "hybrid", *NEWER, *LATEST])
def test_an_arrays_rows_and_checkpoints_are_its_members_lone_ones(arch, tmp_path, thread_pools):
    configs = _configs(arch)
    rows, hooks = _array_rows(configs)
    final = run_array(configs, hooks, Checkpoints(dir=tmp_path / "array"))
    assert set(final) == {c.name for c in configs}
    for config in configs:
        lone = _lone_rows(config, dir=tmp_path / config.name)
        assert [r["samples"] for r in lone if r["evaluated"]] == [128, 256, 384]
        assert [r for r in lone if not r["evaluated"]], "the interval falls between evaluations"
        _same_rows(rows[config.name], lone, f"{arch} {config.name}")
        ours, theirs = _weights(tmp_path / "array" / config.name), _weights(tmp_path / config.name)
        assert ours.keys() == theirs.keys() and ours["samples"] == theirs["samples"] == 384
        assert ours["scheduler"]["last_epoch"] == theirs["scheduler"]["last_epoch"]
        _close_weights(ours, theirs, f"{arch} {config.name}", config.train.lr)


@pytest.mark.parametrize("arch", ["transformer", *NEWER])
def test_a_stopped_and_resumed_array_ends_as_a_straight_one(arch, tmp_path, thread_pools):
    """Stopped right after a checkpoint between evaluations (as a SIGKILL finds it),
    then resumed: every member's weights, rows and history equal the straight run's
    (the newer mixers' fused forms too: their stacked parameters to and from the
    members' checkpoints)."""
    configs = _configs(arch)
    straight, hooks = _array_rows(configs)
    run_array(configs, hooks, Checkpoints(dir=tmp_path / "a"))
    cut = next(r["samples"] for r in straight[configs[0].name] if not r["evaluated"] and r["samples"] > 128)
    rows, hooks = _array_rows(configs, stop_after=cut)
    run_array(configs, hooks, Checkpoints(dir=tmp_path / "b"))
    handed = []
    rows, hooks = _array_rows(configs, rows=rows)
    hooks = dataclasses.replace(hooks, on_resume=lambda name, r: handed.append((name, r)))
    run_array(configs, hooks, Checkpoints(dir=tmp_path / "b", resume_from=tmp_path / "b"))
    assert [name for name, _ in handed] == [c.name for c in configs]
    assert all(r[-1]["samples"] == cut for _, r in handed)
    for config in configs:
        a, b = _weights(tmp_path / "a" / config.name), _weights(tmp_path / "b" / config.name)
        for name, w in a["model"].items():
            assert torch.equal(w, b["model"][name]), name
        assert _untimed(a["history"]) == _untimed(b["history"])
        assert [r["samples"] for r in rows[config.name]] == [r["samples"] for r in straight[config.name]]


def test_a_members_checkpoint_continues_as_its_lone_trial_and_lone_ones_as_an_array(tmp_path, thread_pools):
    configs = _configs()
    _, hooks = _array_rows(configs, stop_after=128)
    run_array(configs, hooks, Checkpoints(dir=tmp_path / "array"))
    for config in configs:  # the lone trials' checkpoints at 128 samples, gathered as an array's
        run_trial(config, Hooks(stop_after=128), Checkpoints(dir=tmp_path / "lone" / config.name))
        run_trial(config, Hooks(), Checkpoints(dir=tmp_path / "straight" / config.name))
    for config in configs:
        shutil.copytree(tmp_path / "array" / config.name, tmp_path / "member" / config.name)
        run_trial(config, Hooks(), Checkpoints(dir=tmp_path / "member" / config.name,
                                               resume_from=tmp_path / "member" / config.name))
    run_array(configs, ArrayHooks(), Checkpoints(dir=tmp_path / "lone", resume_from=tmp_path / "lone"))
    for config in configs:
        straight = _weights(tmp_path / "straight" / config.name)
        for side in ("member", "lone"):
            ended = _weights(tmp_path / side / config.name)
            assert ended["samples"] == 384 and len(ended["history"]) == 3
            _close_weights(ended, straight, f"{side} {config.name}", config.train.lr)


def test_members_at_different_steps_or_a_missing_one_are_refused(tmp_path, thread_pools):
    configs = _configs()
    for config, cut in zip(configs, (128, 128, 256)):
        run_trial(config, Hooks(stop_after=cut), Checkpoints(dir=tmp_path / "mixed" / config.name))
    with pytest.raises(CheckpointError, match="different steps"):
        run_array(configs, ArrayHooks(), Checkpoints(resume_from=tmp_path / "mixed"))
    shutil.rmtree(tmp_path / "mixed" / configs[1].name)
    with pytest.raises(CheckpointError, match=f"no checkpoint of {configs[1].name}"):
        run_array(configs, ArrayHooks(), Checkpoints(resume_from=tmp_path / "mixed"))


def test_a_diverging_member_fails_alone_with_its_lone_trials_error(tmp_path, thread_pools):
    # The second diverges once its rate leaves the warm-up's 0, after its first evaluations.
    configs = _configs(rates=(3e-3, 1e12, 5e-3), samples=256, eval_every=32)
    before = []
    with pytest.raises(NonFiniteLoss) as lone:
        run_trial(configs[1], Hooks(report=lambda m, _: before.append(m), clock=FakeClock(1.0)), Checkpoints())
    failed = []
    rows, hooks = _array_rows(configs, failed=failed)
    final = run_array(configs, hooks, Checkpoints(dir=tmp_path))
    assert [(name, str(error), error.step) for name, error in failed] == [(configs[1].name, str(lone.value), lone.value.step)]
    assert set(final) == {configs[0].name, configs[2].name}
    assert not (tmp_path / configs[1].name).exists()  # the array's checkpoints hold the members that train on
    assert before, "the diverging member reported rows before it failed"
    _same_rows(rows[configs[1].name], before, configs[1].name)
    for k in (0, 2):
        _same_rows(rows[configs[k].name], _lone_rows(configs[k]), configs[k].name)


def test_an_array_whose_members_all_fail_ends(thread_pools):
    failed = []
    _, hooks = _array_rows(_configs(rates=(1e12, 1e12, 1e12)), failed=failed)
    assert run_array(_configs(rates=(1e12, 1e12, 1e12)), hooks) == {}  # failed before their first evaluation
    assert len(failed) == 3
