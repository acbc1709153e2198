"""Evaluation specs (`kind: evaluation`, orchestrator/spec/evaluation.py) through validate,
plan, launch, a kill, status, resume and report, on tiny checkpoints the tests build."""

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from orchestrator.spec import SpecError, load_spec
from tests.orchestrator.e2e import cli, free_port, kill_leftovers
from tests.workloads.tasks.hotpotqa_questions import QUESTIONS
from tests.workloads.tiny_checkpoints import tiny_checkpoint
from workloads.evaluate_pretrained import ANSWERS_FILE, read_answers, run_evaluation


def _spec(tmp_path, **changes) -> dict:
    spec = {"kind": "evaluation", "name": "tiny_eval", "task_params": {"data": str(tmp_path / "dev.json"),
                                                                        "max_answer_tokens": 4},
            "n": 3, "conditions": ["gold", "gold_distractors"],
            "models": [{"arch": "transformer", "size": "tiny", "checkpoint": str(tmp_path / "llama")},
                       {"arch": "mamba", "size": "tiny", "checkpoint": str(tmp_path / "mamba")}],
            "eval": {"batch_size": 2, "device": "cpu", "report_every": 4},
            "resources": {"cpus_per_trial": 1, "device": "cpu", "max_failures": 0},
            "storage": str(tmp_path / "runs")}
    spec.update(changes)
    return spec


def _write(tmp_path, spec: dict) -> Path:
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


@pytest.mark.parametrize(("change", "says"), [
    ({"kind": "evalution"}, "kind: 'evalution' is not a kind of spec; the one kind is evaluation"),
    ({"condition": ["gold"]}, "condition: unknown key; allowed keys: kind, name, task, task_params, n, conditions"),
    ({"conditions": ["gold", "open_book"]}, "conditions[1]: Input should be 'closed_book', 'gold', "
                                            "'gold_distractors' or 'distractors'"),
    ({"conditions": ["gold", "gold"]}, "repeated conditions in ['gold', 'gold']"),
    ({"n": 0}, "n: Input should be greater than or equal to 1 (got 0)"),
    ({"n": 8000}, "n: Input should be less than or equal to 7405 (got 8000)"),
    ({"storage": "s3://bucket/runs"}, "an evaluation's answers are kept on local storage: a path or file://...; "
                                      "got 's3://bucket/runs'"),
    ({"models": [{"arch": "mamba", "size": "1.5B", "checkpoint": "goombalab/Phi-Mamba", "loader": "phi_mamba",
                  "tokenizer": "microsoft/phi-1_5"}]}, "models[0]: loader phi_mamba needs `code`"),
    ({"models": [{"arch": "mamba", "size": "tiny", "checkpoint": "a"}, {"arch": "mamba", "size": "tiny",
                                                                       "checkpoint": "b"}]},
     "models[1]: mamba tiny is models[0] too"),
    ({"task_params": {"max_answer_tokens": 0}}, "task_params.max_answer_tokens: Input should be greater than or "
                                                 "equal to 1"),
    ({"task_params": {"datum": "x.json"}}, "task_params.datum: Extra inputs are not permitted"),
])
def test_a_bad_evaluation_spec_is_refused_naming_the_field(tmp_path, change, says):
    spec = _spec(tmp_path, **change)
    if "condition" in change:
        spec.pop("conditions")
    with pytest.raises(SpecError) as e:
        load_spec(_write(tmp_path, spec))
    assert says in str(e.value), str(e.value)


def test_the_papers_evaluation_spec_plans_a_gpu_share_per_model_and_condition():
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run(cli("plan", str(root / "sweeps/hotpotqa_pretrained.yaml"), "--format", "json",
                             "--device-name", "NVIDIA H100 80GB HBM3", ray_temp="", port=0)[:-6],
                         capture_output=True, text=True, cwd=root, timeout=120)
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)
    assert {(r["arch"], r["condition"]) for r in rows} == {
        (a, c) for a in ("transformer", "mamba", "hybrid")
        for c in ("closed_book", "gold", "gold_distractors", "distractors")}
    assert {r["gpus"] for r in rows} == {0.5} and {r["questions"] for r in rows} == {7405}


def _questions(tmp_path, copies: int) -> list[str]:
    """The test questions `copies` times over under new ids: enough for a kill to land midway."""
    records = [dict(q, _id=f"{q['_id']}-{i}") for i in range(copies) for q in QUESTIONS]
    (tmp_path / "dev.json").write_text(json.dumps(records))
    return [r["_id"] for r in records]


def test_a_launch_lacking_its_data_or_checkpoints_names_each_and_starts_nothing(tmp_path, ray_temp):
    spec = _spec(tmp_path)
    out = subprocess.run(cli("launch", str(_write(tmp_path, spec)), "--no-dashboard", ray_temp=ray_temp,
                             port=free_port()), capture_output=True, text=True, timeout=300)
    assert out.returncode == 2, out.stdout + out.stderr
    said = " ".join(out.stderr.split())
    assert "Nothing was started" in said and "hotpot_dev_distractor_v1.json" in said
    assert f"models[0]: the checkpoint '{tmp_path / 'llama'}' is not on this machine" in said
    assert f"models[1]: the tokenizer '{tmp_path / 'mamba'}' is not on this machine" in said
    assert "Starting a local Ray" not in said
    assert not (tmp_path / "runs" / "tiny_eval").exists() or not any((tmp_path / "runs" / "tiny_eval").iterdir())


def _midway(proc, run_dir: Path, total: int, before: dict) -> str:
    """Waits for an evaluation of the run to have answered more than `before` held of
    it, and at least 5 questions, without finishing; returns its name."""
    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None:
        counts = {p.parent.name: len(read_answers(p)) for p in run_dir.glob(f"*/{ANSWERS_FILE}")}
        for name, count in counts.items():
            if max(5, before.get(name, 0) + 1) <= count < total:
                return name
        time.sleep(0.05)
    raise AssertionError(f"never saw an evaluation midway: {proc.communicate()[0][-3000:]}")


def _counts(run_dir: Path) -> dict:
    return {p.parent.name: len(read_answers(p)) for p in run_dir.glob(f"*/{ANSWERS_FILE}")}


@pytest.mark.slow
def test_an_evaluation_run_stopped_killed_and_resumed_answers_every_question_once_and_reports(tmp_path, ray_temp):
    """Ctrl-C midway, a resume killed midway with Tune's state then lost, a resume to the end."""
    ids = _questions(tmp_path, 20)
    tiny_checkpoint(tmp_path / "llama", "llama")
    tiny_checkpoint(tmp_path / "mamba", "mamba", seed=1)
    spec = _spec(tmp_path, n=len(ids))
    spec["models"].append({"arch": "hybrid", "size": "tiny", "checkpoint": str(tmp_path / "llama")})
    spec["eval"]["batch_size"] = 1
    path, run_dir = _write(tmp_path, spec), tmp_path / "runs" / "tiny_eval"

    def start(*args):
        return subprocess.Popen(cli(*args, "--no-dashboard", ray_temp=ray_temp, port=free_port()),
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)

    # Ctrl-C midway: the launch says how to resume, exits 130, and keeps every answer given.
    proc = start("launch", str(path))
    _midway(proc, run_dir, len(ids), {})
    os.killpg(proc.pid, signal.SIGINT)
    out = proc.communicate(timeout=300)[0]
    assert proc.returncode == 130, out[-3000:]
    assert f"icr-sweep resume {run_dir}" in out, out[-3000:]
    stopped = _counts(run_dir)
    status = subprocess.run(cli("status", str(run_dir), "--format", "json", ray_temp="", port=0)[:-6],
                            capture_output=True, text=True, timeout=120)
    states = {r["trial"]: (r["state"], r["questions"]) for r in json.loads(status.stdout)}
    assert len(states) == 6 and {q for _, q in states.values()} - {0} and all(
        state != "running" for state, _ in states.values()), states
    assert {name: q for name, (_, q) in states.items() if q} == stopped

    # A resume killed midway (the driver, no chance to clean up), then resumed to the end.
    proc = start("resume", str(run_dir))
    midway = _midway(proc, run_dir, len(ids), stopped)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    kill_leftovers(ray_temp)
    # Tune's record of the run lost too (as a driver killed before Tune first saved it):
    # the answers files are the record, and the run is rebuilt from the spec.
    for state in [*run_dir.glob("experiment_state-*.json"), run_dir / "tuner.pkl"]:
        state.unlink()
    resumed = subprocess.run(cli("resume", str(run_dir), "--no-dashboard", ray_temp=ray_temp, port=free_port()),
                             capture_output=True, text=True, timeout=600)
    console = resumed.stdout + resumed.stderr
    assert resumed.returncode == 0, console[-3000:]
    assert "the run is rebuilt from the spec and the answers kept" in " ".join(console.split()), console[-3000:]
    for folder in sorted(run_dir.glob(f"*/{ANSWERS_FILE}")):
        lines = [json.loads(line)["id"] for line in folder.read_text().splitlines()]
        assert lines == ids, folder  # every question once, in the data set's order: none asked twice
    assert len(list(run_dir.glob(f"*/{ANSWERS_FILE}"))) == 6
    # The evaluation killed midway answered as one run straight through.
    from orchestrator.spec.evaluation import EvaluationSpec

    config = next(e for e in EvaluationSpec.model_validate(spec).evaluations() if e.name == midway)
    straight = run_evaluation(config, tmp_path / "straight")
    assert read_answers(tmp_path / "straight" / ANSWERS_FILE) == read_answers(run_dir / midway / ANSWERS_FILE)
    report = (run_dir / "report.md").read_text()
    assert "6 of 6 evaluations finished" in report and "## The paper's subset" in report
    assert f"{straight['exact_match']:.3f} ({straight['f1']:.3f})" in report
    assert "the distilled RNN lags the Transformer" in report and "the hybrid tracks the Transformer" in report
    again = subprocess.run(cli("status", str(run_dir), ray_temp="", port=0)[:-6], capture_output=True, text=True,
                           timeout=120)
    assert again.returncode == 0 and again.stdout.strip().endswith("6 finished"), again.stdout


def _answers(folder: Path, right: set, ids: list[str], params: int) -> None:
    folder.mkdir(parents=True)
    (folder / "model.json").write_text(json.dumps({"params": params}))
    (folder / ANSWERS_FILE).write_text("".join(json.dumps({"id": q, "prediction": "x", "exact_match": q in right,
                                                           "f1": float(q in right)}) + "\n" for q in ids))


@pytest.mark.parametrize(("mamba_right", "verdict"), [(150, "Reproduced"), (295, "Not reproduced")])
def test_the_findings_are_decided_on_the_questions_every_model_answers_given_the_gold_paragraphs(
        tmp_path, mamba_right, verdict):
    from orchestrator import evaluations
    from orchestrator.spec.evaluation import EvaluationSpec

    spec = EvaluationSpec.model_validate(_spec(tmp_path, n=400, models=[
        {"arch": a, "size": "1.4B", "checkpoint": a} for a in ("transformer", "mamba", "hybrid")]))
    ids = [f"q{i}" for i in range(400)]
    gold = {"transformer": set(ids[:380]), "mamba": set(ids[:350]) | {"q390"}, "hybrid": set(ids[:360])}
    on = set(ids[:350])  # the subset: every model right given the gold paragraphs
    long = {"transformer": set(ids[:300]), "mamba": set(ids[:mamba_right]), "hybrid": set(ids[:290]) | {"q399"}}
    run = tmp_path / "runs" / "tiny_eval"
    for e in spec.evaluations():
        _answers(run / e.name, (gold if e.setup == "gold" else long)[e.model.arch], ids,
                 {"transformer": 1_418_270_720, "mamba": 1_510_000_000, "hybrid": 1_530_000_000}[e.model.arch])
    assert evaluations.subset(run, spec) == ids[:350]
    table = evaluations.on_subset(run, spec, ids[:350]).set_index(["arch", "setup"])
    assert table.loc[("mamba", "gold_distractors"), "val_exact_match"] == len(on & long["mamba"]) / 350
    assert table.loc[("hybrid", "gold_distractors"), "val_exact_match"] == 290 / 350  # q399: not in the subset
    assert set(table["val_samples"]) == {350}
    report = evaluations.report(run, spec)
    assert "350 of 400 questions are answered exactly by every model given the gold paragraphs" in report
    lag = next(line for line in report.splitlines() if "lags the Transformer" in line)
    tracks = next(line for line in report.splitlines() if "tracks the Transformer" in line)
    assert lag.startswith(f"- **{verdict}**"), lag
    assert tracks.startswith("- **Reproduced**") and "0.829" in tracks and "0.857" in tracks, tracks
    assert "| transformer 1.4B | 0.950 (0.950) | 0.750 (0.750) |" in report  # every question asked: 380/400, 300/400


def test_schema_prints_the_evaluation_specs_json_schema_and_names_a_bad_kind():
    from typer.testing import CliRunner

    from orchestrator.cli import app

    result = CliRunner().invoke(app, ["schema", "--kind", "evaluation"])
    schema = json.loads(result.output)
    assert {"kind", "name", "n", "conditions", "models", "eval", "resources", "storage"} <= schema["properties"].keys()
    bad = CliRunner().invoke(app, ["schema", "--kind", "evals"])
    assert bad.exit_code == 2 and "the kinds of spec are sweep and evaluation" in bad.output


def test_tasks_names_the_evaluation_task_beside_the_trained_ones():
    from typer.testing import CliRunner

    from orchestrator.cli import app

    out = CliRunner().invoke(app, ["tasks"]).output
    assert "Evaluated, not trained (a spec of kind: evaluation" in out and "hotpotqa" in out
