"""workloads.adam.AdamW is torch's AdamW: the same steps bit for bit, the same state
dicts either way, and a trial's process that trains with it never imports
torch._dynamo (what it exists for)."""

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from workloads.adam import AdamW
from workloads.train import lr_factor

ROOT = Path(__file__).parents[2]


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4))


def _steps(model, optimizer, scheduler, start: int, count: int) -> None:
    """`count` scheduled, clipped steps on batches fixed by their index."""
    for step in range(start, start + count):
        data = torch.Generator().manual_seed(step)
        loss = model(torch.randn(32, 8, generator=data)).pow(2).mean()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
        optimizer.step()
        scheduler.step()


def _trained(kind, steps: int = 60, tensor_rate: bool = False, **options):
    """A model after `steps` steps of `kind` (the rate a float64 tensor where asked, as the static step's on CPU)."""
    model = _model()
    rate = torch.tensor(3e-3, dtype=torch.float64) if tensor_rate else 3e-3
    optimizer = kind(model.parameters(), lr=rate, weight_decay=0.0, **options)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: lr_factor(s, 10, 100))
    _steps(model, optimizer, scheduler, 0, steps)
    return model, optimizer, scheduler


def _same(a, b) -> None:
    """Two (model, optimizer) pairs hold equal weights, moments and step counts, bit for bit."""
    (model_a, opt_a), (model_b, opt_b) = a, b
    for p, q in zip(model_a.parameters(), model_b.parameters()):
        assert torch.equal(p, q)
    state_a, state_b = opt_a.state_dict(), opt_b.state_dict()
    assert state_a["param_groups"] == state_b["param_groups"]
    assert state_a["state"].keys() == state_b["state"].keys()
    for key, moments in state_a["state"].items():
        assert moments.keys() == state_b["state"][key].keys()
        for name, value in moments.items():
            assert torch.equal(value, state_b["state"][key][name]), (key, name)


@pytest.mark.parametrize("options", [{}, {"foreach": True}, {"tensor_rate": True}],
                         ids=["as-trials", "foreach", "tensor-rate"])
def test_it_steps_as_torchs_adamw_bit_for_bit(options):
    theirs, ours = (_trained(kind, **options) for kind in (torch.optim.AdamW, AdamW))
    _same(theirs[:2], ours[:2])
    assert float(ours[1].state_dict()["state"][0]["step"]) == 60
    assert isinstance(ours[1].param_groups[0]["lr"], torch.Tensor) == bool(options.get("tensor_rate"))


@pytest.mark.parametrize("saved, loaded", [(torch.optim.AdamW, AdamW), (AdamW, torch.optim.AdamW)],
                         ids=["torch-to-ours", "ours-to-torch"])
def test_a_checkpoint_of_either_continues_in_the_other_as_a_straight_run(saved, loaded):
    """Halfway, the optimizer's and schedule's state dicts go into a fresh model and
    optimizer of the other class (a checkpoint of a run trained before, or after):
    the next 30 steps end where 60 straight steps of torch's AdamW end."""
    straight = _trained(torch.optim.AdamW, steps=60)
    model, optimizer, scheduler = _trained(saved, steps=30)
    state = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict()}
    resumed = _model()
    resumed.load_state_dict(state["model"])
    other = loaded(resumed.parameters(), lr=3e-3, weight_decay=0.0)
    other_schedule = torch.optim.lr_scheduler.LambdaLR(other, lambda s: lr_factor(s, 10, 100))
    other.load_state_dict(state["optimizer"])
    other_schedule.load_state_dict(state["scheduler"])
    _steps(resumed, other, other_schedule, 30, 30)
    _same(straight[:2], (resumed, other))


def test_zero_grad_keeps_or_drops_gradients_as_torchs():
    model = _model()
    optimizer = AdamW(model.parameters(), lr=1e-3)
    model(torch.ones(2, 8)).sum().backward()
    optimizer.zero_grad(set_to_none=False)
    assert all(p.grad is not None and not p.grad.any() for p in model.parameters())
    optimizer.zero_grad()
    assert all(p.grad is None for p in model.parameters())


def test_a_trial_trains_checkpoints_and_resumes_without_importing_the_compiler(tmp_path):
    """A lone trial's process, from its imports through training, a checkpoint, and the
    trial continued from it (its optimizer's state loaded), never imports torch._dynamo (each of torch's
    optimizer guards would: 1.3 core-seconds at every trial's start)."""
    script = textwrap.dedent(f"""
        import sys
        from pathlib import Path
        from workloads.config import trial_config
        from workloads.tasks.istree import IsTreeConfig
        from workloads.train import Checkpoints, run_trial
        import orchestrator.worker
        config = trial_config("hybrid", "tiny", IsTreeConfig(n=4, setup="cot"), lr=3e-3, samples=128, batch_size=16,
                              warmup_samples=32, eval_every=64, val_samples=16, device="cpu")
        run_trial(config, checkpoints=Checkpoints(dir=Path({str(tmp_path)!r}) / "a"))
        resumed = run_trial(config, checkpoints=Checkpoints(dir=Path({str(tmp_path)!r}) / "b",
                                                            resume_from=Path({str(tmp_path)!r}) / "a"))
        assert resumed["samples"] == 128, resumed
        print("imported:", sorted(m for m in sys.modules if m.startswith("torch._dynamo")))
    """)
    result = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().splitlines()[-1] == "imported: []", result.stdout[-2000:]
