"""Attention in bf16 inside an fp32 step (training.attention_precision): the kernel
alone in bf16, everything around it as it was; the same function of the input to
bf16's rounding, in training and in cached decoding; part of what a trial trains."""

import pytest
import torch

from workloads.checkpoint import CheckpointError
from workloads.config import trial_config
from workloads.models import build_model
from workloads.models.config import preset
from workloads.models.transformer import Attention, set_attention_dtype
from workloads.tasks import IsTreeConfig
from workloads.train import Checkpoints, Hooks, Trial, run_trial

BF16_EPS = 2**-8  # bf16's relative rounding step (8 bits of mantissa)


def _model(arch: str):
    torch.manual_seed(0)
    return build_model(preset(arch, "tiny"), vocab_size=40)


@pytest.mark.parametrize("arch", ["transformer", "hybrid"])
def test_bf16_attention_is_fp32_attention_to_bf16s_rounding_and_its_gradients_too(arch):
    fp32, bf16 = _model(arch), _model(arch)
    set_attention_dtype(bf16, torch.bfloat16)
    assert {m.compute_dtype for m in bf16.modules() if isinstance(m, Attention)} == {torch.bfloat16}
    tokens = torch.randint(0, 40, (4, 33), generator=torch.Generator().manual_seed(1))
    a, b = fp32(tokens), bf16(tokens)
    assert b.dtype == torch.float32 and not torch.equal(a, b)  # it did compute in bf16
    assert (a - b).abs().max() <= 8 * BF16_EPS * a.abs().max()
    a.square().mean().backward()
    b.square().mean().backward()
    for (name, p), q in zip(fp32.named_parameters(), bf16.parameters()):
        if p.grad is not None:
            assert (p.grad - q.grad).abs().max() <= 0.1 * p.grad.abs().max() + 1e-7, name


def test_cached_decoding_in_bf16_attention_follows_its_full_forward():
    model = _model("transformer").eval()
    set_attention_dtype(model, torch.bfloat16)
    tokens = torch.randint(0, 40, (3, 20), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        full = model(tokens)
        logits, state = model.prefill(tokens[:, :12], max_length=20)
        steps = [logits] + [model.step(tokens[:, t], state) for t in range(12, 19)]
    cached = torch.stack(steps, dim=1)
    assert (cached - full[:, 11:19]).abs().max() <= 8 * BF16_EPS * full.abs().max()


def test_attention_precision_is_part_of_what_a_trial_trains(tmp_path):
    def config(precision):
        return trial_config("transformer", "tiny", IsTreeConfig(n=5, setup="cot"), samples=256, batch_size=32,
                            warmup_samples=32, eval_every=128, val_samples=32, lr=3e-3, device="cpu",
                            attention_precision=precision)

    assert {m.compute_dtype for m in Trial(config("bf16")).model.modules() if isinstance(m, Attention)} == {torch.bfloat16}
    assert {m.compute_dtype for m in Trial(config("fp32")).model.modules() if isinstance(m, Attention)} == {None}
    run_trial(config("bf16"), Hooks(stop_after=128), Checkpoints(dir=tmp_path))
    with pytest.raises(CheckpointError, match="train.attention_precision \\(checkpoint 'bf16', now 'fp32'\\)"):
        Trial(config("fp32")).restore(tmp_path)
