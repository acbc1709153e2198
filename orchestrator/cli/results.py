"""`status` and `report`: a run read as stored (no Ray), during or after it."""

import json
from pathlib import Path
from typing import Optional

import typer

from orchestrator.cli.common import RUN_DIR, ListFormat, app, fail, print_table, run_location, say
from orchestrator.secrets import command
from workloads.metrics import SOLVED
from workloads.tasks import TASKS


def _read_run(run_dir: str):
    """The run as stored (orchestrator.rundir.Run), read from a local copy when it is remote."""
    from orchestrator.api import read_stored
    from orchestrator.rundir import RunDirError
    from orchestrator.storage import is_remote, local_view

    _require_run(run_dir)
    try:
        with local_view(run_dir) as local:
            return read_stored(local, locked=not is_remote(run_dir))
    except (RunDirError, OSError) as e:
        fail(f"{run_dir}: cannot be read ({e})")


def _require_run(run_dir: str) -> None:
    """Refuses a local path that does not exist or is not a directory, by name; and a
    remote folder that holds no run (a storage root: its runs named), before it is
    copied (a storage root's every run was, to show nothing)."""
    from orchestrator.storage import is_remote

    if is_remote(run_dir):
        _require_remote_run(run_dir)
        return
    path = Path(run_dir)
    if not path.exists():
        fail(f"{run_dir}: no such run directory (a sweep's is <storage>/<name>, e.g. runs/istree_smoke)")
    if not path.is_dir():
        fail(f"{run_dir}: not a directory; a sweep's run directory is <storage>/<name>, e.g. runs/istree_smoke")


def _require_remote_run(run_dir: str) -> None:
    from orchestrator.rundir import PARAMS_FILE, SPEC_FILE, RunDirError
    from orchestrator.storage import names_in, read_file

    base = run_dir.rstrip("/")
    try:
        if any(read_file(f"{base}/{name}") is not None for name in (SPEC_FILE, PARAMS_FILE)):
            return
        names = sorted(names_in(base))
        runs = [name for name in names[:50] if read_file(f"{base}/{name}/{SPEC_FILE}") is not None]
    except (OSError, ValueError, RunDirError) as e:  # no such bucket, no access, no answer: one line naming it
        fail(f"{run_dir}: cannot be read ({str(e).splitlines()[0] if str(e) else type(e).__name__})")
    if runs:
        fail(f"{run_dir} is a storage folder holding the runs {', '.join(runs[:6])}{', ...' if len(runs) > 6 else ''}; "
             f"name one: {base}/{runs[0]}")
    fail(f"{run_dir} holds no run of icr-sweep (no {SPEC_FILE} there, nor in a folder at its top"
         + (f"; it holds {', '.join(names[:6])}" if names else ", which is empty") + ")")


@app.command("status")
def status(run_dir: str = RUN_DIR, format: ListFormat = typer.Option("table", help="table, or json: one object per trial")):
    """Trials of a sweep with their state and latest metrics (during or after it)."""
    from orchestrator import evaluations

    evaluation = evaluations.stored(run_location(run_dir))
    if evaluation is not None:
        return _evaluation_status(run_location(run_dir), evaluation, format)
    run = _read_run(run_location(run_dir))
    df = run.trials
    if df.empty:
        fail(_no_trials(run_dir))
    for note in run.notes:
        typer.secho(f"note: {note}", fg=typer.colors.YELLOW, err=True)
    from workloads.metrics import METRICS, PLOTTED

    generates = TASKS[run.task][1].generates if run.task in TASKS else True
    shown = [m for m in PLOTTED if generates or not METRICS[m].generation]
    trials = df.sort_values("trial")
    if format == "json":  # every value as stored: numbers as numbers, null where not measured
        # What the table shows, and what a table of one's own needs: the trial's ids
        # and every figure (the report's tie-break, val_loss, among them).
        from workloads.results import TRIAL_IDS

        wide = ["trial", "state", *TRIAL_IDS.values(), "task_label", "samples", "train_loss", "samples_per_s",
                *METRICS, "error"]
        records = [{c: _plain(r.get(c)) for c in wide if c in trials} for r in trials.to_dict("records")]
        typer.echo(json.dumps(records, indent=1, default=float))
        return
    rows = [
        dict(trial=r["trial"], state=r["state"], samples=_int(r["samples"]), train_loss=_f(r["train_loss"]),
             **{m: _f(r[m]) for m in shown}, error=r["error"][:60])
        for _, r in trials.iterrows()
    ]
    print_table(rows)
    typer.echo(", ".join(f"{v} {k}" for k, v in sorted(df["state"].value_counts().items())))


def _evaluation_status(run_dir: str, spec, format: str) -> None:
    """`status` of an evaluation run: each evaluation's state, questions answered and scores."""
    from orchestrator import evaluations

    table = evaluations.status_rows(run_dir, spec)
    if format == "json":
        typer.echo(json.dumps([{c: _plain(v) for c, v in r.items()} for r in table.to_dict("records")], indent=1))
        return
    print_table([dict(trial=r["trial"], state=r["state"], questions=f"{r['questions']}/{r['n']}",
                      exact_match=_f(r["exact_match"]), f1=_f(r["f1"]), error=r["error"][:60])
                 for _, r in table.iterrows()])
    typer.echo(", ".join(f"{v} {k}" for k, v in sorted(table["state"].value_counts().items())))


def _no_trials(run_dir: str, otherwise: str = "no trials yet") -> str:
    """Why a folder shows no trials: a storage folder holding runs names them."""
    from orchestrator.rundir import SPEC_FILE
    from orchestrator.storage import is_remote

    runs = [] if is_remote(run_dir) else sorted(p.parent.name for p in Path(run_dir).glob(f"*/{SPEC_FILE}"))
    if runs:
        return (f"{run_dir} is a storage folder holding the runs {', '.join(runs[:6])}{', ...' if len(runs) > 6 else ''}; "
                f"name one: {Path(run_dir) / runs[0]}")
    return f"{run_dir}: {otherwise}"


def _plain(v):
    """A stored value as JSON holds it: null where not measured, numbers as numbers."""
    if v is None or (isinstance(v, float) and v != v):
        return None
    return v.item() if hasattr(v, "item") else v


def _int(v):
    return "-" if v is None or v != v else int(v)


def _f(v):
    return "-" if v is None or v != v else f"{v:.3f}"


@app.command("report")
def report(
    run_dir: str = RUN_DIR,
    out: Optional[Path] = typer.Option(None, help="also keep a copy of the report here (remote runs: default ./reports/NAME)"),
    solved: float = typer.Option(SOLVED, min=0.0, max=1.0, help="exact match at which the frontier counts a cell solved"),
):
    """Aggregate stored results: report.md, results.csv, best.csv, accuracy plots and, for a
    sweep over several n, the frontier (frontier.csv, frontier.png), written into the run
    directory (on remote storage too)."""
    say_failed(write_and_print_report(run_location(run_dir), out, solved))


def local_copy(run_name: str) -> Path:
    """Where a remote run's report is copied here by default (and its driver's log
    kept): ./reports/NAME."""
    return Path("reports") / run_name


def say_failed(trials) -> list[str]:
    """Names the trials that failed for good, if any; returns them."""
    failed = sorted(trials.loc[trials["state"] == "error", "trial"])
    if failed:
        typer.secho(f"{len(failed)} trial(s) failed (errors in the report): {', '.join(failed)}", fg=typer.colors.RED, err=True)
    return failed


def write_and_print_report(run_dir: str, out: Optional[Path] = None, solved: float = SOLVED):
    """Writes and prints the report (into the run directory; for a remote run also
    into `out`, a local folder); returns the per-trial table."""
    import shutil

    import errno

    from orchestrator.api import read_stored
    from orchestrator.report import console_summary, open_commands, report_files, write_report
    from orchestrator.rundir import RunDirError, check_report_dir, record_report
    from orchestrator.storage import is_remote, local_view, upload

    from orchestrator import evaluations

    remote = is_remote(run_dir)
    _require_run(run_dir)
    evaluation = evaluations.stored(run_dir)
    if evaluation is not None:
        say(evaluations.report(run_dir, evaluation) + f"Report: {run_dir}/{evaluations.REPORT}")
        trials = evaluations.status_rows(run_dir, evaluation)
        trials.attrs["not_started"] = 0
        return trials
    try:
        with local_view(run_dir) as local:
            run = read_stored(local, locked=not remote)
            trials = run.trials
            try:
                written = write_report(run, local, solved=solved, location=run_dir)
            except FileNotFoundError as e:
                fail(_no_trials(run_dir, str(e).replace(str(local), run_dir).split(": ", 1)[-1]))
            except OSError as e:
                if e.errno != errno.ENOSPC:
                    raise
                # A full disk: the trials' files can still be read; what is left, and how to go on, is said.
                typer.secho(f"The report cannot be written into {run_dir}: the disk is full. Free some space, then "
                            f"`{command('icr-sweep', 'report', run_dir)}` writes it.", fg=typer.colors.RED, err=True)
                return trials
            files = report_files(local)
            opened = open_commands(run, run_dir, local)
            if remote:
                upload(files, run_dir)
            if out is not None and Path(out).resolve() == Path(local).resolve():
                out = None  # --out the run directory itself: the report is there already
            if remote or out is not None:
                out = out or local_copy(local.name)
                check_report_dir(out, flag="--out")  # a folder of the user's: no file of theirs is replaced
                out.mkdir(parents=True, exist_ok=True)
                for file in files:
                    shutil.copy(file, out / file.name)
                record_report(out, [file.name for file in files])
    except (RunDirError, OSError) as e:
        fail(f"{run_dir}: cannot be read or written ({e})")
    where = f"{run_dir}/report.md" + (f" and {out}/report.md" if out is not None else "")
    say("\n".join([console_summary(written),
                   f"Report: {where} ({', '.join(f.name for f in files if f.name != 'report.md')} beside it)",
                   "Open this run in:", *(f"  {line}" for line in opened)]))
    trials.attrs["not_started"] = run.not_started
    return trials
