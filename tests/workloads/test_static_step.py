"""The static step (workloads/static_step.py), the step a CUDA graph captures: its
padding is data (the plain step's loss and every gradient, every family), its Adam
with a tensor rate is today's Adam, and a trial on it trains, checkpoints and
resumes as a plain one does."""

import math

import numpy as np
import pytest
import torch

from workloads import static_step
from workloads.checkpoint import CHECKPOINT_FILE
from workloads.config import trial_config
from workloads.models.config import CPU_ARCHS
from workloads.static_step import bucket_widths, static_chunks, static_optimizer
from workloads.tasks import IsTreeConfig
from workloads.tasks.mqar import MQARConfig
from workloads.train import Checkpoints, Hooks, Trial, lr_factor, run_trial

# Every family once: each mixer alone, and the paper's hybrid.
FAMILIES = [arch for arch in CPU_ARCHS if not arch.endswith("_hybrid")]


@pytest.mark.parametrize("max_length", [5, 17, 64, 100, 1758])
def test_widths_end_at_the_longest_sample_and_round_to_tiles(max_length):
    widths = bucket_widths(max_length)
    assert widths[-1] == max_length and list(widths) == sorted(set(widths))
    assert all(w % static_step.WIDTH_MULTIPLE == 0 for w in widths[:-1]) and len(widths) <= static_step.BUCKETS


@pytest.mark.parametrize("seed", range(20))
def test_chunks_hold_every_row_once_each_in_a_width_that_fits_it(seed):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(2, 100, size=rng.integers(1, 40))
    rows = int(rng.integers(1, 12))
    widths = bucket_widths(100)
    chunks = static_chunks(lengths, rows, widths)
    assert sorted(np.concatenate([i for i, _ in chunks]).tolist()) == list(range(len(lengths)))
    for index, width in chunks:
        assert 1 <= len(index) <= rows and width in widths and lengths[index].max() <= width
        assert not [w for w in widths if lengths[index].max() <= w < width], "the narrowest width that fits"


def test_a_row_longer_than_every_width_is_named():
    with pytest.raises(ValueError, match="a row of 30 tokens is longer than the widest static width 24"):
        static_chunks(np.array([30, 3]), 2, (8, 16, 24))


def _loss_and_gradients(arch, task, cuda_graphs, batch_size=24):
    config = trial_config(arch, "tiny", task, samples=1000, batch_size=batch_size, warmup_samples=10, lr=1e-3,
                          length_groups=3, device="cpu", cuda_graphs=cuda_graphs)
    trial = Trial(config)
    batch = trial.task.batch(0, 0, 0, batch_size)
    trial.optimizer.zero_grad(set_to_none=True)
    loss = trial.backward(batch)
    return trial, loss, {name: p.grad.clone() for name, p in trial.model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("arch", FAMILIES)
def test_the_static_step_gives_the_plain_steps_loss_and_every_gradient(arch):
    task = IsTreeConfig(n=8, setup="retrieval")
    static, loss_static, grads_static = _loss_and_gradients(arch, task, "on")
    _, loss_plain, grads_plain = _loss_and_gradients(arch, task, "off")
    lengths = static.task.batch(0, 0, 0, 24).lengths.numpy()
    chunks = static_chunks(lengths, static.static.rows, static.static.widths)
    # The test means something: several micro-batches, rows padded past their length and empty rows.
    assert len(chunks) == 3 and any(w > lengths[i].max() for i, w in chunks)
    assert static.static.rows * len(chunks) == 24 or len(chunks[-1][0]) < static.static.rows
    assert loss_static.item() == pytest.approx(loss_plain.item(), rel=1e-5)
    assert grads_static.keys() == grads_plain.keys()
    for name, g in grads_plain.items():
        scale = g.abs().max().item() + 1e-12
        assert (grads_static[name] - g).abs().max().item() <= 1e-4 * scale, name


def test_empty_rows_fill_the_last_chunk_and_a_task_with_targets_keeps_them():
    # 10 rows in chunks of 4: the last holds two rows and two empty ones; MQAR's targets differ from its tokens.
    task = MQARConfig(n=4, vocab=32, seq_len=16)
    static, loss_static, grads_static = _loss_and_gradients("transformer", task, "on", batch_size=10)
    _, loss_plain, grads_plain = _loss_and_gradients("transformer", task, "off", batch_size=10)
    assert static.static.rows == 4
    assert loss_static.item() == pytest.approx(loss_plain.item(), rel=1e-5)
    for name, g in grads_plain.items():
        assert torch.allclose(grads_static[name], g, rtol=1e-4, atol=1e-4 * g.abs().max().item()), name


def _adam_trained(static: bool, device: str):
    """A small model after 100 scheduled, clipped Adam steps: the static step's
    optimiser (its rate a tensor the schedule fills in place) or the plain step's
    (as Trial builds it: fused on CUDA)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4)).to(device)
    optimizer = static_optimizer(model, 3e-3, torch.device(device)) if static else \
        torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.0, fused=device == "cuda" or None)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: lr_factor(s, 10, 100))
    data = torch.Generator().manual_seed(1)
    for _ in range(100):
        loss = model(torch.randn(32, 8, generator=data).to(device)).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
        optimizer.step()
        scheduler.step()
    return model, optimizer


def test_adam_with_a_tensor_rate_is_todays_adam_bit_for_bit():
    (plain, plain_opt), (static, static_opt) = _adam_trained(False, "cpu"), _adam_trained(True, "cpu")
    assert isinstance(static_opt.param_groups[0]["lr"], torch.Tensor)
    for a, b in zip(plain.parameters(), static.parameters()):
        assert torch.equal(a, b)
    for key, state in plain_opt.state_dict()["state"].items():
        other = static_opt.state_dict()["state"][key]
        assert float(state["step"]) == float(other["step"]) == 100
        assert torch.equal(state["exp_avg"], other["exp_avg"]) and torch.equal(state["exp_avg_sq"], other["exp_avg_sq"])


def _trial(**train):
    defaults = dict(samples=512, batch_size=32, warmup_samples=64, eval_every=256, val_samples=64, eval_batch_size=32,
                    lr=3e-3, device="cpu", grad_clip=1.0)
    return trial_config("hybrid", "tiny", IsTreeConfig(n=6, setup="retrieval"), **(defaults | train))


def _weights(directory):
    return torch.load(directory / CHECKPOINT_FILE, weights_only=True)


def test_a_static_trial_learns_as_a_plain_one_and_says_which_step_ran():
    rows = {}
    for setting in ("off", "on"):
        rows[setting] = []
        run_trial(_trial(cuda_graphs=setting), Hooks(report=lambda m, _, out=rows[setting]: out.append(m)))
    assert [r["step_used"] for r in rows["on"]] == ["static"] * 2 and rows["off"][-1]["step_used"] == "plain"
    for a, b in zip(rows["off"], rows["on"]):
        assert a["samples"] == b["samples"] and a["lr"] == b["lr"] and isinstance(b["lr"], float)
        assert b["train_loss"] == pytest.approx(a["train_loss"], rel=1e-4)
        assert b["val_loss"] == pytest.approx(a["val_loss"], rel=1e-3)


def test_a_static_trial_stopped_between_evaluations_resumes_to_a_straight_runs_weights(tmp_path):
    config = _trial(cuda_graphs="on")
    run_trial(config, Hooks(), Checkpoints(dir=tmp_path / "a"))
    seen = []  # stopped as Ctrl-C stops it: a checkpoint between evaluations, then the run ends
    run_trial(config, Hooks(on_step=seen.append, stop=lambda: seen[-1] >= 320), Checkpoints(dir=tmp_path / "b"))
    assert _weights(tmp_path / "b")["samples"] == 320
    run_trial(config, Hooks(), Checkpoints(dir=tmp_path / "b", resume_from=tmp_path / "b"))
    a, b = _weights(tmp_path / "a"), _weights(tmp_path / "b")
    for name, w in a["model"].items():
        assert torch.equal(w, b["model"][name]), name
    # The stop's checkpoint summed the step losses before 320 apart from those after: rounding.
    assert [h["train_loss"] for h in b["history"]] == pytest.approx([h["train_loss"] for h in a["history"]], rel=1e-6)


@pytest.mark.parametrize("first, then", [("off", "on"), ("on", "off")])
def test_a_checkpoint_of_either_step_continues_on_the_other_with_its_own_kind_of_rate(tmp_path, first, then):
    run_trial(_trial(cuda_graphs=first), Hooks(stop_after=256), Checkpoints(dir=tmp_path))
    trial = Trial(_trial(cuda_graphs=then))
    trial.restore(tmp_path)
    rate = trial.optimizer.param_groups[0]["lr"]
    assert isinstance(rate, torch.Tensor) == (then == "on")
    assert trial.scheduler.base_lrs == [3e-3] or float(trial.scheduler.base_lrs[0]) == 3e-3
    steps = 256 // 32
    assert float(rate) == pytest.approx(3e-3 * lr_factor(steps, 2, math.ceil(512 / 32)), rel=1e-12)
    finished = run_trial(_trial(cuda_graphs=then), Hooks(), Checkpoints(dir=tmp_path, resume_from=tmp_path))
    assert finished["samples"] == 512 and finished["step_used"] == ("static" if then == "on" else "plain")


def test_auto_is_the_plain_step_on_a_cpu():
    assert Trial(_trial(cuda_graphs="auto")).static is None


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("arch", ["transformer", "mamba", "hybrid"])
def test_the_captured_step_replays_the_uncaptured_one_without_reading_the_device(arch):
    """Twelve steps (three uncaptured, then graphs): the same losses and weights as
    the static step run uncaptured on the same GPU, and no host sync in a replay."""
    from workloads.train import _Run

    def trained(capture: bool):
        # A budget past the twelve steps: no evaluation and no loss check (each reads the device) among them.
        config = trial_config(arch, "tiny", IsTreeConfig(n=16, setup="retrieval"), samples=10**6, batch_size=32,
                              warmup_samples=64, lr=1e-3, device="cuda", grad_clip=1.0, cuda_graphs="on")
        trial = Trial(config)
        trial.static.capture = capture
        run = _Run(trial, None, None, (), lambda: 0.0)
        losses = []
        for step in range(12):
            if capture and step > static_step.EAGER_STEPS:  # replays (the capture itself synchronises)
                torch.cuda.set_sync_debug_mode("error")
            try:
                run.train_step()
            finally:
                torch.cuda.set_sync_debug_mode("default")
            losses.append(run.pending[-1].item() if run.pending else None)
        return trial, losses

    (eager, eager_losses), (graphed, graphed_losses) = trained(False), trained(True)
    assert graphed.static.captured and not eager.static.captured
    assert graphed_losses == pytest.approx(eager_losses, rel=1e-5)
    for a, b in zip(eager.model.parameters(), graphed.model.parameters()):
        assert torch.allclose(a, b, rtol=1e-4, atol=1e-6)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_capturable_adam_with_a_tensor_rate_is_the_plain_fused_adam_on_a_gpu():
    """On CUDA the static step's optimiser is fused and capturable, its rate a float32
    device tensor: the plain fused Adam's weights and moments to float32's rounding."""
    (plain, plain_opt), (static, static_opt) = _adam_trained(False, "cuda"), _adam_trained(True, "cuda")
    for a, b in zip(plain.parameters(), static.parameters()):
        assert torch.allclose(a, b, rtol=1e-5, atol=1e-7)
    for key, state in plain_opt.state_dict()["state"].items():
        other = static_opt.state_dict()["state"][key]
        assert torch.allclose(state["exp_avg"], other["exp_avg"], rtol=1e-5, atol=1e-9)
