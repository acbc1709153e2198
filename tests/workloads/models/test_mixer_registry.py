"""The mixer registry: a mixer is one package under workloads/models/ (config,
presets and learning rate in its torch-free `__init__`, its layer beside it);
dropping one in makes its architecture and its hybrid presets, rates, spec axes and
trainable models, with no other file edited. Shown on a copy of the code with one
more package."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from workloads.models import PRESETS, SIZES
from workloads.models.base import REGISTRY, MixerConfigBase
from workloads.models.config import DEFAULT_LR, MIXERS

ROOT = Path(__file__).parents[3]

PROBE_CONFIG = '''
from typing import ClassVar, Literal

from pydantic import Field

from workloads.models.base import MixerConfigBase, Stack, register_mixer


class ProbeConfig(MixerConfigBase):
    """A gated linear recurrence: h_t = sigmoid(decay) * h_(t-1) + W x_t."""

    layer: ClassVar[str] = "workloads.models.probe.layer:ProbeMixer"
    cpu_cost: ClassVar[float] = 1.0

    name: Literal["probe"] = "probe"
    width: int = Field(16, gt=0)

    def params(self, d_model):
        return 2 * d_model * self.width + 2 * self.width + d_model

    def state_floats(self, d_model):
        return self.width

    def activation_floats(self, d_model):
        return 3 * self.width


# Each paper size's preset that size (within 1.2x of its label), as the registry checks.
SIZED = {"tiny": Stack(32, 2), "0.5M": Stack(256, 2, mixer=ProbeConfig(width=512)),
         "1M": Stack(256, 4, mixer=ProbeConfig(width=512)), "2M": Stack(256, 8, mixer=ProbeConfig(width=512))}
HYBRID = {"tiny": Stack(32, 1, d_mlp=64, n_heads=2), "0.5M": Stack(128, 1, mixer=ProbeConfig(width=1024)),
          "1M": Stack(128, 3, mixer=ProbeConfig(width=1024)), "2M": Stack(128, 7, mixer=ProbeConfig(width=1024))}
register_mixer(ProbeConfig, arch="probe", hybrid="probe_hybrid", lr=2e-3, presets=SIZED, hybrid_presets=HYBRID)
'''

PROBE_LAYER = '''
import torch
from torch import nn


class ProbeMixer(nn.Module):
    def __init__(self, d_model, n_layers, norm_eps, width):
        super().__init__()
        self.inp, self.out = nn.Linear(d_model, width), nn.Linear(width, d_model)
        self.decay = nn.Parameter(torch.zeros(width))

    def new_cache(self, batch, like):
        return {"h": like.new_zeros(batch, self.decay.numel())}

    def forward(self, x, cache=None):
        u, a = self.inp(x), torch.sigmoid(self.decay)
        h = cache["h"] if cache is not None else u.new_zeros(u.shape[0], u.shape[-1])
        states = []
        for t in range(u.shape[1]):
            h = a * h + u[:, t]
            states.append(h)
        if cache is not None:
            cache["h"] = h
        return self.out(torch.stack(states, 1))
'''

CHECK = '''
import json, sys
from orchestrator.grid import expand
from orchestrator.spec import SweepSpec
from workloads.config import trial_config
from workloads.models import PRESETS, build_model
from workloads.models.config import DEFAULT_LR
from workloads.tasks import IsTreeConfig
heavy = "torch" in sys.modules  # the registry, presets and the spec read no torch
spec = SweepSpec.model_validate({"name": "p", "axes": {"archs": ["probe", "probe_hybrid"], "setups": ["cot"],
                                 "sizes": ["tiny"], "n": [4], "model": {"width": [8, 16]}}})
names = [t.name for t in expand(spec)]
from workloads.train import run_trial
config = trial_config("probe_hybrid", "tiny", IsTreeConfig(n=4, setup="cot"), samples=256, batch_size=32,
                      warmup_samples=32, eval_every=256, val_samples=32, eval_batch_size=32, device="cpu")
metrics = run_trial(config)
model = build_model(PRESETS["probe"]["tiny"], 50)
print(json.dumps({"archs": list(PRESETS), "lr": DEFAULT_LR["probe_hybrid"], "names": names, "heavy": heavy,
                  "layers": PRESETS["probe_hybrid"]["tiny"].layers, "counted": PRESETS["probe"]["tiny"].n_params,
                  "built": model.num_params(), "gen": metrics["gen_accuracy"], "loss": metrics["val_loss"]}))
'''


def _copy_with_probe(tmp_path, config_text=PROBE_CONFIG):
    for package in ("workloads", "orchestrator"):
        shutil.copytree(ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__"))
    probe = tmp_path / "workloads" / "models" / "probe"
    probe.mkdir()
    (probe / "__init__.py").write_text(config_text)
    (probe / "layer.py").write_text(PROBE_LAYER)


def _run(tmp_path, code):
    return subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True,
                          env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"})


def test_a_mixer_package_dropped_in_is_an_architecture_and_its_hybrid_that_train(tmp_path):
    _copy_with_probe(tmp_path)
    out = _run(tmp_path, CHECK)
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.splitlines()[-1])
    assert result["archs"] == [*PRESETS, "probe", "probe_hybrid"] and result["lr"] == 2e-3 and not result["heavy"]
    assert result["layers"] == ["probe", "attention"] and result["counted"] == result["built"]
    assert sorted(result["names"]) == sorted(["probe-cot-tiny-width8-n4-lr2e-3-s0", "probe-cot-tiny-width16-n4-lr2e-3-s0",
                                              "probe_hybrid-cot-tiny-width8-n4-lr2e-3-s0",
                                              "probe_hybrid-cot-tiny-width16-n4-lr2e-3-s0"])
    assert 0 <= result["gen"] <= 1 and result["loss"] > 0  # trained and evaluated, generation through its cache


@pytest.mark.parametrize("old, new, message", [
    ("presets=SIZED", 'presets={"tiny": SIZED["tiny"]}',
     "ProbeConfig: probe needs a preset for each size tiny, 0.5M, 1M, 2M and no other; missing ['0.5M', '1M', '2M']"),
    ('"0.5M": Stack(256, 2, mixer=ProbeConfig(width=512))', '"0.5M": Stack(32, 2)',
     "probe's preset '0.5M' has 2,272 trainable parameters, 0.00x its label"),
    ("lr=2e-3", "lr=0.0", "ProbeConfig: the learning rate of probe must be a positive float, got 0.0"),
    ('arch="probe"', 'arch="hybrid"', "ProbeConfig: architecture hybrid is already registered"),
    ('name: Literal["probe"] = "probe"', 'name: str = "probe"', "ProbeConfig needs a field name: Literal['<its name>']"),
], ids=["a size without a preset", "a preset not its label's size", "a rate of zero", "an architecture taken",
        "no discriminator"])
def test_a_mixer_breaking_the_contract_is_refused_at_import_naming_it(tmp_path, old, new, message):
    assert old in PROBE_CONFIG
    _copy_with_probe(tmp_path, PROBE_CONFIG.replace(old, new))
    out = _run(tmp_path, "import workloads.models")
    assert out.returncode != 0 and message in out.stderr, out.stderr[-2000:]


def test_every_architecture_has_a_preset_of_each_size_and_a_learning_rate():
    assert list(DEFAULT_LR) == list(PRESETS)
    for arch, presets in PRESETS.items():
        assert tuple(presets) == SIZES and DEFAULT_LR[arch] > 0, arch
        assert all(cfg.arch == arch and cfg.size == size for size, cfg in presets.items())
    for name, mixer in REGISTRY.items():
        assert MIXERS[name] is mixer.config and issubclass(mixer.config, MixerConfigBase)
        for arch in mixer.archs():
            assert all(type(cfg.mixer) is mixer.config and cfg.n_recurrent_layers for cfg in PRESETS[arch].values())
    # Every package under workloads/models/ is a registered mixer.
    packages = {p.name for p in (ROOT / "workloads" / "models").iterdir() if (p / "__init__.py").is_file()}
    assert packages == set(REGISTRY)
