"""Training and evaluation: schedule, resume, failure, generation, and that models learn."""

import json
import math
import os
import weakref

import pytest
import torch
from typer.testing import CliRunner

import workloads.train as train_mod
from orchestrator.cli import app
from orchestrator.rundir import STOP_FILE
from workloads.config import TrialConfig, trial_config
from workloads.evaluate import answers, generate
from workloads.metrics import METRICS, PROGRESS
from workloads.models import build_model, preset
from workloads.tasks import IsTreeConfig, build_task
from tests.workloads.replay import Replay
from workloads import checkpoint as checkpoint_mod
from workloads.checkpoint import CHECKPOINT_FILE
from workloads.train import Checkpoints, Hooks, lr_factor, resolve_device, run_trial


def small_trial(arch="transformer", setup="cot", n=6, **train) -> TrialConfig:
    defaults = dict(samples=1024, batch_size=32, warmup_samples=128, eval_every=256, val_samples=64, eval_batch_size=32, lr=3e-3)
    return trial_config(arch, "tiny", IsTreeConfig(n=n, setup=setup), **(defaults | train))


def test_schedule_warms_up_linearly_then_decays_to_zero():
    warmup, total = 10, 110
    f = [lr_factor(s, warmup, total) for s in range(total + 1)]
    assert f[0] == 0.0 and f[warmup - 1] == pytest.approx(0.9) and f[warmup] == pytest.approx(1.0)
    assert all(a < b for a, b in zip(f[:warmup], f[1 : warmup + 1]))
    assert all(a >= b for a, b in zip(f[warmup:], f[warmup + 1 :]))
    assert f[total] == pytest.approx(0.0, abs=1e-12)
    assert f[warmup + (total - warmup) // 2] == pytest.approx(0.5)


def _weights(directory):
    return torch.load(directory / CHECKPOINT_FILE, weights_only=True)


@pytest.mark.parametrize("arch", ["transformer", "hybrid"])
def test_an_interrupted_and_resumed_trial_ends_with_the_same_weights(arch, tmp_path):
    config = small_trial(arch)
    straight = run_trial(config, Hooks(), Checkpoints(dir=tmp_path / "a"))
    run_trial(config, Hooks(stop_after=512), Checkpoints(dir=tmp_path / "b"))
    assert _weights(tmp_path / "b")["samples"] == 512
    seen = []
    resumed = run_trial(config, Hooks(on_step=seen.append), Checkpoints(dir=tmp_path / "b", resume_from=tmp_path / "b"))
    assert seen[0] == 512 + 32 and seen[-1] == 1024  # only the second half was trained again
    a, b = _weights(tmp_path / "a"), _weights(tmp_path / "b")
    for name, w in a["model"].items():
        assert torch.equal(w, b["model"][name]), name
    assert a["optimizer"]["state"][0]["step"] == b["optimizer"]["state"][0]["step"]
    for key in ("samples", "val_loss", "val_exact_match", "gen_accuracy"):
        assert straight[key] == resumed[key]
    assert [h["samples"] for h in b["history"]] == [256, 512, 768, 1024]


def test_reports_carry_the_metrics_and_the_full_config():
    config = small_trial(gen_every_eval=True)
    reports = []
    final = run_trial(config, Hooks(report=lambda m, ckpt: reports.append(m)))
    assert [r["samples"] for r in reports] == [256, 512, 768, 1024]
    for r in reports:
        assert TrialConfig.model_validate(r["config"]) == config
        for key in ("train_loss", "val_loss", "samples_per_s", "tokens_per_s"):
            assert math.isfinite(r[key]) and r[key] > 0
        for key in ("val_exact_match", "gen_accuracy"):
            assert 0.0 <= r[key] <= 1.0
        # Every registered metric and progress figure is reported (the registry is what
        # the spec, Tune's table, status and the report read: none may name a missing key).
        # A held-out metric is measured once, by the final evaluation.
        held_out = {key for key, metric in METRICS.items() if metric.held_out}
        assert set(METRICS) - held_out | set(PROGRESS) <= r.keys()
        assert all(math.isfinite(r[key]) for key in set(METRICS) - held_out)
        assert held_out.isdisjoint(r) if r is not reports[-1] else all(0.0 <= r[key] <= 1.0 for key in held_out)
    assert final == reports[-1] and final["final_eval"]


def test_the_held_out_score_is_the_final_models_exact_match_on_draws_of_its_own(monkeypatch):
    """test_exact_match is teacher-forced exact match on the held-out stream, measured
    once at the end: draws of their own, not validation's or training's."""
    from workloads.evaluate import teacher_forced
    from workloads.tasks.base import HELD_OUT_STREAM, TRAIN_STREAM, VALID_STREAM

    config = small_trial()
    task = build_task(config.task)
    streams = {s: task.batch(config.train.val_seed, s, 0, 64).tokens for s in (TRAIN_STREAM, VALID_STREAM, HELD_OUT_STREAM)}
    assert not any(torch.equal(streams[HELD_OUT_STREAM], streams[s]) for s in (TRAIN_STREAM, VALID_STREAM))
    measured = {}

    def recording(model, batches, autocast, predictions=None):
        batches = list(batches)
        out = teacher_forced(model, batches, autocast, predictions)
        measured[tuple(tuple(b.tokens[0].tolist()) for b in batches)] = out["val_exact_match"]
        return out

    monkeypatch.setattr(train_mod, "teacher_forced", recording)
    final = run_trial(config)
    held_out_first = tuple(streams[HELD_OUT_STREAM][0].tolist())
    [on_held_out] = [v for key, v in measured.items() if key[0][: len(held_out_first)] == held_out_first]
    assert final["test_exact_match"] == on_held_out


def test_train_loss_is_the_plain_mean_of_the_step_losses_since_the_last_evaluation(monkeypatch, tmp_path):
    # 15 steps between evaluations, so windows straddle the 32-step NaN checks; the
    # run is cut mid-window and resumed from its last checkpoint.
    real, losses = train_mod.Trial.backward, []

    def recorded(self, batch):  # each training step's loss, as the step computed it
        loss = real(self, batch)
        losses.append(loss.item())
        return loss

    monkeypatch.setattr(train_mod.Trial, "backward", recorded)
    config = small_trial(samples=1200, batch_size=16, eval_every=240)
    reports = []
    run_trial(config, Hooks(report=lambda m, _: reports.append(m), stop_after=560), Checkpoints(dir=tmp_path))
    first_run, losses[:] = list(losses), []
    run_trial(config, Hooks(report=lambda m, _: reports.append(m)), Checkpoints(dir=tmp_path, resume_from=tmp_path))
    assert len(first_run) == 35 and len(losses) == 45  # the resumed run redoes steps 31-35
    windows = [first_run[0:15], first_run[15:30], losses[0:15], losses[15:30], losses[30:45]]
    assert [r["samples"] for r in reports] == [240, 480, 720, 960, 1200]
    for report, window in zip(reports, windows):
        assert report["train_loss"] == pytest.approx(sum(window) / len(window), rel=1e-6)


def test_a_non_finite_loss_stops_the_trial_naming_the_step(monkeypatch):
    real = train_mod.supervised_loss
    calls = []

    def poisoned(logits, batch, reduction="mean"):
        loss = real(logits, batch, reduction)
        calls.append(1)
        return loss * float("nan") if len(calls) == 7 and logits.requires_grad else loss

    monkeypatch.setattr(train_mod, "supervised_loss", poisoned)
    with pytest.raises(FloatingPointError, match="nan at step 7") as caught:
        run_trial(small_trial())
    # It crosses Ray's process boundary pickled: message and step survive (a first
    # version lost the step there, and Tune recorded a TypeError instead).
    import pickle

    again = pickle.loads(pickle.dumps(caught.value))
    assert type(again) is type(caught.value) and again.step == 7 and str(again) == str(caught.value)


def test_asking_for_cuda_without_a_gpu_is_a_clear_error():
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    with pytest.raises(RuntimeError, match="no CUDA GPU"):
        resolve_device("cuda")


@pytest.mark.parametrize("setup", ["vanilla", "cot", "retrieval"])
def test_generation_reproduces_reference_traces_with_the_retriever_filling_in(setup):
    task = build_task(IsTreeConfig(n=16, setup=setup, family="random"))
    batch = task.batch(seed=2, stream=1, start=0, count=64)
    seqs = generate(Replay(task, batch, wrong=task.token_id("~")), task, batch.tokens[:, : task.prompt_length],
                    autocast=torch.no_grad)
    for row in range(64):
        length = int(batch.lengths[row])
        assert seqs[row, :length].tolist() == batch.tokens[row, :length].tolist()
        assert (seqs[row, length:] == task.pad_id).all()
    assert (answers(task, seqs) == batch.labels.numpy()).all()


def _naive_generate(model, task, prompts):
    """Greedy decoding by re-running the whole sequence for every token."""
    seqs = prompts.tolist()
    for s in seqs:
        while len(s) < task.max_length and s[-1] not in (task.true_id, task.false_id):
            if task.uses_retriever and s[-1] == task.end_search_id:
                s.append(task.retrieve(s))
            else:
                s.append(int(model(torch.tensor([s]))[0, -1].argmax()))
    return seqs


@pytest.mark.parametrize("arch", ["transformer", "mamba", "hybrid"])
def test_cached_batched_generation_equals_naive_generation(arch):
    task = build_task(IsTreeConfig(n=5, setup="retrieval"))
    torch.manual_seed(1)
    model = build_model(preset(arch, "tiny"), task.vocab_size).eval()
    with torch.no_grad():  # a random model that likes to call the retriever
        for p in model.parameters():
            p.add_(0.3 * torch.randn_like(p))
    prompts = task.batch(seed=0, stream=1, start=0, count=6).tokens[:, : task.prompt_length]
    fast = generate(model, task, prompts, autocast=torch.no_grad)
    with torch.no_grad():
        slow = _naive_generate(model, task, prompts)
    for row, s in enumerate(slow):
        assert fast[row, : len(s)].tolist() == s



def _stored(out) -> dict:
    """What `train --out` stored of its trial: the final row of result.json, with the
    config from params.json (as the final metrics it prints)."""
    rows = [json.loads(line) for line in (out / "result.json").read_text().splitlines()]
    return {**rows[-1], "config": json.loads((out / "params.json").read_text())["trial"]}

def test_train_command_writes_metrics_and_resumes(tmp_path, thread_pools):
    out = tmp_path / "trial"
    args = ["train", "--arch", "mamba", "--size", "tiny", "--setup", "retrieval", "--n", "5", "--samples", "256",
            "--eval-every", "128", "--val-samples", "32", "--warmup-samples", "64", "--out", str(out)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    metrics = _stored(out)
    for key in ("samples", "train_loss", "val_loss", "val_exact_match", "gen_accuracy", "samples_per_s", "tokens_per_s"):
        assert metrics[key] is not None
    assert metrics["config"]["train"]["lr"] == 3e-4  # the paper's rule for Mamba
    assert metrics["samples"] == 256 and 0 <= metrics["gen_accuracy"] <= 1
    assert len((out / "result.json").read_text().splitlines()) == 2
    again = CliRunner().invoke(app, args)  # finished: resumes at the end, trains nothing
    assert again.exit_code == 0 and "resuming" in again.output
    assert len((out / "result.json").read_text().splitlines()) == 2
    assert _stored(out) == metrics
    # The same files as a sweep's trial: status, report and load_run read the directory.
    from icr_sweep import load_run

    status = CliRunner().invoke(app, ["status", str(out)])
    assert status.exit_code == 0 and "1 finished" in status.output, status.output
    report = CliRunner().invoke(app, ["report", str(out)])
    assert report.exit_code == 0, report.output
    assert "| retrieval | mamba |" in (out / "report.md").read_text()
    frame = load_run(out)
    assert frame["samples"].tolist() == [128, 256] and frame["val_exact_match"].iloc[-1] == metrics["val_exact_match"]
    other = CliRunner().invoke(app, args[:-2] + ["--seed", "1", "--lr", "1e-3", "--out", str(out)])
    assert other.exit_code == 2 and "another config" in other.output
    assert "train.lr (stored 0.0003, now 0.001)" in other.output and "train.seed (stored 0, now 1)" in other.output
    assert "its results stay: give this trial another --out" in other.output


TRAIN = ["train", "--arch", "transformer", "--size", "tiny", "--setup", "vanilla", "--n", "4", "--val-samples", "32"]


@pytest.mark.parametrize("damage", ["truncated", "empty", "random bytes", "not a checkpoint"])
def test_a_damaged_checkpoint_is_named_with_how_to_start_over(tmp_path, damage, thread_pools):
    out = tmp_path / "trial"
    args = TRAIN + ["--samples", "128", "--eval-every", "64", "--out", str(out)]
    assert CliRunner().invoke(app, args).exit_code == 0
    path = out / "checkpoint" / CHECKPOINT_FILE
    data = path.read_bytes()
    path.write_bytes({"truncated": data[: len(data) // 2], "empty": b"", "random bytes": os.urandom(4096),
                      "not a checkpoint": b""}[damage])
    if damage == "not a checkpoint":
        torch.save({"weights": torch.zeros(3)}, path)
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    assert f"{path} cannot be read" in result.output and "to start the trial over" in result.output


def test_a_file_as_out_is_refused(tmp_path):
    blocker = tmp_path / "out"
    blocker.write_text("")
    result = CliRunner().invoke(app, TRAIN + ["--samples", "128", "--out", str(blocker)])
    assert result.exit_code == 2 and f"{blocker} is a file" in result.output and "--out" in result.output


def test_a_short_run_scales_its_warm_up_and_a_too_long_warm_up_names_the_flags(tmp_path, thread_pools):
    out = tmp_path / "short"
    result = CliRunner().invoke(app, TRAIN + ["--samples", "640", "--eval-every", "640", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert _stored(out)["config"]["train"]["warmup_samples"] == 64
    result = CliRunner().invoke(app, TRAIN + ["--samples", "6400", "--warmup-samples", "10000", "--out", str(out)])
    assert result.exit_code == 2 and "--warmup-samples (10000) must be below --samples (6400)" in result.output


def test_train_bounds_its_thread_pools_to_cpus(tmp_path, thread_pools, monkeypatch):
    import numba

    import orchestrator.cli.train as train_cli

    # The preflight builds the model: torch ops run there under the bound too. An OpenMP team
    # started wider before the bound keeps its idle worker spinning beside a one-thread trial
    # (a second core busy for nothing: measured with the delta-rule models).
    preflight, threads_seen = train_cli._train_preflight, []
    monkeypatch.setattr(train_cli, "_train_preflight", lambda c: (threads_seen.append(torch.get_num_threads()),
                                                                  preflight(c)))
    out = tmp_path / "threads"
    result = CliRunner().invoke(app, TRAIN + ["--samples", "64", "--eval-every", "64", "--cpus", "1", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert threads_seen == [1]
    assert torch.get_num_threads() == 1 and numba.get_num_threads() == 1
    assert os.environ["OMP_NUM_THREADS"] == "1"
    # numba's pool already runs in this process (earlier tests started it): the variable keeps its size, which
    # numba re-reads at each compile and refuses to change; a fresh process takes 1 (tests/workloads/test_threads.py).
    assert os.environ["NUMBA_NUM_THREADS"] == str(numba.config.NUMBA_NUM_THREADS)


@pytest.mark.parametrize("seed", ["-1", str(2**63)])
def test_seeds_outside_63_bits_are_refused(tmp_path, seed):
    result = CliRunner().invoke(app, TRAIN + ["--seed", seed, "--out", str(tmp_path / "x")])
    assert result.exit_code == 2 and "--seed" in result.output


# What "learns" means here: the tiny preset of each family, CoT n=4, more than 90%
# generation accuracy within its budget (CPU, seeded, one thread). Batch 16, as the
# laptop spec trains (sweeps/istree_laptop.yaml): four times the updates per sample.
# Budgets cut for the suite's time (issue 63), measured on this machine class:
# generation accuracy 0.994 for the Transformer at 10k samples (1.000 at 20k; 7 s),
# 1.000 for Mamba at 15k (14 s; 0.784 at 8k on two threads), 0.994 for the hybrid at
# 12k (10 s; 0.954 at 8k on two). One thread, not two: Mamba and the hybrid reach the
# same accuracies in about the same time for about half the CPU (13.7 core-seconds
# against 22.5, 9.8 against 18.1), and under pytest-xdist a second thread only
# contends (issue 82).
# Before the tiny Transformer had 3 layers and PyTorch's init, at batch 64, it took
# 300k samples (134 s) to reach 0.94.
LEARNING_BUDGET = {"transformer": dict(n=4, samples=12_000, lr=3e-3),
                   "mamba": dict(n=4, samples=15_000, lr=3e-3),
                   "hybrid": dict(n=4, samples=12_000, lr=3e-3)}


@pytest.mark.slow
@pytest.mark.parametrize("arch", list(LEARNING_BUDGET))
def test_each_family_learns_cot(arch, thread_pools):
    from workloads.threads import bound_threads

    budget = dict(LEARNING_BUDGET[arch])
    bound_threads(1)
    config = small_trial(arch, "cot", n=budget.pop("n"), batch_size=16, warmup_samples=2_000, val_samples=500,
                         eval_batch_size=250, **budget, eval_every=budget["samples"])
    metrics = run_trial(config)
    assert metrics["gen_accuracy"] > 0.9, metrics


# The newer RNNs (issue 12) on zoology's MQAR at a small scale; chance per queried
# value is 1/(vocab/2). Each at the smallest of these that it learns within a
# short budget (issue 63: 242 s for the four before, on 4 pairs, vocabulary 64, 32
# tokens, 30k-40k samples). Measured on two threads, value accuracy after the
# budget: on 2 pairs, vocabulary 32, 16 tokens, batch 16, 12k samples: Mamba-2 at
# lr 1e-2 0.981 (0.907 at 8k), Gated DeltaNet at 3e-3 0.993 (0.437 at 8k and 1e-2),
# Gated DeltaProduct at 3e-3 0.964 (0.901 at 8k); 13-25 s each. RWKV-7 sits on its
# plateau on that task (0.571 at 12k, 3e-3; 0.348 at 5e-3, 0.637 at 1e-2) and keeps
# 4 pairs, vocabulary 64, 32 tokens: 0.935 at 15k, 0.941 at 18k (33 s), 0.943 at 20k.
# One thread, as the CoT tests above: each reaches the same accuracy (0.981, 0.993,
# 0.964, 0.9405) in about the same time for half the CPU, 93.4 core-seconds for the
# four against 187.3 on two threads (bench/results/learning_tests_threads.json).
# Kimi Delta Attention and Gated DeltaNet-2 on the first task, one thread: 0.960 and
# 0.942 after 12k samples at 3e-3 (35 s and 29 s); log-linear Mamba-2 0.942 at 1e-2
# (0.868 at 3e-3), 14 s.
# (task (pairs, vocabulary, tokens), lr, samples, batch size, warm-up samples)
NEWER_RNN_BUDGET = {"mamba2": ((2, 32, 16), 1e-2, 12_000, 16, 500),
                    "gated_deltanet": ((2, 32, 16), 3e-3, 12_000, 16, 500),
                    "rwkv7": ((4, 64, 32), 3e-3, 18_000, 16, 2000),
                    "gated_deltaproduct": ((2, 32, 16), 3e-3, 12_000, 16, 500),
                    "kda": ((2, 32, 16), 3e-3, 12_000, 16, 500),
                    "gated_deltanet2": ((2, 32, 16), 3e-3, 12_000, 16, 500),
                    "log_linear_mamba2": ((2, 32, 16), 1e-2, 12_000, 16, 500)}


@pytest.mark.slow
@pytest.mark.parametrize("arch", list(NEWER_RNN_BUDGET))
def test_each_newer_rnn_learns_associative_recall(arch, thread_pools):
    from workloads.tasks.mqar import MQARConfig
    from workloads.threads import bound_threads

    (pairs, vocab, seq_len), lr, samples, batch_size, warmup = NEWER_RNN_BUDGET[arch]
    bound_threads(1)
    config = trial_config(arch, "tiny", MQARConfig(n=pairs, vocab=vocab, seq_len=seq_len), lr=lr, samples=samples,
                          batch_size=batch_size, warmup_samples=warmup, eval_every=samples, val_samples=500,
                          device="cpu")
    metrics = run_trial(config)
    assert metrics["val_token_accuracy"] > 0.9, metrics


def test_checkpoints_load_to_cpu_so_rng_states_restore_on_any_device(tmp_path, monkeypatch):
    # torch.set_rng_state and torch.cuda.set_rng_state take CPU byte tensors: a
    # checkpoint mapped straight to the GPU crashed every resume on CUDA.
    config = small_trial(samples=256, eval_every=128)
    run_trial(config, Hooks(), Checkpoints(dir=tmp_path))
    real_load, seen = torch.load, {}

    def load(*args, **kwargs):
        seen["map_location"] = kwargs.get("map_location")
        seen["state"] = real_load(*args, **kwargs)
        return seen["state"]

    monkeypatch.setattr(torch, "load", load)
    trial = train_mod.Trial(config)
    trial.restore(tmp_path)
    assert seen["map_location"] == "cpu"
    rng = seen["state"]["rng_cpu"]
    assert rng.device.type == "cpu" and rng.dtype == torch.uint8
    assert torch.equal(torch.get_rng_state(), rng)
    assert all(p.device == trial.device for p in trial.model.parameters())


def test_mamba_on_cuda_without_mamba_ssm_refuses_to_build_instead_of_crawling(monkeypatch):
    import workloads.models.mamba.layer as mamba_mod

    monkeypatch.setattr(mamba_mod, "_import_mamba_ssm_scan", lambda: (None, "ImportError: No module named 'mamba_ssm'"))
    for arch in ("mamba", "hybrid"):
        with pytest.raises(RuntimeError, match=r"No module named 'mamba_ssm'.*ICR_EXTRAS=dev,cuda scripts/setup-env"):
            preset(arch, "0.5M").check_device("cuda")
    preset("transformer", "0.5M").check_device("cuda")  # no Mamba layer
    preset("mamba", "0.5M").with_fields(scan="reference").check_device("cuda")  # asked for
    preset("mamba", "0.5M").check_device("cpu")  # our compiled kernel


class DeviceSyncCounter(torch.utils._python_dispatch.TorchDispatchMode):
    """Counts reads of a tensor's value into Python (the host sync that stalls a GPU)
    on tensors computed from a batch after it went to the device; the CPU batch
    itself can be read freely."""

    def __init__(self):
        super().__init__()
        self.on_device, self.syncs, self.counting = {}, 0, True

    def mark(self, tensor):
        self.on_device[id(tensor)] = weakref.ref(tensor)

    def _marked(self, tensor) -> bool:
        ref = self.on_device.get(id(tensor))
        return ref is not None and ref() is tensor

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        inputs = [t for t in torch.utils._pytree.tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
        tainted = any(self._marked(t) for t in inputs)
        if func is torch.ops.aten._local_scalar_dense.default and tainted and self.counting:
            self.syncs += 1
        out = func(*args, **(kwargs or {}))
        if tainted:
            for t in torch.utils._pytree.tree_leaves(out):
                if isinstance(t, torch.Tensor):
                    self.mark(t)
        return out


def test_training_steps_do_not_read_device_values_every_step(monkeypatch):
    from workloads.tasks.istree import Batch

    counter = DeviceSyncCounter()
    real_to = Batch.to

    def to(batch, device):
        moved = real_to(batch, device)
        for t in (moved.tokens, moved.supervised, moved.lengths, moved.labels):
            counter.mark(t)
        return moved

    monkeypatch.setattr(Batch, "to", to)
    real_evaluate = train_mod.Trial.evaluate

    def evaluate(self, *args, **kwargs):  # evaluation reads its metrics; only training steps count
        counter.counting = False
        try:
            return real_evaluate(self, *args, **kwargs)
        finally:
            counter.counting = True

    monkeypatch.setattr(train_mod.Trial, "evaluate", evaluate)
    steps = 64
    with counter:
        run_trial(small_trial(samples=steps * 8, batch_size=8, warmup_samples=8, eval_every=steps * 8, val_samples=8))
    # The losses are checked and summed once per LOSS_CHECK_STEPS steps and at each evaluation.
    assert counter.syncs <= steps // train_mod.LOSS_CHECK_STEPS + 1, counter.syncs


def test_the_kv_cache_is_kept_in_the_dtype_attention_computes_in():
    model = build_model(preset("hybrid", "tiny"), vocab_size=24)
    prompt = torch.randint(0, 24, (2, 9))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits, state = model.prefill(prompt, max_length=12)
        kv = state.layers[-1]
        assert kv.k.dtype == kv.v.dtype == torch.bfloat16
        model.step(logits.argmax(-1), state)  # writes a bf16 key into it
    _, state = model.prefill(prompt, max_length=12)
    assert state.layers[-1].k.dtype == torch.float32


def test_a_tiny_transformer_learns_associative_recall_with_the_retriever(thread_pools):
    # 10k samples (issue 63; 30k before): exact match 1.0 measured (0.984 at 6k).
    from workloads.tasks.ar import ARConfig

    config = trial_config("transformer", "tiny", ARConfig(n=8, keys=16, values=16, setup="retrieval"), lr=3e-3,
                          samples=10_000, batch_size=32, warmup_samples=1000, eval_every=10_000, val_samples=256,
                          eval_batch_size=128)
    metrics = run_trial(config)
    assert metrics["val_exact_match"] > 0.9 and metrics["gen_accuracy"] > 0.9, metrics


def test_train_command_takes_any_task_and_its_parameters(tmp_path, thread_pools):
    out = tmp_path / "index"
    result = CliRunner().invoke(app, ["train", "--task", "index", "--set", "values=5", "--arch", "mamba", "--size", "tiny",
                                      "--setup", "retrieval", "--n", "10", "--samples", "256", "--eval-every", "128",
                                      "--val-samples", "32", "--out", str(out)])
    assert result.exit_code == 0, result.output
    stored = _stored(out)
    assert stored["config"]["task"] == {"name": "index", "n": 10, "values": 5, "setup": "retrieval"}
    assert 0 <= stored["gen_accuracy"] <= 1


def test_train_takes_model_dimensions_beyond_the_preset_named_as_a_spec_names_them(tmp_path, thread_pools):
    from orchestrator.grid import expand
    from orchestrator.spec import SweepSpec

    out = tmp_path / "trial"

    def train_args(*dims: str) -> list[str]:
        return ["train", "--task", "mqar", "--set", "vocab=64", "--set", "seq_len=32", "--arch", "mamba", "--size",
                "tiny", *[arg for dim in dims for arg in ("--dim", dim)], "--setup", "vanilla", "--n", "2",
                "--samples", "64", "--eval-every", "64", "--val-samples", "16", "--warmup-samples", "0", "--out",
                str(out)]

    args = train_args("d_state=1", "d_model=16")
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    model = _stored(out)["config"]["model"]
    spec = SweepSpec(name="x", task="mqar", task_params={"vocab": 64, "seq_len": 32},
                     axes=dict(archs=["mamba"], setups=["vanilla"], sizes=["tiny"], n=[2],
                               model={"d_state": [1], "d_model": [16]}))
    assert model == expand(spec)[0].model.model_dump(mode="json")  # the same model, the same label
    assert model["size"] == "tiny-dstate1-dmodel16"
    for bad, message in ((args + ["--dim", "width=3"], "is not FIELD=VALUE with FIELD one of d_model"),
                         (args + ["--arch", "transformer"], "--dim: transformer has no layer with d_state; its "
                          "dimensions: d_mlp, d_model, n_heads, n_layers"),
                         (train_args("d_model=33") + ["--arch", "transformer"], "d_model 33 is not divisible by n_heads 2"),
                         (args + ["--size", "3M"], "--size: unknown size '3M' for mamba")):
        result = CliRunner().invoke(app, bad)
        assert result.exit_code == 2 and message in result.output, result.output


class FakeClock:
    """A clock that advances by `tick` seconds each time it is read."""

    def __init__(self, tick: float):
        self.now, self.tick = 0.0, tick

    def __call__(self) -> float:
        self.now += self.tick
        return self.now


def test_checkpoints_between_evaluations_by_time_and_a_resume_from_one_matches_a_straight_run(tmp_path):
    config = small_trial(checkpoint_every_s=2.5)  # the fake clock reads 1 s per step: a checkpoint every third step
    rows = []
    straight = run_trial(config, Hooks(report=lambda m, _: rows.append(m), clock=FakeClock(1.0)),
                         Checkpoints(dir=tmp_path / "a"))
    progress = [r for r in rows if not r["evaluated"]]
    assert [r["samples"] for r in rows if r["evaluated"]] == [256, 512, 768, 1024]
    assert progress and all(r["samples"] % 256 and "val_loss" not in r and r["train_loss"] > 0 for r in progress)
    # Stopped right after a time checkpoint between evaluations (as a SIGKILL would find it), then resumed.
    cut = progress[2]["samples"]
    run_trial(config, Hooks(stop_after=cut, clock=FakeClock(1.0)), Checkpoints(dir=tmp_path / "b"))
    assert _weights(tmp_path / "b")["samples"] == cut and cut % 256
    resumed = run_trial(config, Hooks(clock=FakeClock(1.0)), Checkpoints(dir=tmp_path / "b", resume_from=tmp_path / "b"))
    a, b = _weights(tmp_path / "a"), _weights(tmp_path / "b")
    for name, w in a["model"].items():
        assert torch.equal(w, b["model"][name]), name
    # The loss since the last evaluation travelled with the checkpoint: every evaluation row agrees.
    assert [h["train_loss"] for h in a["history"]] == [h["train_loss"] for h in b["history"]]
    assert straight["val_exact_match"] == resumed["val_exact_match"]


def test_a_trial_asked_to_stop_checkpoints_its_current_step(tmp_path):
    config = small_trial()
    asked = iter([False] * 10 + [True])
    metrics = run_trial(config, Hooks(stop=lambda: next(asked)), Checkpoints(dir=tmp_path))
    assert metrics["stopped"] and metrics["samples"] == 11 * 32 and not metrics["evaluated"]
    assert _weights(tmp_path)["samples"] == 11 * 32  # nothing since the evaluation at 256 is lost
    finished = run_trial(config, Hooks(), Checkpoints(dir=tmp_path, resume_from=tmp_path))
    assert finished["samples"] == 1024 and finished["final_eval"]


def test_a_sweeps_trial_asked_to_stop_checkpoints_its_step_and_trains_on_for_tune_to_end_it(tmp_path):
    config = small_trial()
    rows = []
    asked = iter([False] * 7 + [True])  # step 8 evaluates and asks nothing: the 8th ask is step 9's
    metrics = run_trial(config, Hooks(report=lambda m, _: rows.append(m), stop=lambda: next(asked, False), stop_ends=False),
                        Checkpoints(dir=tmp_path))
    assert "stopped" not in metrics and metrics["samples"] == 1024 and metrics["final_eval"]
    stops = [r for r in rows if r.get("checkpoint_reason") == "stop"]
    assert [r["samples"] for r in stops] == [9 * 32] and not stops[0]["evaluated"]


def test_a_stop_written_while_a_sweeps_trial_was_starting_is_heard_at_its_first_step(tmp_path):
    """A stop sent in a trial's first second (the driver writes the stop file before
    the trial has read it once) checkpoints the trial's first step, as one sent later
    does; the trial then trains on for Tune to end it (issue 83, class 2: it was taken
    as already seen, and the trial trained to its end)."""
    from orchestrator.stopping import StopRequests

    stop_file = tmp_path / STOP_FILE
    stop_file.write_bytes(b"")  # written by the driver before the trial started
    rows = []
    run_trial(small_trial(), Hooks(report=lambda m, _: rows.append(m), stop=StopRequests(stop_file), stop_ends=False),
              Checkpoints(dir=tmp_path / "checkpoint"))
    stops = [r["samples"] for r in rows if r.get("checkpoint_reason") == "stop"]
    assert stops == [32], [(r["samples"], r.get("checkpoint_reason")) for r in rows]  # once, at its first step


def test_a_stop_request_counts_once_and_a_new_one_again(tmp_path):
    from orchestrator.stopping import StopRequests

    stop_file = tmp_path / STOP_FILE
    asked = StopRequests(stop_file)
    assert not asked()
    stop_file.write_bytes(b"")
    assert asked() and not asked()
    os.utime(stop_file, ns=(stop_file.stat().st_mtime_ns + 10**9,) * 2)  # written again
    assert asked() and not asked()


def test_train_is_not_stopped_by_the_stop_file_a_killed_train_left(tmp_path):
    import shutil

    out = tmp_path / "run"
    command = ["train", "--arch", "transformer", "--size", "tiny", "--setup", "cot", "--n", "4", "--samples", "256",
               "--eval-every", "256", "--val-samples", "32", "--device", "cpu", "--out", str(out)]
    assert CliRunner().invoke(app, command).exit_code == 0
    shutil.rmtree(out / "checkpoint")  # the trial's own directory, to be trained afresh
    (out / STOP_FILE).write_bytes(b"")  # left by a `train` SIGKILLed after its signal wrote it
    result = CliRunner().invoke(app, command)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout.strip().splitlines()[-1])["samples"] == 256


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGINT"])
def test_train_stops_on_a_signal_with_a_checkpoint_and_exit_130(tmp_path, sig):
    import signal
    import subprocess
    import sys
    import time

    out = tmp_path / "run"
    command = [sys.executable, "-m", "orchestrator.cli", "train", "--arch", "transformer", "--size", "tiny", "--setup",
               "cot", "--n", "6", "--samples", "2000000", "--eval-every", "1000000", "--val-samples", "32",
               "--device", "cpu", "--out", str(out)]
    proc = subprocess.Popen(command + ["--checkpoint-every-s", "2"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    first = out / "checkpoint" / CHECKPOINT_FILE
    deadline = time.time() + 180
    while time.time() < deadline and not first.exists():  # a time checkpoint: training is under way
        time.sleep(0.2)
    time.sleep(0.5)
    before = _weights(out / "checkpoint")["samples"]
    proc.send_signal(getattr(signal, sig))
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err[-2000:]
    assert f"Stopped by {sig}" in err and "Run the same command to continue" in err
    saved = _weights(out / "checkpoint")
    assert before < saved["samples"] < 1_000_000 and saved["history"] == []  # saved at the stop, not only by time
    assert "Traceback" not in err
    assert not (out / STOP_FILE).exists()  # the request the signal wrote is gone: the next run is not stopped by it


def test_a_damaged_newest_checkpoint_falls_back_to_the_older_one_and_says_so(tmp_path):
    config = small_trial()
    run_trial(config, Hooks(stop_after=256), Checkpoints(dir=tmp_path / "old"))
    run_trial(config, Hooks(stop_after=512), Checkpoints(dir=tmp_path / "new"))
    damaged = tmp_path / "new" / CHECKPOINT_FILE
    damaged.write_bytes(damaged.read_bytes()[:500])
    said = []
    chosen = checkpoint_mod.first_intact(iter([tmp_path / "new", tmp_path / "missing", tmp_path / "old"]), config, said.append)
    assert chosen == tmp_path / "old"
    assert "passing over" in said[0] and "new" in said[0] and "continuing from the older checkpoint" in said[-1]
    other = small_trial(lr=1e-2)  # another config's checkpoint is passed over too
    said.clear()
    assert checkpoint_mod.first_intact([tmp_path / "old"], other, said.append) is None
    assert "another config" in said[0] and "STARTING OVER from sample 0" in said[-1]
    assert checkpoint_mod.first_intact([], config, said.append) is None  # a fresh trial says nothing more


def test_a_checkpoint_without_room_stops_naming_the_folder(tmp_path, monkeypatch):
    import shutil

    real = shutil.disk_usage
    (tmp_path / "full").mkdir()  # a trial's storage folder on a disk with 1 MiB left
    monkeypatch.setattr(train_mod.shutil, "disk_usage",
                        lambda path: real(path)._replace(free=1 << 20) if str(path).startswith(str(tmp_path / "full")) else real(path))
    steps = []
    with pytest.raises(checkpoint_mod.DiskSpaceError, match="no room for a checkpoint in .*full.*MiB free"):
        run_trial(small_trial(), Hooks(on_step=steps.append),
                  Checkpoints(dir=tmp_path / "ok", room_in=(tmp_path / "full",)))
    assert not (tmp_path / "ok" / CHECKPOINT_FILE).exists()  # nothing half-written
    # Before any training (issue 42, class 4: each try trained to its first evaluation, then failed there).
    assert steps == []


def test_a_checkpoint_continues_under_other_micro_batching_and_checkpoint_interval(tmp_path):
    run_trial(small_trial(), Hooks(stop_after=256), Checkpoints(dir=tmp_path))
    other = small_trial(length_groups=1, checkpoint_every_s=5.0)
    assert checkpoint_mod.first_intact([tmp_path], other, print) == tmp_path
    finished = run_trial(other, Hooks(), Checkpoints(dir=tmp_path, resume_from=tmp_path))
    assert finished["samples"] == 1024


def test_a_checkpoint_keeps_its_row_and_a_resume_hands_it_back(tmp_path):
    """Issue 28, class 7: a worker killed between a checkpoint and its row, or a
    stop's checkpoint found later, continued with that row lost; a row cut short by a
    full disk lost an evaluation before it. Every checkpoint keeps the row reported
    with it, and a resume hands the caller every row up to it, in order."""
    config = small_trial()
    rows = []
    run_trial(config, Hooks(report=lambda m, _: rows.append({k: v for k, v in m.items() if k != "config"}), stop_after=512),
              Checkpoints(dir=tmp_path / "eval"))
    handed = []
    run_trial(config, Hooks(stop_after=512, on_resume=handed.append),
              Checkpoints(dir=tmp_path / "eval", resume_from=tmp_path / "eval"))
    assert handed == [rows] and len(rows) > 1 and all(r["evaluated"] for r in rows)
    stopped = []
    asked = iter([False, False, True])
    run_trial(config, Hooks(report=lambda m, _: stopped.append({k: v for k, v in m.items() if k != "config"}),
                            stop=lambda: next(asked, True)),
              Checkpoints(dir=tmp_path / "stop"))
    handed.clear()
    run_trial(config, Hooks(stop_after=1, on_resume=handed.append),
              Checkpoints(dir=tmp_path / "stop", resume_from=tmp_path / "stop"))
    assert handed == [stopped] and stopped[-1]["checkpoint_reason"] == "stop"


def test_train_writes_back_the_row_of_the_checkpoint_it_continues_from(tmp_path, thread_pools):
    out = tmp_path / "trial"
    args = ["train", "--arch", "transformer", "--size", "tiny", "--setup", "cot", "--n", "4", "--samples", "128",
            "--batch-size", "32", "--eval-every", "64", "--val-samples", "16", "--warmup-samples", "32", "--out", str(out)]
    assert CliRunner().invoke(app, args).exit_code == 0
    rows = (out / "result.json").read_text().splitlines()
    (out / "result.json").write_text(rows[0] + "\n")  # the final row lost, as by a kill
    again = CliRunner().invoke(app, args)
    assert again.exit_code == 0, again.output
    assert (out / "result.json").read_text().splitlines() == rows
    # The CI run of issue 28's full-disk test: the first row cut short (no newline), the
    # next one appended onto it, and both lost. The cut row is set aside, both written back.
    (out / "result.json").write_text(rows[0][:40])
    again = CliRunner().invoke(app, args)
    assert again.exit_code == 0, again.output
    assert (out / "result.json").read_text().splitlines() == rows
    assert (out / "result-damaged.json").read_text() == rows[0][:40]
