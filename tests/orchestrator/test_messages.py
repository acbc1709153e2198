"""Messages that name the field, the value and the cause (issue 65, class 9)."""

import shutil
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from orchestrator.cli import app

ROOT = Path(__file__).parents[2]
STORED = ROOT / "tests" / "fixtures" / "stored_run" / "istree_micro"
runner = CliRunner()


def test_a_list_given_for_one_task_parameter_is_named_once_with_the_way_to_sweep_it(tmp_path):
    """`task_params.vocab: [64, 128]` gave three lines, one per kind of value
    (vocab.int, vocab.float, vocab.str), and not the axis that sweeps it."""
    spec = {"name": "v", "task": "ar", "task_params": {"vocab": [64, 128]},
            "axes": {"archs": ["transformer"], "setups": ["retrieval"], "sizes": ["tiny"], "n": [5]}}
    (tmp_path / "v.yaml").write_text(yaml.safe_dump(spec))
    result = runner.invoke(app, ["validate", str(tmp_path / "v.yaml")])
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [
        f"{tmp_path / 'v.yaml'}: task_params.vocab: one value, an integer or a number or a string, got [64, 128]; "
        "to sweep it, give it as axes.task.vocab: [64, 128]"]


def test_a_directory_given_as_a_spec_is_named_a_directory(tmp_path):
    for command in ("validate", "plan", "launch"):
        result = runner.invoke(app, [command, str(tmp_path)])
        assert result.exit_code == 2 and f"{tmp_path} is a directory, not a spec file" in result.output, result.output


def test_a_dimension_the_model_refuses_is_named_with_its_value(tmp_path):
    result = runner.invoke(app, ["train", "--arch", "mamba", "--size", "tiny", "--setup", "cot", "--n", "5",
                                 "--out", str(tmp_path / "t"), "--dim", "d_conv=1"])
    assert result.exit_code == 2 and "--dim d_conv=1: Input should be greater than 1" in result.output, result.output
    assert not (tmp_path / "t").exists()


def test_load_run_of_no_path_or_of_a_folder_with_no_run_says_so_and_expands_the_home(tmp_path, monkeypatch):
    from icr_sweep import load_run

    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match=r"load_run\(''\): name a run directory"):
        load_run("")
    with pytest.raises(FileNotFoundError, match=rf"{tmp_path} holds no run of icr-sweep"):
        load_run(str(tmp_path))
    monkeypatch.setenv("HOME", str(tmp_path))
    shutil.copytree(STORED, tmp_path / "r1")
    assert len(load_run("~/r1", evaluations=False)) == 2  # ~ expanded
    with pytest.raises(FileNotFoundError, match=rf"~/r2: no such run directory \({tmp_path}/r2\)"):
        load_run("~/r2")


def test_an_error_file_of_megabytes_is_shown_bounded(tmp_path):
    """An error.txt of 85 MB (one line) made `status --format json` print all of it."""
    import json

    run = tmp_path / "run"
    shutil.copytree(STORED, run)
    trial = run / "mamba-cot-tiny-n5-lr1e-2-s0"
    (trial / "result.json").unlink()
    for state in run.glob("experiment_state-*.json"):  # the trial's state read from its files: error
        state.unlink()
    (trial / "error.txt").write_text("Traceback: " + "x" * 5_000_000)
    result = runner.invoke(app, ["status", str(run), "--format", "json"])
    assert result.exit_code == 0, result.output[-2000:]
    assert len(result.output) < 20_000
    (row,) = [r for r in json.loads(result.stdout) if r["trial"] == trial.name]
    assert row["state"] == "error" and row["error"].startswith("xxx"), row  # the end of its last line
    assert row["error"].endswith("more characters)") and len(row["error"]) < 2100


def test_train_into_a_folder_holding_runs_is_refused_naming_them(tmp_path):
    """`train --out runs` where runs/ holds two sweeps wrote the trial's files beside them."""
    for name in ("a", "b"):
        shutil.copytree(STORED, tmp_path / "runs" / name)
    before = sorted(p.name for p in (tmp_path / "runs").iterdir())
    result = runner.invoke(app, ["train", "--arch", "transformer", "--size", "tiny", "--setup", "cot", "--n", "5",
                                 "--out", str(tmp_path / "runs"), "--samples", "64"])
    assert result.exit_code == 2, result.output
    assert f"--out {tmp_path / 'runs'} holds the sweeps a, b" in result.output, result.output
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == before


def test_a_model_option_takes_its_own_values_and_only_where_the_model_has_it(tmp_path):
    def train(arch, dim):
        return runner.invoke(app, ["train", "--arch", arch, "--size", "tiny", "--setup", "cot", "--n", "5",
                                   "--out", str(tmp_path / "t"), "--dim", dim])

    result = train("mamba", "init=mimetc")
    assert result.exit_code == 2 and "'mimetc' is not a value of init; its values: default, mimetic" in result.output
    result = train("transformer", "init=mimetic")
    assert result.exit_code == 2 and "--dim: transformer has no layer with init" in result.output, result.output
    assert not (tmp_path / "t").exists()
