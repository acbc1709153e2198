"""The mixer registry: a mixer is one package under workloads/models/ (config,
presets and learning rate in its torch-free `__init__`, its layer beside it);
dropping one in makes its architecture and its hybrid presets, rates, spec axes and
trainable models, with no other file edited. Shown on a copy of the code with one
more package: docs/extending.md's example, docs/examples/glr/, which also passes
the checks every registered mixer passes (tests/workloads/models/mixer_checks.py)."""

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

# The complete example of docs/extending.md, dropped in as a user would copy it.
EXAMPLE = ROOT / "docs" / "examples" / "glr"
EXAMPLE_CONFIG = (EXAMPLE / "__init__.py").read_text()

CHECK = '''
import json, sys
from orchestrator.grid import expand
from orchestrator.spec import SweepSpec
from workloads.config import trial_config
from workloads.models import PRESETS, build_model
from workloads.models.config import DEFAULT_LR
from workloads.tasks import IsTreeConfig
heavy = "torch" in sys.modules  # the registry, presets and the spec read no torch
spec = SweepSpec.model_validate({"name": "p", "axes": {"archs": ["glr", "glr_hybrid"], "setups": ["cot"],
                                 "sizes": ["tiny"], "n": [4], "model": {"width": [8, 16]}}})
names = [t.name for t in expand(spec)]
from workloads.train import run_trial
config = trial_config("glr_hybrid", "tiny", IsTreeConfig(n=4, setup="cot"), samples=256, batch_size=32,
                      warmup_samples=32, eval_every=256, val_samples=32, eval_batch_size=32, device="cpu")
metrics = run_trial(config)
model = build_model(PRESETS["glr"]["tiny"], 50)
import torch
from tests.workloads.models import mixer_checks
paper = PRESETS["glr"]["0.5M"]
torch.manual_seed(0)
mixer = paper.mixer.build(paper.d_model, n_layers=1, norm_eps=paper.norm_eps).double()
for prompt in (1, 7, 19):
    mixer_checks.cached_decoding_equals_the_full_forward(mixer, paper.d_model, prompt)
mixer_checks.future_inputs_leave_earlier_outputs_unchanged(mixer, paper.d_model)
mixer_checks.counts_follow_the_config(paper.mixer, paper.d_model)
print(json.dumps({"archs": list(PRESETS), "lr": DEFAULT_LR["glr_hybrid"], "names": names, "heavy": heavy,
                  "layers": PRESETS["glr_hybrid"]["tiny"].layers, "counted": PRESETS["glr"]["tiny"].n_params,
                  "built": model.num_params(), "gen": metrics["gen_accuracy"], "loss": metrics["val_loss"]}))
'''


def _copy_with_example(tmp_path, config_text=EXAMPLE_CONFIG):
    for package in ("workloads", "orchestrator"):
        shutil.copytree(ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__"))
    glr = tmp_path / "workloads" / "models" / "glr"
    shutil.copytree(EXAMPLE, glr, ignore=shutil.ignore_patterns("__pycache__"))
    (glr / "__init__.py").write_text(config_text)


def _run(tmp_path, code):
    """`code` on the copy (the repository after it, for tests/' shared checks)."""
    return subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True,
                          env={"PYTHONPATH": f"{tmp_path}:{ROOT}", "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"})


def test_the_example_mixer_dropped_in_is_an_architecture_and_its_hybrid_that_train(tmp_path):
    _copy_with_example(tmp_path)
    out = _run(tmp_path, CHECK)
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.splitlines()[-1])
    assert result["archs"] == [*PRESETS, "glr", "glr_hybrid"] and result["lr"] == 2e-3 and not result["heavy"]
    assert result["layers"] == ["glr", "attention"] and result["counted"] == result["built"]
    assert sorted(result["names"]) == sorted(["glr-cot-tiny-width8-n4-lr2e-3-s0", "glr-cot-tiny-width16-n4-lr2e-3-s0",
                                              "glr_hybrid-cot-tiny-width8-n4-lr2e-3-s0",
                                              "glr_hybrid-cot-tiny-width16-n4-lr2e-3-s0"])
    assert 0 <= result["gen"] <= 1 and result["loss"] > 0  # trained and evaluated, generation through its cache


@pytest.mark.parametrize("old, new, message", [
    ("presets=PRESETS", 'presets={"tiny": PRESETS["tiny"]}',
     "GLRConfig: glr needs a preset for each size tiny, 0.5M, 1M, 2M and no other; missing ['0.5M', '1M', '2M']"),
    ('"0.5M": Stack(256, 2, mixer=GLRConfig(width=512))', '"0.5M": Stack(32, 2)',
     "glr's preset '0.5M' has 2,272 trainable parameters, 0.00x its label"),
    ("lr=2e-3", "lr=0.0", "GLRConfig: the learning rate of glr must be a positive float, got 0.0"),
    ('arch="glr"', 'arch="transformer"', "GLRConfig: architecture transformer is already registered"),
    ('name: Literal["glr"] = "glr"', 'name: str = "glr"', "GLRConfig needs a field name: Literal['<its name>']"),
], ids=["a size without a preset", "a preset not its label's size", "a rate of zero", "an architecture taken",
        "no discriminator"])
def test_a_mixer_breaking_the_contract_is_refused_at_import_naming_it(tmp_path, old, new, message):
    assert EXAMPLE_CONFIG.count(old) == 1
    _copy_with_example(tmp_path, EXAMPLE_CONFIG.replace(old, new))
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
