"""Mamba-3's mixer, mamba-ssm's own module on CUDA: refused on any other device
naming why and what to use there; on a GPU, its counts against the module it
builds, cached decoding against the full forward, and a training step."""

import pytest
import torch

from workloads.models import build_model, preset
from workloads.models.mamba3.layer import Mamba3Mixer, _mamba3

needs_mamba3 = pytest.mark.skipif(not torch.cuda.is_available() or _mamba3()[0] is None,
                                  reason="needs CUDA and mamba-ssm's Mamba-3 kernels (mamba-ssm 2.3.2 or later)")


@pytest.mark.parametrize("arch", ["mamba3", "mamba3_hybrid"])
def test_a_cpu_is_refused_naming_why_and_what_to_use(arch):
    with pytest.raises(RuntimeError, match="mamba3 runs only on CUDA: its only implementation is mamba-ssm's Triton "
                                           "kernels .* on a CPU use mamba2 or log_linear_mamba2"):
        preset(arch, "tiny").check_device(torch.device("cpu"))


def test_the_presets_are_the_papers_sizes_counted_without_torch():
    """Within 1% of the paper's Mamba and hybrid (the tiny ones: our tiny Mamba's
    and hybrid's), from the config's own count (the GPU test checks it against the build)."""
    from workloads.models.config import PAPER_PARAMS

    for size in ("tiny", "0.5M", "1M", "2M"):
        for arch, paper in (("mamba3", "mamba"), ("mamba3_hybrid", "hybrid")):
            target = PAPER_PARAMS.get((paper, size)) or preset(paper, size).n_params
            assert abs(preset(arch, size).n_params / target - 1) < 0.01, (arch, size)


@pytest.mark.gpu
@needs_mamba3
@pytest.mark.parametrize("arch,size", [("mamba3", "tiny"), ("mamba3", "0.5M"), ("mamba3_hybrid", "1M")])
def test_counts_follow_the_module_mamba_ssm_builds(arch, size):
    cfg = preset(arch, size)
    cfg.check_device(torch.device("cuda"))
    model = build_model(cfg, vocab_size=40).cuda()
    assert model.num_params() == cfg.n_params
    mixer = next(m for m in model.modules() if isinstance(m, Mamba3Mixer))
    states = mixer.inner.allocate_inference_cache(2, 0, device="cuda")
    assert sum(s[0].numel() for s in states) * cfg.n_recurrent_layers == cfg.state_floats


@pytest.mark.gpu
@needs_mamba3
def test_cached_decoding_equals_the_full_forward_and_a_step_trains():
    torch.manual_seed(0)
    mixer = preset("mamba3", "0.5M").mixer.build(64, n_layers=2, norm_eps=1e-5).cuda()
    h = torch.randn(2, 40, 64, device="cuda")
    full = mixer(h)
    cache = mixer.new_cache(2, h)
    outs = [mixer(h[:, :17], cache)] + [mixer(h[:, t:t + 1], cache) for t in range(17, 40)]
    torch.testing.assert_close(torch.cat(outs, dim=1), full, rtol=2e-3, atol=2e-3)
    full.square().mean().backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in mixer.parameters() if p.requires_grad)
