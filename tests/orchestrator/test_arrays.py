"""How a sweep's trials become arrays (orchestrator/arrays.py, issue 50): only
trials equal but for rate and seed share one, at most `fuse` to an array, every
trial in exactly one; `fuse: auto` resolves to 1 on CPU and to what a GPU's memory
holds there; `plan` shows each trial's array and its share; bad values are named."""

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from orchestrator.arrays import MOST_MEMBERS, arrays, member_names, members_per_array
from orchestrator.cli import app
from orchestrator.grid import expand
from orchestrator.packing import gpu_memory_gb
from orchestrator.spec import SpecError, load_spec
from workloads.arrays import array_key
from workloads.config import TrialConfig

SWEEPS = Path(__file__).parents[2] / "sweeps"
runner = CliRunner()


@pytest.mark.parametrize("fuse", [1, 2, 3, 4, 7, 64])
def test_every_trial_is_in_one_array_of_at_most_fuse_trials_that_train_alike(fuse):
    trials = [t.model_dump(mode="json") for t in expand(load_spec(SWEEPS / "istree_grid.yaml"))]
    groups = arrays(trials, fuse)
    names = [name for a in groups for name in member_names(a)]
    assert sorted(names) == sorted(TrialConfig.model_validate(t).name for t in trials)  # each once
    keys = {json.dumps(array_key(TrialConfig.model_validate(t)), sort_keys=True) for t in trials}
    assert len(groups) >= len(keys)
    for a in groups:
        members = [TrialConfig.model_validate(m) for m in a["members"]]
        assert 1 <= len(members) <= fuse and a["name"] == "array-" + members[0].name
        assert all(array_key(m) == array_key(members[0]) for m in members)
    for key in keys:  # a key's trials split as evenly as they go: sizes differ by one at most
        sizes = [len(a["members"]) for a in groups
                 if json.dumps(array_key(TrialConfig.model_validate(a["members"][0])), sort_keys=True) == key]
        assert max(sizes) - min(sizes) <= 1 and len(sizes) == -(-sum(sizes) // fuse)  # as few arrays as fuse allows


@pytest.mark.parametrize("setups, sizes", [(["retrieval"], ["0.5M"]),
                                           (["vanilla", "cot", "retrieval"], ["0.5M", "1M", "2M"])])
def test_fuse_auto_is_one_on_cpu_and_what_a_gpu_holds_on_a_gpu(setups, sizes):
    """As many members as one GPU holds by every trial's array estimate (its
    members' activations and state, the worker and validation set once)."""
    spec = load_spec(SWEEPS / "istree_grid.yaml").model_copy(deep=True)
    resources = spec.resources.model_copy(update={"fuse": "auto", "gpu_memory_gb": 80.0})
    trials = [t for t in expand(spec) if t.setup in setups and t.model.size in sizes]
    assert members_per_array(resources, False, trials) == 1
    on_gpu = members_per_array(resources, True, trials)
    from workloads.memory import GiB, array_estimate

    room = gpu_memory_gb(resources) * 0.9 * GiB
    assert 1 <= on_gpu <= MOST_MEMBERS and all(array_estimate(t, on_gpu).total <= room for t in trials)
    assert on_gpu == MOST_MEMBERS or any(array_estimate(t, on_gpu + 1).total > room for t in trials)
    assert members_per_array(resources.model_copy(update={"fuse": 5}), True, trials) == 5


@pytest.mark.parametrize("value, message", [
    (0, "resources.fuse: a whole number of trials, 1 or more, or auto; got 0"),
    (2.5, "resources.fuse: a whole number of trials, 1 or more, or auto; got 2.5"),
    ("many", "resources.fuse: a whole number of trials, 1 or more, or auto; got 'many'"),
    (True, "resources.fuse: a whole number of trials, 1 or more, or auto; got True"),
])
def test_a_bad_fuse_is_named_with_what_is_allowed(tmp_path, value, message):
    spec = yaml.safe_load((SWEEPS / "istree_micro.yaml").read_text())
    spec["resources"]["fuse"] = value
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(spec))
    with pytest.raises(SpecError, match=message.replace("(", r"\(").replace(")", r"\)").replace(".", r"\.")):
        load_spec(path)


def test_plan_shows_each_trials_array_and_its_share(tmp_path):
    spec = yaml.safe_load((SWEEPS / "istree_micro.yaml").read_text())
    spec["axes"]["seeds"] = [0, 1, 2]
    spec["resources"]["fuse"] = 2
    path = tmp_path / "fused.yaml"
    path.write_text(yaml.safe_dump(spec))
    result = runner.invoke(app, ["plan", str(path), "--format", "json", "--device-name", "NVIDIA A100-SXM4-40GB"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)
    by_array = {}
    for r in rows:
        by_array.setdefault(r["array"], []).append(r)
    assert sorted(len(v) for v in by_array.values()) == [1, 1, 2, 2]  # three seeds per arch: 2 + 1
    from workloads.memory import GiB, array_estimate

    alone = runner.invoke(app, ["plan", str(SWEEPS / "istree_micro.yaml"), "--format", "json",
                                "--device-name", "NVIDIA A100-SXM4-40GB"])
    one = {r["arch"]: r["gpu_mem_gb"] for r in json.loads(alone.output)}
    for name, members in by_array.items():
        assert name.endswith(f" ({len(members)})")
        k = len(members)
        for m in members:  # the array's estimate: its members' activations and state, one worker
            expected = array_estimate(TrialConfig.model_validate(m["config"]), k).total / GiB
            assert m["gpu_mem_gb"] == pytest.approx(expected, abs=0.1)
            assert m["gpu_mem_gb"] == pytest.approx(one[m["arch"]], abs=0.1) if k == 1 else \
                m["gpu_mem_gb"] < k * one[m["arch"]]
    text = runner.invoke(app, ["plan", str(path)]).output
    assert "resources.fuse 2: 6 trials run as 4 trial arrays of at most 2" in text
