"""End to end on an embedded local Ray with 2 CPUs: launch, dashboard, report,
and a driver killed mid-sweep then resumed. Each test starts its own Ray in a
temp dir of its own, in a subprocess, and ends it (tests/orchestrator/e2e.py)."""

import json
import os
import re
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest
import torch
import yaml

from orchestrator.rundir import STARTED_OVER_FILE, load_trials, read_results, read_run
from orchestrator.grid import expand
from orchestrator.spec import load_spec
from tests.orchestrator.e2e import (HALF_EVERY, ROOT, SWEEPS, cli, dashboard_answers, free_port, kill_leftovers, killme_spec,
                                    launch_to_the_end, listening, on_loopback, own_ray_temp, pasted,
                                    process_names, results_so_far)

pytestmark = pytest.mark.slow

HALF = 12 * HALF_EVERY  # the killme spec's twelve evaluations at half the training


def test_a_tiny_sweep_completes_with_its_report_and_the_dashboard_up(tmp_path, ray_temp):
    """And two trials fail for good, each with the advice its failure needs: a rate
    that diverges, and RWKV-7 with heads of one channel, whose loss is NaN before
    any update (issue 42, class 4: retried from scratch, and advised to resume).
    A second launch a second later, asking for the same dashboard port, runs beside
    it with a dashboard of its own (issue 42, class 5: both launches took the port
    and the second failed after a minute with an empty reason)."""
    storage, port = tmp_path / "runs", free_port()
    spec = yaml.safe_load((SWEEPS / "istree_micro.yaml").read_text())
    spec["lr"]["transformer"] = [3e-3, 1e12]  # the second one diverges at once: a trial that fails for good
    spec["axes"].update(archs=["transformer", "mamba", "rwkv7"], model={"rwkv7": {"head_dim": [1]}})
    spec["lr"]["rwkv7"] = 1e-3
    spec_path = tmp_path / "micro.yaml"
    spec_path.write_text(yaml.safe_dump(spec))
    # A stale address lying around must not make a plain launch attach (or hang).
    stale = {**os.environ, "RAY_ADDRESS": "127.0.0.1:9"}
    proc = subprocess.Popen(cli("launch", str(spec_path), "--storage", str(storage), "--dashboard", ray_temp=ray_temp,
                                port=port),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True, env=stale)
    lines: list[str] = []  # its console as it comes
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)
    reader.start()
    with own_ray_temp() as other_temp:
        time.sleep(1)
        second = subprocess.Popen(cli("launch", str(SWEEPS / "istree_micro.yaml"), "--storage", str(tmp_path / "b"),
                                      "--dashboard", ray_temp=other_temp, port=port),
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
        answered_while_running, sockets = False, []
        while proc.poll() is None and not answered_while_running:
            if (mine := _dashboard_port("".join(lines))) is not None:
                answered_while_running = dashboard_answers(mine) and proc.poll() is None
            time.sleep(0.5)
        while proc.poll() is None and not sockets:  # once a trial's worker is up (issue 52, class 2)
            if next((storage / "istree_micro").glob("*/params.json"), None):
                sockets = listening(ray_temp)
            time.sleep(0.5)
        proc.wait(timeout=900)
        second_out = second.communicate(timeout=600)[0]
    reader.join(timeout=60)
    out = "".join(lines)
    _both_ran_with_a_dashboard_each(port, out, second, second_out)
    names = {name for _, _, name in sockets}
    assert {"gcs_server", "raylet", "ray::DashboardA"} <= names, sockets
    assert all(on_loopback(address) for address, _, _ in sockets), sockets
    diverging, at_once = "transformer-cot-tiny-n5-lr1e12-s0", "rwkv7-cot-tiny-headdim1-n5-lr1e-3-s0"
    assert proc.returncode == 1 and f"2 trial(s) failed (errors in the report): {at_once}, {diverging}" in out, out[-3000:]
    assert "1 trial(s) diverged: lower their architecture's lr in the spec" in out, out[-3000:]
    assert "1 trial(s) have a loss that is not finite before any update" in out and "Change the spec" in out
    assert "icr-sweep resume" not in out.split("failed (errors in the report)")[-1]  # a resume would not help
    # The NaN trial trained once; Tune's retry (max_failures 1) ended before training.
    # Tune's own messages went to the run's icr-sweep.log, not the console (issue 64).
    log = (storage / "istree_micro" / "icr-sweep.log").read_text()
    nan_failures = [line for line in log.splitlines() if "RayTaskError(" in line and at_once in line]
    causes = [line.split("RayTaskError(")[1].split(")")[0] for line in nan_failures]
    assert causes == ["NonFiniteLoss", "FailsAgain"], log[-3000:]
    assert "RayTaskError" not in out and "== Status ==" not in out, out[-3000:]
    assert f"retrying {at_once} after a failure" in out and f"failed {at_once} (its error: " in out, out[-3000:]
    assert answered_while_running, "the dashboard did not answer while the sweep ran"
    assert "ray get-auth-token" in out

    _the_report_and_trials_of(storage / "istree_micro", spec_path, diverging, at_once)
    again = subprocess.run(cli("launch", str(spec_path), "--storage", str(storage), ray_temp=ray_temp, port=port),
                           capture_output=True, text=True, timeout=120)
    assert again.returncode != 0 and "icr-sweep resume" in again.stderr


def _the_report_and_trials_of(run_dir: Path, spec_path: Path, diverging: str, at_once: str) -> None:
    report = (run_dir / "report.md").read_text()
    trials = expand(load_spec(spec_path))
    assert len(trials) == 4
    for t in trials:
        assert t.name in report
    assert "loss is nan" in report
    df = load_trials(run_dir).set_index("trial")
    assert sorted(df.index) == sorted(t.name for t in trials)
    assert df.loc[diverging, "state"] == "error" and "loss is nan at step" in df.loc[diverging, "error"]
    error = df.loc[at_once, "error"]
    assert df.loc[at_once, "state"] == "error" and "at step 1" in error and "the rate is not the cause" in error
    assert "not retried: any retry fails alike" in error, error
    others = df.drop(index=[diverging, at_once])
    assert (others["state"] == "finished").all() and others["gen_accuracy"].between(0, 1).all()
    for name in others.index:  # trials given no GPU see none (Ray itself would show them every GPU)
        last = results_so_far(run_dir / name)[-1]
        assert last["gpu_share"] == 0 and last["cuda_devices"] == "", last
    assert (run_dir / "results.csv").exists() and list(run_dir.glob("exact_match_*.png")) and list(run_dir.glob("gen_accuracy_*.png"))


@pytest.fixture(scope="module")
def killed_midway(tmp_path_factory):
    """A killme run at half training whose driver and Ray were killed with SIGKILL once
    a trial had finished and another had three results, built once for the tests
    that resume such a run: each resumes a copy of its own (`copy_of`). Returns
    (run directory, finished trials, the interrupted trial). Its trials train on the
    static step (training.cuda_graphs: on; a CPU runs it uncaptured), which a kill
    and a resume must leave as exact as the plain one."""
    base = tmp_path_factory.mktemp("killed")
    storage = base / "runs"
    with own_ray_temp() as ray_temp:
        finished, interrupted = _kill_midway(killme_spec(base, samples=HALF, every=HALF_EVERY, cuda_graphs="on"), storage,
                                             storage / "killme", ray_temp, free_port(), rows=3)
    return storage / "killme", finished, interrupted


def copy_of(killed_midway, tmp_path: Path) -> tuple[Path, list[str], str]:
    """The killed run copied into tmp_path/runs, as a user copies a run directory."""
    run, finished, interrupted = killed_midway
    shutil.copytree(run, tmp_path / "runs" / run.name, symlinks=True)
    return tmp_path / "runs" / run.name, finished, interrupted


def test_a_killed_driver_resumes_without_rerunning_finished_trials(tmp_path, ray_temp, killed_midway):
    run_dir, finished, interrupted = copy_of(killed_midway, tmp_path)
    before = {name: (run_dir / name / "result.json").read_text() for name in finished}
    plan = json.loads((run_dir / "plan.json").read_text())
    (run_dir / "plan.json").unlink()  # as a run launched before plans were stored: resume writes it

    result = subprocess.run(cli("resume", str(run_dir), ray_temp=ray_temp, port=free_port()),
                            capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    assert "rebuilt" not in result.stdout + result.stderr  # Tune's own state restored, in the copy
    assert json.loads((run_dir / "plan.json").read_text()) == plan
    df = load_trials(run_dir)
    assert len(df) == 3 and (df["state"] == "finished").all(), df[["trial", "state"]]
    for name, text in before.items():
        assert (run_dir / name / "result.json").read_text() == text, f"{name} was run again"
    samples = [r["samples"] for r in results_so_far(run_dir / interrupted)]
    assert samples == sorted(set(samples)), f"{interrupted} restarted instead of continuing: {samples}"
    assert not (run_dir / interrupted / STARTED_OVER_FILE).exists(), f"{interrupted} started over from sample 0"
    assert samples[-1] == HALF
    assert {r["step_used"] for name in df["trial"] for r in results_so_far(run_dir / name)} == {"static"}


def test_a_run_with_damaged_tune_state_and_checkpoint_still_resumes(tmp_path, ray_temp, killed_midway):
    """A full disk truncates Tune's experiment state, and a trial's newest checkpoint
    with it: resume rebuilds the sweep from the spec and the trial directories,
    continues the trial from its older intact checkpoint, and reruns no finished trial."""
    run_dir, finished, interrupted = copy_of(killed_midway, tmp_path)
    before = {name: (run_dir / name / "result.json").read_text() for name in finished}
    for state in run_dir.glob("experiment_state*.json"):
        state.write_bytes(state.read_bytes()[: state.stat().st_size // 2])  # cut short, as on a full disk
    # The kill may have cut the newest checkpoint's write before its file existed (a
    # fresh clone saw checkpoint_000004/ empty): the newest whole one is truncated.
    checkpoints = sorted((run_dir / interrupted).glob("checkpoint_*/checkpoint.pt"))
    assert len(checkpoints) >= 2, checkpoints
    newest = checkpoints[-1]
    newest.write_bytes(newest.read_bytes()[:1000])

    result = subprocess.run(cli("resume", str(run_dir), ray_temp=ray_temp, port=free_port()),
                            capture_output=True, text=True, timeout=900)
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-3000:]
    assert "rebuilt from the spec" in out, out[-3000:]
    df = read_run(run_dir).trials
    assert len(df) == 3 and (df["state"] == "finished").all(), df[["trial", "state", "error"]]
    for name, text in before.items():
        assert (run_dir / name / "result.json").read_text() == text, f"{name} was run again"
    evaluations = [r["samples"] for r in read_results(run_dir / interrupted) if r.get("evaluated", True)]
    assert evaluations == list(range(HALF_EVERY, HALF + 1, HALF_EVERY)), evaluations  # each evaluation once


def _kill_midway(spec_path, storage, run_dir, ray_temp, port, rows: int) -> tuple[list[str], str]:
    """Launches the spec and, once a trial has finished and another has `rows`
    results without finishing, kills the driver and its Ray with SIGKILL (no chance
    to clean up, as when the machine goes down). Returns (finished, interrupted)."""
    proc = subprocess.Popen(cli("launch", str(spec_path), "--storage", str(storage), "--no-dashboard",
                                ray_temp=ray_temp, port=port),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    deadline = time.time() + 600
    finished, interrupted = [], None
    while time.time() < deadline and proc.poll() is None:
        results = {p.parent.name: results_so_far(p.parent) for p in run_dir.glob("*/params.json")}
        finished = [n for n, r in results.items() if r and r[-1].get("final_eval")]
        midway = [n for n, r in results.items() if len(r) >= rows and not r[-1].get("final_eval")]
        if finished and midway:
            interrupted = midway[0]
            break
        time.sleep(0.1)
    assert interrupted, f"never saw a finished and a half-done trial: {proc.communicate()[0][-3000:]}"
    # --no-dashboard: none of the dashboard's modules runs, and nothing listens on its port.
    names = process_names(ray_temp)
    modules = [name for name in names if name.startswith("ray-dashboard")]
    assert not modules and port not in {p for _, p, _ in listening(ray_temp)}, (modules, listening(ray_temp))
    # No worker was started ahead to sit idle (cluster.start_ray: no_idle_workers_ahead).
    assert "ray::IDLE" not in names, names
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    kill_leftovers(ray_temp)
    return finished, interrupted


def test_ctrl_c_and_sigterm_stop_with_the_resume_command_and_every_trial_in_its_true_state(tmp_path, ray_temp):
    """Ctrl-C, SIGTERM as a cluster or a spot instance sends it, and SIGTERM to the
    driver's process group as systemd, a batch scheduler or `docker stop` send it
    (issue 28, class 8: it killed Ray's daemons too, and the driver stalled and
    exited 1 with no report), end alike: the launch is stopped with Ctrl-C, its
    resume with SIGTERM, the next resume with SIGTERM to its group, each while the
    same trial is midway; the last resume, its newest checkpoints deleted, ends
    every trial with each evaluation once. The launch is typed as README says, in
    a shell whose PATH lacks the project's environment, and each resume is the
    line the stop before printed, pasted into that shell (issue 79: it printed
    `icr-sweep resume`, which that shell cannot find)."""
    spec_path = killme_spec(tmp_path)
    storage = tmp_path / "runs"
    run_dir = storage / "killme"
    line = f"scripts/icr-sweep launch {spec_path} --storage {storage}"
    interrupted, rows = None, 0
    for command, sig, group in (("launch", signal.SIGINT, False), ("resume", signal.SIGTERM, False),
                                ("resume", signal.SIGTERM, True)):
        argv, env = pasted(line, ray_temp, free_port())
        proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                start_new_session=True)
        deadline = time.time() + 600
        while time.time() < deadline and proc.poll() is None and not _one_finished_and_one_midway(run_dir, interrupted,
                                                                                                  rows):
            time.sleep(0.1)
        if group:
            os.killpg(proc.pid, sig)  # started in a session of its own: its group is its pid
        else:
            proc.send_signal(sig)
        out, _ = proc.communicate(timeout=300)
        stopped = _stopped_in_its_true_state(proc.returncode, out, run_dir, command)
        assert interrupted in (None, stopped), (interrupted, stopped)  # the resume went on with the stopped trial
        interrupted, rows = stopped, len(read_results(run_dir / stopped))
        line = out.rstrip().splitlines()[-1].strip()
        assert line == f"scripts/icr-sweep resume {run_dir}", out[-3000:]  # as it was started
    _resume_without_the_newest_checkpoints(run_dir, interrupted, ray_temp)


def _one_finished_and_one_midway(run_dir: Path, midway: str | None, rows: int) -> bool:
    """A trial has finished and another has two rows more than `rows` without
    finishing (that one `midway`, where given: the trial stopped before)."""
    results = {p.parent.name: results_so_far(p.parent) for p in run_dir.glob("*/params.json")}
    if not any(r and r[-1].get("final_eval") for r in results.values()):
        return False
    going = [r for name, r in results.items() if midway in (None, name)]
    return any(len(r) >= rows + 2 and not r[-1].get("final_eval") for r in going)


def _stopped_in_its_true_state(returncode: int, out: str, run_dir: Path, command: str) -> str:
    """Asserts a stopped launch or resume of the killme spec ended as a stop does,
    with one trial finished, one interrupted and one pending. Returns the
    interrupted trial's name."""
    assert returncode == 130, out[-3000:]
    # (Ray may print "Exception ignored in ... SystemExit" as it ends a finished trial's idle worker: not ours.)
    ours = re.sub(r"Exception ignored in.*?SystemExit: 1", "", out, flags=re.S)
    assert "Fatal Python error" not in out and "Traceback" not in ours, out[-3000:]
    assert out.rstrip().endswith(f"icr-sweep resume {run_dir}"), out[-3000:]
    # Tune's and Ray's own lines for the stop went to icr-sweep.log (issue 64): "Resume experiment with:
    # Tuner.restore(...)" was wrong advice for this tool.
    shown = out.split(f"Sweep 'killme' -> {run_dir}")[-1] if command == "launch" else out
    assert not re.search(r"Tuner\.restore|Failed to fetch metrics|FileNotFoundError|== Status ==| (INFO|WARNING) ",
                         shown), out[-3000:]
    assert "Tuner.restore" in (run_dir / "icr-sweep.log").read_text()
    states = read_run(run_dir).trials.set_index("trial")["state"].to_dict()
    assert len(states) == 3, states  # the never-started trial is listed too
    assert sorted(states.values()) == ["finished", "interrupted", "pending"], states
    report = (run_dir / "report.md").read_text()
    assert "1 finished, 1 interrupted, 1 pending" in report
    # The interrupted trial checkpointed the step it was at, and Tune recorded it.
    assert "each running trial first checkpoints the step it is at" in out
    (interrupted,) = [name for name, state in states.items() if state == "interrupted"]
    rows = read_results(run_dir / interrupted)
    stops = [r for r in rows if r.get("checkpoint_reason") == "stop"]
    assert stops and stops[-1]["samples"] % 1024, rows  # between evaluations, where the step was
    kept = [torch.load(p / "checkpoint.pt", weights_only=True)["samples"] for p in (run_dir / interrupted).glob("checkpoint_*")]
    assert stops[-1]["samples"] in kept, (kept, rows)
    assert not (run_dir / ".icr-stop").exists()
    return interrupted


def _resume_without_the_newest_checkpoints(run_dir: Path, interrupted: str, ray_temp: str) -> None:
    """Issue 42, class 2: the stopped trial's newest checkpoint (the stop checkpoint,
    which Tune restores) deleted, resume failed the trial for good ("does not exist
    on storage anymore"). The newest two go: the stop checkpoint is among them (a
    trial may store one more evaluation before the stop reaches it)."""
    checkpoints = sorted((run_dir / interrupted).glob("checkpoint_*"))
    assert len(checkpoints) >= 3, checkpoints
    for gone in checkpoints[-2:]:
        shutil.rmtree(gone)
    result = subprocess.run(cli("resume", str(run_dir), ray_temp=ray_temp, port=free_port()),
                            capture_output=True, text=True, timeout=900)
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-3000:]
    assert re.search(rf"{interrupted}/checkpoint_\d+, is gone from storage; continuing from the newest intact", out), out[-3000:]
    assert ("resumed: 1 finished trial(s) kept, 1 continue from their newest checkpoint, 1 not started yet"
            in out), out[-3000:]
    assert not re.search(r"Tuner\.restore|Restored on|FileNotFoundError|== Status ==", out), out[-3000:]
    assert (read_run(run_dir).trials["state"] == "finished").all()
    evaluations = [r["samples"] for r in read_results(run_dir / interrupted) if r.get("evaluated", True)]
    assert evaluations == list(range(1024, 12288 + 1, 1024)), evaluations  # each evaluation once


def test_trials_that_could_never_start_are_refused(tmp_path, ray_temp):
    """Refused once Ray is up, naming each resource no node has (here 100 CPUs and a
    GPU per trial), into a folder of the user's: what the launch and Ray wrote is
    removed, the user's files stay byte for byte (issue 49)."""
    spec = yaml.safe_load((SWEEPS / "istree_micro.yaml").read_text())
    spec["resources"].update(cpus_per_trial=100, device="cuda")
    spec_path = tmp_path / "impossible.yaml"
    spec_path.write_text(yaml.safe_dump(spec))
    run_dir = tmp_path / "runs" / "istree_micro"
    (run_dir / "data").mkdir(parents=True)
    mine = {"notes.txt": b"what I tried", "data/graphs.jsonl": b'{"n": 16}\n', "my.sqlite": b"SQLite format 3\x00"}
    for name, data in mine.items():
        (run_dir / name).write_bytes(data)
    result = subprocess.run(cli("launch", str(spec_path), "--storage", str(tmp_path / "runs"), ray_temp=ray_temp,
                                port=free_port()), capture_output=True, text=True, timeout=300)
    assert result.returncode == 2, result.stderr[-3000:]
    for message in ("resources.cpus_per_trial is 100, but the largest node has 2 CPU",
                    "resources.gpus_per_trial is 1, but the largest node has 0 GPU"):
        assert message in result.stderr, result.stderr[-3000:]
    assert {str(p.relative_to(run_dir)): p.read_bytes() for p in run_dir.rglob("*") if p.is_file()} == mine


def test_an_optuna_sweep_runs_its_trial_budget_per_cell(tmp_path, ray_temp):
    spec = yaml.safe_load((SWEEPS / "istree_micro.yaml").read_text())
    spec.update(name="optuna_micro", axes=dict(archs=["transformer"], setups=["cot"], sizes=["tiny"], n=[4, 5], seeds=[0]),
                lr=dict(transformer=dict(distribution="loguniform", low=1e-4, high=1e-2)),
                search=dict(method="optuna", num_samples=3, metric="val_exact_match", mode="max"))
    spec["training"].update(samples=1024, eval_every=512)
    spec_path, storage = launch_to_the_end(spec, tmp_path, ray_temp)
    df = load_trials(storage / "optuna_micro")
    assert len(df) == 2 * 3 and (df["state"] == "finished").all()
    for _, cell in df.groupby("n"):
        assert len(cell) == 3 and cell["lr"].between(1e-4, 1e-2).all()
        assert cell["lr"].nunique() == 3  # Optuna proposed three different learning rates
    report = (storage / "optuna_micro" / "report.md").read_text()
    assert "| cot | transformer |" in report
    # Optuna's own lines go to the run's log (issue 79)
    assert "A new study created" not in (tmp_path / "console.txt").read_text()
    assert "A new study created" in (storage / "optuna_micro" / "icr-sweep.log").read_text()
    # The studies are in the run directory, one per cell, for optuna-dashboard.
    import optuna

    url = f"sqlite:///{storage / 'optuna_micro' / 'optuna.db'}"
    assert sorted(optuna.get_all_study_names(url)) == ["optuna_micro/transformer-cot-tiny-n4-s0",
                                                       "optuna_micro/transformer-cot-tiny-n5-s0"]
    for n, cell in df.groupby("n"):
        study = optuna.load_study(study_name=f"optuna_micro/transformer-cot-tiny-n{n}-s0", storage=url)
        values = sorted((t.params["lr"], t.value) for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE)
        assert values == sorted(zip(cell["lr"], cell["val_exact_match"]))
        # Each Optuna trial leads to its trial (named by its rate to three digits) and
        # its directory, with the other figures; the objective has the metric's name.
        assert study.metric_names == ["val_exact_match"]
        for t in study.trials:
            trial_dir = storage / "optuna_micro" / t.user_attrs["trial_dir"]  # relative to the run directory
            assert trial_dir.name == t.user_attrs["trial"] and t.user_attrs["trial_dir"] == t.user_attrs["trial"]
            assert (trial_dir / "params.json").is_file() and t.user_attrs["samples"] == 1024
            assert sorted(t.intermediate_values) == [512, 1024]  # at the training samples of each evaluation
            assert re.fullmatch(r"transformer-cot-tiny-n\d-lr\d(\.\d{1,2})?e-\d-s0", t.user_attrs["trial"])
            assert t.user_attrs["val_loss"] == pytest.approx(cell.set_index("trial").loc[trial_dir.name, "val_loss"])
    # A second launch under the same name into the same storage would mix into these studies: refused.
    spec["search"]["storage"] = url
    spec_path.write_text(yaml.safe_dump(spec))
    again = subprocess.run(cli("launch", str(spec_path), "--storage", str(tmp_path / "other"), ray_temp=ray_temp,
                               port=free_port()), capture_output=True,
                           text=True, timeout=120)
    assert again.returncode == 2 and "already holds studies of a sweep named 'optuna_micro'" in again.stderr, again.stderr
    # A damaged optuna.db was named only in Tune's logged traceback, and resume ended
    # at rc 130 every time (issue 42, class 9): named before Ray starts.
    db = storage / "optuna_micro" / "optuna.db"
    db.write_bytes(b"not a database" * 100)
    damaged = subprocess.run(cli("resume", str(storage / "optuna_micro"), ray_temp=ray_temp, port=free_port()),
                             capture_output=True, text=True, timeout=120)
    assert damaged.returncode == 2 and f"{db}: Optuna's studies cannot be read (DatabaseError" in damaged.stderr, damaged.stderr
    assert "Starting a local Ray" not in damaged.stderr and "Put back a copy of the file" in damaged.stderr
    # Deleted, or replaced by an empty one: resume ended in "KeyError: 'Record does not
    # exist.'" after Ray started (issue 52's messages).
    db.unlink()
    gone = subprocess.run(cli("resume", str(storage / "optuna_micro"), ray_temp=ray_temp, port=free_port()),
                          capture_output=True, text=True, timeout=120)
    assert gone.returncode == 2 and f"{db} is gone: it held this sweep's Optuna studies" in gone.stderr, gone.stderr
    assert "Starting a local Ray" not in gone.stderr and not db.exists()
    optuna.create_study(storage=url, study_name="another")
    emptied = subprocess.run(cli("resume", str(storage / "optuna_micro"), ray_temp=ray_temp, port=free_port()),
                             capture_output=True, text=True, timeout=120)
    assert emptied.returncode == 2 and f"{db} lacks 2 of this sweep's Optuna studies" in emptied.stderr, emptied.stderr


def _first_state_save(run_dir: Path, earlier: set) -> dict:
    """The files of a Tune session's first save of its state (its experiment state
    and its searcher's, one session's names), as bytes by path; {} before it is whole."""
    new = [p for p in run_dir.glob("experiment_state-*.json") if p.name not in earlier]
    if not new:
        return {}
    session = new[0].name.removeprefix("experiment_state-").removesuffix(".json")
    files = [run_dir / f"{stem}-{session}{ext}" for stem, ext in (("experiment_state", ".json"),
                                                                    ("searcher-state", ".pkl"),
                                                                    ("search_gen_state", ".json"))]
    return {f: f.read_bytes() for f in files} if all(f.is_file() for f in files) else {}


@pytest.mark.parametrize("fuse", [1, 2], ids=["alone", "arrays"])
def test_an_optuna_sweep_survives_time_checkpoints_a_ctrl_c_a_kill_and_its_resumes(tmp_path, ray_temp, fuse):
    """Time checkpoints between evaluations, Ctrl-C with a stop checkpoint, resume,
    SIGKILL of the driver mid-trial (its Tune state older than the trial then
    running), resume again: every trial finishes and Optuna is told each one's last
    evaluation once (issue 28: class 1, the first time checkpoint ended the sweep;
    class 2, a killed Optuna sweep could not resume).
    In arrays too (issue 50: fuse 2, an array of two asked at once, then one)."""
    import optuna

    spec = yaml.safe_load((SWEEPS / "istree_micro.yaml").read_text())
    spec.update(name="optuna_stop", axes=dict(archs=["transformer"], setups=["cot"], sizes=["tiny"], n=[5], seeds=[0]),
                lr=dict(transformer=dict(distribution="loguniform", low=1e-3, high=1e-2)),
                search=dict(method="optuna", num_samples=3))
    # A lone trial on the static step (a CPU runs it uncaptured), an array on its own.
    spec["training"].update(samples=6144, eval_every=3072, checkpoint_every_s=0.5, cuda_graphs="on")
    spec["resources"].update(max_concurrent=1, fuse=fuse)
    spec_path, storage = tmp_path / "optuna_stop.yaml", tmp_path / "runs"
    spec_path.write_text(yaml.safe_dump(spec))
    run_dir = storage / "optuna_stop"

    def rows():
        return {p.parent.name: results_so_far(p.parent) for p in run_dir.glob("*/params.json")}

    proc = subprocess.Popen(cli("launch", str(spec_path), "--storage", str(storage), ray_temp=ray_temp, port=free_port()),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    deadline = time.time() + 600
    while time.time() < deadline and proc.poll() is None:
        seen = [r for trial in rows().values() for r in trial]
        if sum(r.get("checkpoint_reason") == "time" for r in seen) >= 2 and any(r.get("evaluated") for r in seen):
            break
        time.sleep(0.1)
    assert proc.poll() is None, proc.communicate()[0][-3000:]
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 130 and "Traceback" not in out, out[-3000:]

    earlier = {p.name for p in run_dir.glob("experiment_state-*.json")}
    proc = subprocess.Popen(cli("resume", str(run_dir), ray_temp=ray_temp, port=free_port()),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    first_save = {}
    while time.time() < deadline and proc.poll() is None:
        first_save = first_save or _first_state_save(run_dir, earlier)
        done = [n for n, r in rows().items() if r and r[-1].get("final_eval")]
        if first_save and done and any(r and not r[-1].get("final_eval") for n, r in rows().items()):
            break
        time.sleep(0.1)
    assert proc.poll() is None, proc.communicate()[0][-3000:]
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    kill_leftovers(ray_temp)
    # Tune saves its state every 10 s or so: a driver killed between two saves leaves
    # one that lacks the trial started since (it has rows), which the resume of an
    # Optuna sweep refused, now and then, until it took that trial back. Here every
    # time: the resume's first save, from before that trial was asked, put back.
    for path, saved in first_save.items():
        path.write_bytes(saved)
    from orchestrator.tune import tune_state_problem

    # Under load that first save can come after the next trial was asked: then it lacks none.
    stale = tune_state_problem(str(run_dir)).startswith("Tune's experiment state lacks 1 trial(s)")

    result = subprocess.run(cli("resume", str(run_dir), ray_temp=ray_temp, port=free_port()),
                            capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    said = "Tune's state lacks 1 trial(s) started after it was last saved" in result.stdout + result.stderr
    assert said == stale, (stale, (result.stdout + result.stderr)[-3000:])
    df = load_trials(run_dir)
    assert len(df) == 3 and (df["state"] == "finished").all(), df[["trial", "state"]]
    assert len(list(run_dir.glob("array-*"))) == (2 if fuse > 1 else 0)  # an array of two, then one of one
    for name, trial in rows().items():  # every evaluation once: on the trial's timeline, and never twice in a file
        # (a trial Tune's state lacked continues in a new result.json, its earlier rows set aside beside it)
        on_timeline = [r["samples"] for r in read_results(run_dir / name) if r.get("evaluated", True)]
        assert on_timeline == [3072, 6144], (name, on_timeline)
        stored = [r["samples"] for r in trial if r.get("evaluated", True)]
        assert len(stored) == len(set(stored)), (name, stored)
        if fuse == 1:
            assert {r["step_used"] for r in trial} == {"static"}, name
    url = f"sqlite:///{run_dir / 'optuna.db'}"
    study = optuna.load_study(study_name="optuna_stop/transformer-cot-tiny-n5-s0", storage=url)
    told = sorted((t.params["lr"], t.value) for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE)
    assert told == sorted(zip(df["lr"], df["val_exact_match"])), (told, df[["lr", "val_exact_match"]])
    assert len(study.trials) == 3  # the trial Tune's state lacked went on as itself: no other asked in its place
    assert len({lr for lr, _ in told}) == 3  # and no rate was asked twice (issue 83, class 1)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_a_stop_before_any_trial_started_leaves_no_run_behind(tmp_path, ray_temp, sig):
    """Ctrl-C (or SIGTERM) as Ray comes up: one line, exit 130, and no half-made run
    directory for the next launch to trip on (issue 28, class 8: 'Interrupted.', then
    'no trial results', exit 2, and a directory holding only a lock); none of Ray's or
    Tune's lines (issue 64: they go to the run's log, which goes with the run)."""
    spec_path, storage = killme_spec(tmp_path), tmp_path / "runs"
    proc = subprocess.Popen(cli("launch", str(spec_path), "--storage", str(storage), "--no-dashboard", ray_temp=ray_temp,
                                port=free_port()),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    seen = ""
    for line in proc.stdout:
        seen += line
        if "Ray is up, without its dashboard" in line:
            proc.send_signal(sig)
            break
    out = seen + proc.communicate(timeout=300)[0]
    shown = out[:2500] + "\n[...]\n" + out[-1500:]  # the head says when the signal was sent
    assert "Ray is up, without its dashboard (--no-dashboard)." in seen and "Ray dashboard:" not in seen, shown
    assert proc.returncode == 130, shown
    assert "Stopped before any trial started: nothing of this launch was kept" in out and "Traceback" not in out, shown
    assert not re.search(r" (INFO|WARNING) |Tuner\.restore|== Status ==", out), shown
    assert not storage.exists()  # the launch made runs/ too


def test_a_disk_that_fills_mid_sweep_ends_in_a_report_and_resumes_with_every_evaluation(tmp_path, ray_temp):
    """Issue 28, class 6: a disk that filled mid-sweep killed the driver (Tune's
    UnpicklingError, a 0-byte params.json, no report), and the resume that followed
    finished with evaluation rows silently missing. On a small tmpfs (root's mount;
    skipped elsewhere): the driver ends with the report and the resume command; once
    space is freed, resume finishes every trial with each evaluation's row once."""
    disk = tmp_path / "disk"
    disk.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=24m", "tmpfs", str(disk)], capture_output=True).returncode:
        pytest.skip("mounting a tmpfs needs root here")
    try:
        spec_path = killme_spec(tmp_path, samples=3072, every=HALF_EVERY)
        run_dir = disk / "killme"
        proc = subprocess.Popen(cli("launch", str(spec_path), "--storage", str(disk), ray_temp=ray_temp, port=free_port()),
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
        deadline = time.time() + 600
        while time.time() < deadline and proc.poll() is None:
            if any(r.get("evaluated") for p in run_dir.glob("*/params.json") for r in results_so_far(p.parent)):
                break
            time.sleep(0.1)
        filler = disk / "filler"
        subprocess.run(["dd", "if=/dev/zero", f"of={filler}", "bs=1M"], capture_output=True)  # to the last byte
        out, _ = proc.communicate(timeout=600)
        assert proc.returncode in (1, 130) and f"icr-sweep resume {run_dir}" in out, out[-3000:]
        assert "Traceback (most recent call last)" not in re.split(r"^\[[\d:]+\] ", out, flags=re.M)[-1], out[-3000:]
        filler.unlink()
        result = subprocess.run(cli("resume", str(run_dir), ray_temp=ray_temp, port=free_port()),
                                capture_output=True, text=True, timeout=900)
        assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
        df = load_trials(run_dir)
        assert len(df) == 3 and (df["state"] == "finished").all(), df[["trial", "state", "error"]]
        for trial in df["trial"]:
            evaluations = [r["samples"] for r in read_results(run_dir / trial) if r.get("evaluated", True)]
            assert evaluations == [HALF_EVERY * k for k in range(1, 7)], (trial, evaluations)
    finally:
        subprocess.run(["umount", "-l", str(disk)], capture_output=True)


def _dashboard_port(console: str) -> int | None:
    found = re.search(r"Ray dashboard: http://127\.0\.0\.1:(\d+)", console)
    return int(found.group(1)) if found else None


def _both_ran_with_a_dashboard_each(port: int, out: str, second: subprocess.Popen, second_out: str) -> None:
    """Two launches a second apart, both asking for `port`: the second ran to the end
    too, and the one that found the port taken says where its dashboard listens."""
    assert second.returncode == 0, second_out[-3000:]
    ports = [_dashboard_port(out), _dashboard_port(second_out)]
    assert port in ports and len(set(ports)) == 2, ports
    later = ports.index(port) ^ 1  # the one that found the port taken (the later one, unless the machine stalled)
    assert f"Port {port} is taken; the dashboard listens on {ports[later]} instead" in (out, second_out)[later]


def test_the_ray_processes_a_killed_driver_left_are_ended_by_the_next_start(tmp_path, ray_temp):
    """Issue 52, class 3: after a SIGKILL of the driver, Ray's DashboardAgent and
    RuntimeEnvAgent lived on as orphans, listening on their ports and ignoring
    SIGTERM; nothing ever ended them. The next launch or resume ends those of a
    session whose driver is gone (orchestrator.cluster.end_orphans)."""
    from orchestrator.cluster import end_orphans

    proc = subprocess.Popen(cli("launch", str(killme_spec(tmp_path)), "--storage", str(tmp_path / "runs"),
                                "--dashboard", ray_temp=ray_temp, port=free_port()),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    for line in proc.stdout:
        if "Ray dashboard:" in line:
            break
    time.sleep(3)  # the agents up
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    session = next(Path(ray_temp, "ray").glob("session_2*"))

    def holding():
        pids = []
        for pid in (p for p in os.listdir("/proc") if p.isdigit()):
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
                links = [os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")]
            except OSError:
                continue
            if str(session) in cmdline or any(str(session) in link for link in links):
                pids.append(int(pid))
        return pids

    deadline = time.time() + 10
    while time.time() < deadline and not holding():
        time.sleep(0.5)
    left = holding()
    assert left, "no Ray process outlived its killed driver: nothing to show here"
    assert end_orphans(str(Path(ray_temp, "ray")))[0] >= 1
    time.sleep(1)
    assert not holding()
