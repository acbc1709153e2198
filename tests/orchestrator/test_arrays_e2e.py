"""Trial arrays on Ray Tune, end to end (issue 50): a sweep launched with
`resources.fuse` lists the trials of the same sweep run alone, with the same
figures (within fp32 rounding), each member a trial of its own in every tracker;
an array stopped with Ctrl-C, killed, and resumed ends with every evaluation of
every member once; a member whose loss goes non-finite fails alone."""

import json
import os
import re
import signal
import subprocess
import time

import pytest
import yaml

from orchestrator.rundir import load_trials, read_results
from tests.orchestrator.e2e import SWEEPS, cli, free_port, kill_leftovers, launch_to_the_end, results_so_far
from tests.orchestrator.test_tracking import _events, finished_wandb_logs, wandb_records, wandb_timelines

pytestmark = pytest.mark.slow

FIGURES = ("val_loss", "val_token_accuracy", "val_exact_match", "train_loss", "test_exact_match")


def _spec(name: str, fuse: int, **training) -> dict:
    """Two archs at three seeds: an array of three per arch (one rate each)."""
    spec = yaml.safe_load((SWEEPS / "istree_micro.yaml").read_text())
    spec.update(name=name, axes=dict(archs=["transformer", "mamba"], setups=["cot"], sizes=["tiny"], n=[5],
                                     seeds=[0, 1, 2]))
    spec["training"].update(length_groups=1, **training)  # one pass per batch on both sides (test_arrays._configs)
    spec["resources"].update(fuse=fuse)
    return spec


def _alone(spec_path) -> dict:
    """Each trial of the spec run alone, as a 1-CPU trial's worker runs it (run_trial
    at one thread), in this process: its final figures, by trial name. (Until issue
    63 a second sweep on Ray ran them: 60 core-seconds for the same arithmetic.)"""
    from orchestrator.grid import expand
    from orchestrator.spec import load_spec
    from workloads.threads import bound_threads
    from workloads.train import run_trial

    bound_threads(1)
    return {t.name: run_trial(t) for t in expand(load_spec(spec_path))}


def test_a_fused_sweep_lists_the_trials_and_figures_of_one_run_alone(tmp_path, ray_temp, thread_pools):
    fused = _spec("fused", 3)
    fused["tracking"] = dict(tensorboard=True, mlflow={}, wandb=dict(project="icr-test", mode="offline"))
    spec_path, storage = launch_to_the_end(fused, tmp_path, ray_temp)
    console = (tmp_path / "console.txt").read_text()
    run = storage / "fused"
    started = re.findall(r"^\[[\d:]+\] started (.+?) · ", console, flags=re.M)
    assert sorted(len(line.split(", ")) for line in started) == [3, 3], console[-3000:]  # one Tune trial per array
    assert "Failed to fetch metrics" not in console and "Traceback" not in console, console[-3000:]
    ours, theirs = load_trials(run).set_index("trial"), _alone(spec_path)
    assert sorted(ours.index) == sorted(theirs) and len(ours) == 6
    assert (ours["state"] == "finished").all()
    for figure in FIGURES:
        for trial in ours.index:
            assert ours.at[trial, figure] == pytest.approx(theirs[trial][figure], rel=1e-3, abs=1e-4), (trial, figure)
    # Each member's directory is a trial's; its checkpoints are its folder in its array's.
    for trial in ours.index:
        params = json.loads((run / trial / "params.json").read_text())
        assert params["array"] == f"array-{trial.split('-s')[0]}-s0", params["array"]
        assert [r["samples"] for r in read_results(run / trial) if r["evaluated"]] == [1024, 2048]
        assert list((run / params["array"]).glob(f"checkpoint_*/{trial}/checkpoint.pt"))
        assert len(list((run / trial).glob("events.out.tfevents.*"))) == 1
    # Every tracker: one run per member, named after it, with its own evaluations.
    import mlflow

    client = mlflow.tracking.MlflowClient(f"sqlite:///{run / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name("fused").experiment_id])
    assert sorted(r.info.run_name for r in runs) == sorted(ours.index)
    for r in runs:
        history = sorted(client.get_metric_history(r.info.run_id, "val/loss"), key=lambda m: m.step)
        expected = [row["val_loss"] for row in read_results(run / r.info.run_name) if row["evaluated"]]
        assert [m.value for m in history] == pytest.approx(expected) and r.info.status == "FINISHED"
    names = set()
    for log in finished_wandb_logs(run / "wandb", count=6):
        names |= {record.run.display_name for record in wandb_records(log) if record.HasField("run")}
    assert names == set(ours.index)
    trial = ours.index[0]
    (events,) = (run / trial).glob("events.out.tfevents.*")
    steps = sorted({event.step for event in _events(events) for v in event.summary.value if v.tag == "val/loss"})
    assert steps == [1024, 2048]


def test_an_array_stopped_killed_and_resumed_keeps_every_evaluation_once(tmp_path, ray_temp):
    """Ctrl-C, resume, SIGKILL of the driver, resume: every member's evaluations
    once, in its results and in each tracker, which follows the member across the
    three drivers as one run (issue 53)."""
    spec = _spec("arrays", 3, samples=6144, eval_every=512)  # twelve evaluations at half the training (issue 63)
    spec["axes"]["archs"] = ["transformer"]
    spec["tracking"] = dict(tensorboard=True, mlflow={}, wandb=dict(project="icr-test", mode="offline"))
    spec_path, storage = tmp_path / "arrays.yaml", tmp_path / "runs"
    spec_path.write_text(yaml.safe_dump(spec))
    run = storage / "arrays"
    members = [f"transformer-cot-tiny-n5-lr3e-3-s{seed}" for seed in range(3)]

    def start(*args):
        return subprocess.Popen(cli(*args, ray_temp=ray_temp, port=free_port()), stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, start_new_session=True)

    def wait_for(evaluations: int, proc) -> None:
        deadline = time.time() + 600
        while time.time() < deadline and proc.poll() is None:
            rows = [[r for r in results_so_far(run / m) if r.get("evaluated")] for m in members]
            if all(len(r) >= evaluations for r in rows):
                return
            time.sleep(0.1)
        raise AssertionError(f"never saw {evaluations} evaluations of each member: {proc.communicate()[0][-3000:]}")

    proc = start("launch", str(spec_path), "--storage", str(storage))
    wait_for(2, proc)
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 130 and f"icr-sweep resume {run}" in out, out[-3000:]
    states = load_trials(run).set_index("trial")["state"]
    assert sorted(states.index) == members and (states == "interrupted").all(), states
    stops = {m: [r for r in read_results(run / m) if r.get("checkpoint_reason") == "stop"] for m in members}
    assert all(stops.values()), stops  # each member checkpointed the step the array was at

    proc = start("resume", str(run))
    wait_for(8, proc)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    kill_leftovers(ray_temp)

    result = subprocess.run(cli("resume", str(run), ray_temp=ray_temp, port=free_port()), capture_output=True,
                            text=True, timeout=900)
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    states = load_trials(run).set_index("trial")["state"]
    assert (states == "finished").all(), states
    for m in members:
        evaluations = [r["samples"] for r in read_results(run / m) if r.get("evaluated", True)]
        assert evaluations == list(range(512, 6144 + 1, 512)), (m, evaluations)
    _each_tracker_holds_every_evaluation_once(run, members)


def _each_tracker_holds_every_evaluation_once(run, members) -> None:
    """One MLflow run per member, FINISHED, and its TensorBoard files: each
    evaluation once, in order, with its results' figure (a resumed trial redoes the
    rows past its checkpoint: they are logged once; the rows of the killed driver
    are there). One W&B run per member (its offline folders, one per driver that ran
    it, carry one id, which `wandb sync` uploads as one run), each evaluation at
    most once: W&B buffers its offline log, and a killed driver's is lost."""
    import mlflow

    expected = {m: [(r["samples"], r["val_loss"]) for r in read_results(run / m) if r.get("evaluated", True)]
                for m in members}

    def same(logged, want, what):
        assert [s for s, _ in logged] == [s for s, _ in want], (what, logged)
        assert [v for _, v in logged] == pytest.approx([v for _, v in want]), what

    client = mlflow.tracking.MlflowClient(f"sqlite:///{run / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name(run.name).experiment_id])
    assert sorted(r.info.run_name for r in runs) == sorted(members)
    for r in runs:
        assert r.info.status == "FINISHED", r.info
        same(sorted((m.step, m.value) for m in client.get_metric_history(r.info.run_id, "val/loss")),
             expected[r.info.run_name], f"MLflow {r.info.run_name}")
    for m in members:
        files = sorted((run / m).glob("events.out.tfevents.*"))
        same([(event.step, v.simple_value) for f in files for event in _events(f) for v in event.summary.value
              if v.tag == "val/loss"], expected[m], f"TensorBoard {m}")
    deadline = time.time() + 120  # W&B's service writes an offline run's last records after its trial returned
    last = {m: expected[m][-1][0] for m in members}
    while any(last[m] not in dict(wandb_timelines(run / "wandb", "val/loss").get(m, ((), []))[1]) for m in members):
        assert time.time() < deadline, wandb_timelines(run / "wandb", "val/loss")
        time.sleep(1)
    timelines = wandb_timelines(run / "wandb", "val/loss")
    for m in members:
        ids, timeline = timelines[m]
        assert len(ids) == 1, (m, ids)
        same(timeline, [(s, v) for s, v in expected[m] if s in dict(timeline)], f"W&B {m}")  # each once, in order
        assert {512, 1024, last[m]} <= set(dict(timeline)), (m, timeline)  # before the stop, after the kill


def test_a_member_whose_loss_is_not_finite_fails_alone(tmp_path, ray_temp):
    spec = _spec("diverges", 2, samples=2048)
    spec["axes"].update(archs=["transformer"], seeds=[0])
    spec["lr"] = {"transformer": [3.0e-3, 1.0e12]}  # the second rate diverges
    spec["tracking"] = dict(mlflow={})
    spec_path, storage = tmp_path / "diverges.yaml", tmp_path / "runs"
    spec_path.write_text(yaml.safe_dump(spec))
    result = subprocess.run(cli("launch", str(spec_path), "--storage", str(storage), ray_temp=ray_temp, port=free_port()),
                            capture_output=True, text=True, timeout=900)
    out = result.stdout + result.stderr
    assert result.returncode == 1 and "1 trial(s) diverged" in out and "a member of a trial array" in out, out[-3000:]
    assert re.search(r"failed transformer-cot-tiny-n5-lr1e12-s0: NonFiniteLoss", out), out[-3000:]
    assert "finished transformer-cot-tiny-n5-lr3e-3-s0: exact match" in out, out[-3000:]  # the array trained on
    run = storage / "diverges"
    trials = load_trials(run).set_index("trial")
    assert dict(trials["state"]) == {"transformer-cot-tiny-n5-lr3e-3-s0": "finished",
                                     "transformer-cot-tiny-n5-lr1e12-s0": "error"}, trials[["state", "error"]]
    assert re.search(r"NonFiniteLoss: loss is (nan|inf) at step \d+ \(transformer-cot-tiny-n5-lr1e12-s0\)",
                     trials.at["transformer-cot-tiny-n5-lr1e12-s0", "error"]), trials["error"].tolist()
    import mlflow

    client = mlflow.tracking.MlflowClient(f"sqlite:///{run / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name("diverges").experiment_id])
    assert {r.info.run_name: r.info.status for r in runs} == {"transformer-cot-tiny-n5-lr3e-3-s0": "FINISHED",
                                                             "transformer-cot-tiny-n5-lr1e12-s0": "FAILED"}
