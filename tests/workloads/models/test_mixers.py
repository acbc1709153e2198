"""What every chunked recurrent mixer must do, run on each (float64, small
shapes): cached decoding equals the full forward for any prompt length, the
step-by-step scan runs the same mixer as the chunked one, and a future input
never changes an earlier output. A new mixer adds its factory here."""

import pytest
import torch

from tests.workloads.models import mixer_checks
from workloads.models.gated_deltanet.layer import GatedDeltaNetMixer
from workloads.models.gated_deltaproduct.layer import GatedDeltaProductMixer
from workloads.models.mamba2.layer import Mamba2Mixer
from workloads.models.rwkv7.layer import RWKV7Mixer

D_MODEL = 16
MIXERS = {
    "mamba2": lambda: Mamba2Mixer(D_MODEL, d_state=8, d_conv=4, expand=2, headdim=8, chunk=8),
    "gated_deltanet": lambda: GatedDeltaNetMixer(D_MODEL, heads=2, head_dim=4, expand_v=2, chunk=8),
    "gated_deltaproduct": lambda: GatedDeltaProductMixer(D_MODEL, heads=2, head_dim=4, householder=3, chunk=8),
    "rwkv7": lambda: RWKV7Mixer(D_MODEL, head_dim=8, decay_rank=4, a_rank=4, gate_rank=4, chunk=8),
}


def _mixer(name: str):
    torch.manual_seed(0)
    mixer = MIXERS[name]().double()
    for p in mixer.parameters():  # off the init (RWKV-7 zeroes its output projection)
        p.data.add_(0.1 * torch.randn_like(p))
    return mixer


@pytest.mark.parametrize("name", MIXERS)
@pytest.mark.parametrize("prompt", [1, 7, 19])
def test_cached_decoding_equals_the_full_forward(name, prompt):
    mixer_checks.cached_decoding_equals_the_full_forward(_mixer(name), D_MODEL, prompt)


@pytest.mark.parametrize("name", MIXERS)
def test_the_recurrent_scan_runs_the_same_mixer(name):
    mixer_checks.recurrent_scan_equals_the_chunked_one(_mixer(name), D_MODEL)


@pytest.mark.parametrize("name", MIXERS)
def test_changing_a_future_input_leaves_earlier_outputs_unchanged(name):
    mixer_checks.future_inputs_leave_earlier_outputs_unchanged(_mixer(name), D_MODEL)
