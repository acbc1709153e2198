"""What every registered recurrent mixer must do, run on each at its 0.5M preset's
width, on short sequences: cached decoding equals the full forward for any prompt
length, a future input never changes an earlier output, and where the mixer has a
chunked (or quadratic) form and a step-by-step one (`scan: chunked | recurrent`),
both run the same mixer. The mixers come from the registry (those with a PyTorch
path): a mixer dropped into workloads/models/ is checked here without a line added. Mixers with both forms run
in float64 (pure PyTorch); the others (Mamba's compiled scan computes in float32)
in float32 at float32's tolerance."""

from pathlib import Path

import pytest
import torch

from tests.workloads.models import mixer_checks
from workloads import models
from workloads.models import preset
from workloads.models.base import REGISTRY

# Every mixer with a PyTorch path (Mamba-3 has none: tests/workloads/models/test_mamba3.py on a GPU).
NAMES = sorted(name for name in REGISTRY if REGISTRY[name].config.cpu_refusal is None)


def _both_forms(name: str) -> bool:
    """A form that trains over whole sequences (chunked, or log-linear's quadratic) and the recurrence."""
    scans = set(REGISTRY[name].config.scans())
    return "recurrent" in scans and bool(scans & {"chunked", "quadratic"})


def _mixer(name: str):
    """The mixer at its 0.5M preset (the paper's smallest size: several heads), with
    chunks of 8 tokens where it has chunks (so that the checks' 21-30 tokens cross
    chunk boundaries), off its init."""
    model = preset(REGISTRY[name].arch, "0.5M")
    config = model.mixer
    if "chunk" in type(config).model_fields:
        config = config.model_copy(update={"chunk": 8})
    torch.manual_seed(0)
    mixer = config.build(model.d_model, n_layers=1, norm_eps=model.norm_eps)
    mixer = mixer.double() if _both_forms(name) else mixer.float()
    for p in mixer.parameters():  # off the init (RWKV-7 zeroes its output projection)
        p.data.add_(0.1 * torch.randn_like(p))
    return mixer, model.d_model


def _precision(name: str) -> dict:
    return dict(dtype=torch.float64, tol=1e-10) if _both_forms(name) else dict(dtype=torch.float32, tol=2e-5)


def test_the_registry_holds_every_mixer_package():
    packages = {p.name for p in Path(models.__file__).parent.iterdir() if (p / "__init__.py").exists()}
    assert packages == set(REGISTRY)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("prompt", [1, 7, 19])
def test_cached_decoding_equals_the_full_forward(name, prompt):
    mixer, d_model = _mixer(name)
    mixer_checks.cached_decoding_equals_the_full_forward(mixer, d_model, prompt, **_precision(name))


@pytest.mark.parametrize("name", [n for n in NAMES if _both_forms(n)])
def test_the_recurrent_scan_runs_the_same_mixer(name):
    mixer, d_model = _mixer(name)
    mixer_checks.recurrent_scan_equals_the_chunked_one(mixer, d_model)


@pytest.mark.parametrize("name", NAMES)
def test_changing_a_future_input_leaves_earlier_outputs_unchanged(name):
    mixer, d_model = _mixer(name)
    mixer_checks.future_inputs_leave_earlier_outputs_unchanged(mixer, d_model, dtype=_precision(name)["dtype"])
