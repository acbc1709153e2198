"""The task registry: a task is one module under workloads/tasks/; dropping one in
registers it, its config joins the discriminated TaskConfig, and nothing else
changes. Shown on a copy of the package with one more module."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parents[3]

PROBE_TASK = '''
from typing import Literal

from workloads.tasks import register
from workloads.tasks.base import TaskBase, TaskConfigBase


class ProbeConfig(TaskConfigBase):
    name: Literal["probe"] = "probe"
    n: int = 4
    setup: Literal["vanilla"] = "vanilla"


class ProbeTask(TaskBase):
    def __init__(self, config):
        self.config = config


register(ProbeConfig, ProbeTask)
'''

CHECK = '''
import json
from workloads.config import TrialConfig, trial_config
from workloads.tasks import TASKS, IsTreeConfig, build_task
probe = trial_config("mamba", "tiny", IsTreeConfig(n=6)).model_dump(mode="json")
probe["task"] = {"name": "probe", "n": 9}
trial = TrialConfig.model_validate(probe)
istree = TrialConfig.model_validate(trial_config("mamba", "tiny", IsTreeConfig(n=6)).model_dump(mode="json"))
try:
    TrialConfig.model_validate({**probe, "task": {"name": "nope"}})
    refused = ""
except ValueError as e:
    refused = str(e)
print(json.dumps({"tasks": sorted(TASKS), "probe": type(build_task(trial.task)).__name__, "n": trial.task.n,
                  "istree": type(istree.task).__name__, "refused": refused}))
'''


def test_a_task_module_dropped_into_the_package_is_registered(tmp_path):
    shutil.copytree(ROOT / "workloads", tmp_path / "workloads", ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "workloads" / "tasks" / "probe.py").write_text(PROBE_TASK)
    out = subprocess.run([sys.executable, "-c", CHECK], cwd=tmp_path, capture_output=True, text=True,
                         env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.splitlines()[-1])
    from workloads.tasks import TASKS

    assert result["tasks"] == sorted([*TASKS, "probe"]) and result["probe"] == "ProbeTask" and result["n"] == 9
    assert result["istree"] == "IsTreeConfig"
    assert "does not match any of the expected tags" in result["refused"] and "'probe'" in result["refused"], result["refused"]


def test_a_task_breaking_the_contract_is_refused_at_import_naming_it(tmp_path):
    # A `setup` that is any string (not a Literal of the setups) once crashed `icr-sweep
    # tasks` and spec loading with an AttributeError far from the task's module.
    shutil.copytree(ROOT / "workloads", tmp_path / "workloads", ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "workloads" / "tasks" / "probe.py").write_text(
        PROBE_TASK.replace('setup: Literal["vanilla"] = "vanilla"', 'setup: str = "vanilla"'))
    out = subprocess.run([sys.executable, "-c", "import workloads.tasks"], cwd=tmp_path, capture_output=True, text=True,
                         env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"})
    assert out.returncode != 0
    assert "ProbeConfig.setup must be a Literal of the setup names" in out.stderr, out.stderr[-2000:]


def test_every_task_gives_the_contract_the_orchestrator_reads():
    from workloads.tasks import TASKS

    for name, (config_cls, task_cls) in TASKS.items():
        setups = config_cls.setups()
        lo, hi = config_cls.n_range()
        assert setups and "vanilla" in setups and 1 <= lo <= 8 <= hi, name
        config = config_cls(n=max(lo, 8), setup=setups[-1])  # every other parameter has a default
        assert config.vocab_size > 0 and config.longest_sample > 0
        assert isinstance(task_cls.generates, bool) and isinstance(task_cls.label_text(True), str)
        assert set(task_cls.exact_match_chance) <= set(setups)


def test_helpers_are_not_task_modules():
    from workloads.tasks import TASKS, _is_task_module

    assert not _is_task_module("istree_kernels") and not _is_task_module("istree_oracle") and not _is_task_module("_batch")
    assert _is_task_module("istree") and {"istree", "ar", "index", "cgram", "mqar"} <= set(TASKS)
