"""A launch, a `train` and a report touch only what they wrote (issue 49): a user's
databases beside their runs survived no unstarted launch. Each command here is the
real CLI, in process; Ray's start is replaced by what it writes into the run
directory (Tune's tuner, state and storage marker, a folder of its own) before it
ends as the reproduction did: a Ctrl-C at start-up, or a refusal once Ray is up.
The same endings on a real Ray are in test_sweep_e2e.py."""

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from orchestrator.cli import app
from orchestrator.cli import sweep as cli_sweep
from orchestrator.cli.common import fail
from orchestrator.rundir import (RunDirError, RunLock, check_report_dir, check_storage, record_report,
                                 set_aside_for_rebuild)

ROOT = Path(__file__).parents[2]
MICRO = str(ROOT / "sweeps" / "istree_micro.yaml")
STORED = ROOT / "tests" / "fixtures" / "stored_run" / "istree_micro"
runner = CliRunner()

# A user's experiments kept beside their runs: two named as a launch names its own.
DATABASES = {"mlflow.db": b"SQLite format 3\x00the user's MLflow runs", "optuna.db": b"SQLite format 3\x00studies"}
OTHERS = {"notes.txt": b"what I tried", "data/graphs.jsonl": b'{"n": 16}\n', "my.sqlite": b"SQLite format 3\x00"}


def _put(folder: Path, files: dict[str, bytes]) -> None:
    for name, data in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(data)


def _contents(folder: Path) -> dict[str, bytes]:
    """Every file under `folder`, byte for byte, by its path relative to it."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _ray_starts_then(ending: str):
    """`_start_ray` as a launch meets it: Ray writes its files into the run
    directory, then the launch ends before any trial started."""

    def start(opts, spec):
        run_dir = Path(spec.run_dir())
        for name in ("tuner.pkl", "experiment_state-2026-11-26_10-00-00.json", ".validate_storage_marker"):
            (run_dir / name).write_bytes(b"Tune's")
        if spec.tracking.wandb:  # W&B's folder, where the spec logs to it
            (run_dir / "wandb" / "run-1").mkdir(parents=True)
            (run_dir / "wandb" / "run-1" / "files.txt").write_text("a tracker's folder")
        if ending == "ctrl_c":
            raise KeyboardInterrupt
        fail("no trial could ever start: resources.gpus_per_trial is 1, but the largest node has 0 GPU")

    return start


def test_a_launch_into_a_folder_holding_a_launchs_files_is_refused_before_ray_naming_them(tmp_path, monkeypatch):
    """The reproduction: a user's mlflow.db and optuna.db in runs/<name>. Refused
    before Ray starts, each named; nothing of them opened for writing or moved."""
    run_dir = tmp_path / "runs" / "istree_micro"
    run_dir.mkdir(parents=True)
    _put(run_dir, {**DATABASES, **OTHERS})
    before = _contents(tmp_path)
    monkeypatch.setattr(cli_sweep, "_start_ray", lambda opts, spec: pytest.fail("Ray started"))
    result = runner.invoke(app, ["launch", MICRO, "--storage", str(tmp_path / "runs")])
    assert result.exit_code == 2, result.output
    assert f"{run_dir} holds mlflow.db, optuna.db, named like files icr-sweep writes" in result.output, result.output
    assert "no icr-sweep.json" in result.output and "choose another name or --storage" in result.output
    assert _contents(tmp_path) == before


def test_a_folder_holding_a_trials_directory_but_no_run_is_refused(tmp_path, monkeypatch):
    run_dir = tmp_path / "runs" / "istree_micro"
    shutil.copytree(STORED / "mamba-cot-tiny-n5-lr1e-2-s0", run_dir / "mamba-cot-tiny-n5-lr1e-2-s0")
    before = _contents(tmp_path)
    monkeypatch.setattr(cli_sweep, "_start_ray", lambda opts, spec: pytest.fail("Ray started"))
    result = runner.invoke(app, ["launch", MICRO, "--storage", str(tmp_path / "runs")])
    assert result.exit_code == 2 and "holds mamba-cot-tiny-n5-lr1e-2-s0/, named like" in result.output, result.output
    assert _contents(tmp_path) == before


@pytest.mark.parametrize("ending, code", [("ctrl_c", 130), ("refused", 2)])
def test_an_unstarted_launch_removes_what_it_wrote_and_nothing_else(tmp_path, monkeypatch, ending, code):
    """A folder of the user's (no file named as a launch's) is launched into, and the
    launch ends before any trial: its files and Ray's go, the user's stay byte for
    byte, and so does the folder."""
    run_dir = tmp_path / "runs" / "istree_micro"
    run_dir.mkdir(parents=True)
    _put(run_dir, OTHERS)
    before = _contents(tmp_path)
    monkeypatch.setattr(cli_sweep, "_start_ray", _ray_starts_then(ending))
    result = runner.invoke(app, ["launch", MICRO, "--storage", str(tmp_path / "runs")])
    assert result.exit_code == code, result.output
    assert _contents(tmp_path) == before
    assert sorted(p.name for p in run_dir.iterdir()) == ["data", "my.sqlite", "notes.txt"]
    if ending == "ctrl_c":
        assert ("Stopped before any trial started: nothing of this launch was kept (what "
                f"{run_dir} held before stays as it was)") in result.output, result.output


def test_an_unstarted_launch_into_a_new_folder_leaves_nothing_behind(tmp_path, monkeypatch):
    """Nor the folders above the run directory that the launch made."""
    monkeypatch.setattr(cli_sweep, "_start_ray", _ray_starts_then("ctrl_c"))
    result = runner.invoke(app, ["launch", MICRO, "--storage", str(tmp_path / "new" / "runs")])
    assert result.exit_code == 130, result.output
    assert "Stopped before any trial started: nothing of this launch was kept. Launch" in result.output
    assert list(tmp_path.iterdir()) == []


def test_a_file_written_meanwhile_by_another_hand_stays(tmp_path, monkeypatch):
    """Only the launch's own names are removed: a file the user wrote into the new
    folder while Ray started is kept, and named."""
    def start(opts, spec):
        (Path(spec.run_dir()) / "README.md").write_text("my sweep")
        _ray_starts_then("ctrl_c")(opts, spec)

    monkeypatch.setattr(cli_sweep, "_start_ray", start)
    result = runner.invoke(app, ["launch", MICRO, "--storage", str(tmp_path / "runs")])
    assert result.exit_code == 130, result.output
    assert _contents(tmp_path) == {"runs/istree_micro/README.md": b"my sweep"}
    assert "README.md, written there meanwhile by another hand, stay" in result.output


def test_a_launch_refused_by_a_running_drivers_lock_removes_nothing(tmp_path):
    """The other driver's files appear after this launch looked: they are not its own."""
    run_dir = tmp_path / "runs" / "istree_micro"
    run_dir.mkdir(parents=True)
    (run_dir / "icr-sweep.json").write_text(json.dumps({"spec": {}}))
    with RunLock(str(run_dir)):
        (run_dir / "tuner.pkl").write_bytes(b"the other driver's")
        before = _contents(tmp_path)
        result = runner.invoke(app, ["launch", MICRO, "--storage", str(tmp_path / "runs")])
    assert result.exit_code == 2 and "in use by another icr-sweep" in result.output, result.output
    assert _contents(tmp_path) == before


def test_train_refuses_an_out_holding_a_trials_files_of_no_run(tmp_path, thread_pools):
    """`train --out` into a folder with a result.json and a checkpoint/ but no
    params.json: refused naming them, nothing touched (it appended to the rows)."""
    out = tmp_path / "mine"
    _put(out, {"result.json": b'{"samples": 1}\n', "checkpoint/state.pt": b"weights", "notes.txt": b"x"})
    before = _contents(tmp_path)
    result = runner.invoke(app, ["train", "--arch", "transformer", "--size", "tiny", "--setup", "cot", "--n", "4",
                                 "--samples", "256",
                                 "--out", str(out)])
    assert result.exit_code == 2, result.output
    assert f"--out {out} holds checkpoint, result.json, named like files icr-sweep writes" in result.output
    assert "no params.json" in result.output
    assert _contents(tmp_path) == before


def test_a_report_into_a_folder_of_trials_never_replaces_a_users_report(tmp_path):
    """`icr-sweep report` of a folder holding trials of `train` writes its report
    there: a report.md of the user's is refused by name; once the report wrote its
    files, a later report replaces those, and only those."""
    folder = tmp_path / "runs"
    for trial in ("mamba-cot-tiny-n5-lr1e-2-s0", "transformer-cot-tiny-n5-lr3e-3-s0"):
        shutil.copytree(STORED / trial, folder / trial)
    _put(folder, {"report.md": b"# my own notes", "exact_match_mine.png": b"\x89PNG mine"})
    before = _contents(tmp_path)
    refused = runner.invoke(app, ["report", str(folder)])
    assert refused.exit_code == 2, refused.output
    assert "holds exact_match_mine.png, report.md, named like files icr-sweep writes" in refused.output
    assert _contents(tmp_path) == before

    (folder / "report.md").rename(tmp_path / "report.md")
    (folder / "exact_match_mine.png").rename(tmp_path / "exact_match_mine.png")
    first = runner.invoke(app, ["report", str(folder)])
    assert first.exit_code == 0, first.output
    written = json.loads((folder / ".icr-report.json").read_text())["files"]
    assert {"report.md", "results.csv", "best.csv"} <= set(written)
    (folder / "exact_match_mine.png").write_bytes(b"\x89PNG mine")  # the user's, put back beside the report
    again = runner.invoke(app, ["report", str(folder)])
    assert again.exit_code == 2 and "holds exact_match_mine.png, named like" in again.output, again.output
    (folder / "exact_match_mine.png").unlink()
    stale = folder / written[[n.endswith(".png") for n in written].index(True)]
    assert runner.invoke(app, ["report", str(folder)]).exit_code == 0 and stale.exists()


def test_a_report_copied_out_replaces_only_its_own_files(tmp_path):
    """A remote run's report is copied into --out (default ./reports/NAME): a folder
    holding a user's best.csv is refused; the tool's own copy is replaced."""
    out = tmp_path / "reports"
    out.mkdir()
    (out / "best.csv").write_text("mine")
    with pytest.raises(RunDirError, match=r"holds best\.csv, named like files icr-sweep writes"):
        check_report_dir(out, flag="--out")
    record_report(out, ["best.csv"])
    check_report_dir(out, flag="--out")  # now the report's own


def test_a_rebuild_never_replaces_a_state_set_aside_before(tmp_path):
    state = tmp_path / "experiment_state-2026-11-26.json"
    state.write_text("now")
    (tmp_path / "experiment_state-2026-11-26.json.damaged").write_text("an earlier rebuild's")
    set_aside_for_rebuild(str(tmp_path), [])
    assert _contents(tmp_path) == {"experiment_state-2026-11-26.json.damaged": b"an earlier rebuild's",
                                   "experiment_state-2026-11-26.json-2.damaged": b"now"}


def test_the_storage_probe_never_meets_a_file_of_the_users(tmp_path):
    (tmp_path / ".icr-sweep-probe").write_text("mine")
    check_storage(str(tmp_path))
    assert _contents(tmp_path) == {".icr-sweep-probe": b"mine"}


def test_a_folder_made_meanwhile_by_another_hand_stays(tmp_path, monkeypatch):
    """Issue 65, class 1: the user makes runs/NAME/my-notes/ with a file in it while
    the launch starts; a Ctrl-C then removes the launch's own folders (W&B's) and
    keeps the user's, named."""
    def start(opts, spec):
        notes = Path(spec.run_dir()) / "my-notes"
        notes.mkdir()
        (notes / "plan.txt").write_text("try d_state=4 next")
        (Path(spec.run_dir()) / "transformer-cot-tiny-n5-lr3e-3-s0").mkdir()  # Tune's, for a trial not yet started
        _ray_starts_then("ctrl_c")(opts, spec)

    monkeypatch.setattr(cli_sweep, "_start_ray", start)
    result = runner.invoke(app, ["launch", MICRO, "--storage", str(tmp_path / "runs")])
    assert result.exit_code == 130, result.output
    assert _contents(tmp_path) == {"runs/istree_micro/my-notes/plan.txt": b"try d_state=4 next"}
    assert sorted(p.name for p in (tmp_path / "runs" / "istree_micro").iterdir()) == ["my-notes"]
    assert "my-notes/, written there meanwhile by another hand, stay" in result.output, result.output


def test_only_a_launchs_own_folder_names_are_taken_for_its_own():
    from orchestrator.rundir.layout import launch_folder

    for ours in ("wandb", "transformer-cot-0.5M-n32-lr1e-3-s0", "mqar-mamba-vanilla-seqlen64-tiny-dstate4-n8-lr3e-4-s0",
                 "array-mamba-retrieval-0.5M-n16-lr3e-4-s0", "transformer-cot-tiny-n5-lr3.54e-3-s12"):
        assert launch_folder(ours), ours
    for theirs in ("my-notes", "data", "array-notes", "wandb-old", "transformer-cot-0.5M-n32", "n5-lr1e-3-s0.bak"):
        assert not launch_folder(theirs), theirs


@pytest.mark.parametrize("tracked", [False, True], ids=["without-wandb", "with-wandb"])
def test_a_folder_named_as_the_launch_names_its_own_is_kept_where_the_launch_did_not_make_it(tmp_path, monkeypatch,
                                                                                             tracked):
    """Issue 83, class 5: the discard of an unstarted launch removed a wandb/ folder
    the user made meanwhile, and its files, though the spec had no W&B. A folder is
    the launch's only where the launch makes it (W&B's where the spec logs to W&B),
    and what the launch wrote there goes, a file of the user's in it stays: W&B's
    runs and Tune's trial folder go, the user's notes and plot stay."""
    import yaml

    spec = yaml.safe_load(Path(MICRO).read_text())
    if tracked:
        spec["tracking"] = dict(wandb=dict(project="p", mode="offline"))
    spec_path = tmp_path / "spec.yaml"
    spec_path.write_text(yaml.safe_dump(spec))
    run_dir = tmp_path / "runs" / "istree_micro"

    def start(opts, spec):
        theirs = run_dir / ("wandb/my-notes.txt" if tracked else "wandb/notes.txt")
        theirs.parent.mkdir(parents=True, exist_ok=True)
        theirs.write_text("mine")
        (run_dir / "transformer-cot-tiny-n5-lr3e-3-s0").mkdir()
        (run_dir / "transformer-cot-tiny-n5-lr3e-3-s0" / "plot.py").write_text("mine too")
        (run_dir / "mamba-cot-tiny-n5-lr1e-2-s0" / "checkpoint_000000").mkdir(parents=True)  # Tune's, not started
        _ray_starts_then("ctrl_c")(opts, spec)

    monkeypatch.setattr(cli_sweep, "_start_ray", start)
    result = runner.invoke(app, ["launch", str(spec_path), "--storage", str(tmp_path / "runs")])
    assert result.exit_code == 130, result.output
    kept = {name: text for name, text in _contents(tmp_path).items() if name.startswith("runs/")}
    assert kept == {f"runs/istree_micro/wandb/{'my-notes' if tracked else 'notes'}.txt": b"mine",
                    "runs/istree_micro/transformer-cot-tiny-n5-lr3e-3-s0/plot.py": b"mine too"}, kept
    assert ("transformer-cot-tiny-n5-lr3e-3-s0/, wandb/, written there meanwhile by another hand, stay"
            in result.output), result.output
