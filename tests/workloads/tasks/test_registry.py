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
    generates = False

    def __init__(self, config):
        self.config = config
        self.vocab_size, self.pad_id, self.max_length, self.uses_retriever = 8, 0, config.n, False

    def batch(self, seed, stream, start, count):
        raise NotImplementedError

    def samples(self, seed, stream, start, count):
        return []


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


def _probe_classes(**methods):
    """A config and a task class like PROBE_TASK's, with `methods` (name: function) on the task."""
    from typing import Literal

    from workloads.tasks.base import TaskBase, TaskConfigBase

    class ProbeConfig(TaskConfigBase):
        name: Literal["probe"] = "probe"
        n: int = 4
        setup: Literal["vanilla", "retrieval"] = "vanilla"

    def __init__(self, config):
        self.vocab_size, self.pad_id, self.max_length, self.uses_retriever = 8, 0, 9, False
        self.prompt_length, self.end_search_id = 3, 5

    return ProbeConfig, type("ProbeTask", (TaskBase,), {"__init__": __init__, **methods})


def _contract_methods():
    return {"batch": lambda self, seed, stream, start, count: None,
            "samples": lambda self, seed, stream, start, count: [],
            "stopped": lambda self, seqs, pos: None, "answers": lambda self, seqs: None,
            "retrieve_rows": lambda self, tokens, lengths, rows: None}


def test_register_refuses_a_task_lacking_a_method_of_the_trainers_half_naming_it():
    import pytest

    from workloads.tasks import TASKS, register

    methods = _contract_methods()
    for missing in methods:  # answers and stopped: it generates; retrieve_rows: it has a retrieval setup
        with pytest.raises(TypeError, match=rf"task ProbeTask must define {missing}\(self, "):
            register(*_probe_classes(**{k: v for k, v in methods.items() if k != missing}))
    no_generation = _probe_classes(**{k: v for k, v in methods.items() if k not in ("stopped", "answers", "retrieve_rows")})
    no_generation[1].generates = False
    with pytest.raises(TypeError, match="must define retrieve_rows"):  # not stopped: it does not generate
        register(*no_generation)
    with pytest.raises(TypeError, match=r"ProbeTask.batch takes \(self, seed, start, count\); the contract's is "
                                        r"\(self, seed, stream, start, count\)"):
        register(*_probe_classes(**{**methods, "batch": lambda self, seed, start, count: None}))
    assert "probe" not in TASKS


def test_a_task_built_without_an_attribute_of_the_trainers_half_is_refused_naming_it(monkeypatch):
    import pytest

    from workloads.tasks import TASKS, build_task, register

    config_cls, task_cls = _probe_classes(**_contract_methods())
    monkeypatch.setitem(TASKS, "probe", (config_cls, task_cls))
    register(config_cls, task_cls)  # its methods are all there
    assert type(build_task(config_cls(setup="retrieval"))) is task_cls

    def no_end(self, config):
        self.vocab_size, self.pad_id, self.max_length, self.uses_retriever, self.prompt_length = 8, 0, 9, True, 3

    task_cls.__init__ = no_end
    with pytest.raises(TypeError, match=r"task ProbeTask must set end_search_id to an int in its __init__, got None"):
        build_task(config_cls(setup="retrieval"))
    task_cls.__init__ = lambda self, config: no_end(self, config) or setattr(self, "uses_retriever", 1)
    with pytest.raises(TypeError, match=r"must set uses_retriever to a bool in its __init__, got 1"):
        build_task(config_cls())
