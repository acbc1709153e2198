"""`launch` and `resume`: a sweep on Ray Tune, with its run directory locked,
its checks made before Ray starts, and its report written at the end."""

import os
import signal
from pathlib import Path
from typing import Optional

import typer

from orchestrator.cli.common import RUN_DIR, app, fail, run_location, say, spec_or_exit
from orchestrator.cli.plan import local_gpus
from orchestrator.secrets import command


def _ray_options(address, temp_dir, dashboard_host, dashboard_port, num_cpus, dashboard=True):
    """The embedded Ray's options, checked before anything starts: Ray itself fails
    on a bad host or temp dir only after minutes, or with a traceback."""
    import socket

    if address is None:
        try:
            socket.getaddrinfo(dashboard_host, dashboard_port)
            with socket.socket(socket.getaddrinfo(dashboard_host, None)[0][0]) as probe:
                probe.bind((dashboard_host, 0))
        except (OSError, UnicodeError) as e:
            fail(f"--dashboard-host {dashboard_host}: not an address of this machine ({getattr(e, 'strerror', None) or e}); "
                  "use 127.0.0.1, or 0.0.0.0 to listen on every interface")
        from orchestrator.cluster import is_loopback, ray_token_auth

        if dashboard and not is_loopback(dashboard_host) and not ray_token_auth():
            fail(f"--dashboard-host {dashboard_host} with RAY_AUTH_MODE={os.environ.get('RAY_AUTH_MODE')}: Ray's "
                 "dashboard and its job-submission API would answer anyone who reaches this machine, with no token, "
                 "and run any command they send as you. Unset RAY_AUTH_MODE (the dashboard then asks for Ray's "
                 "token), or keep it on 127.0.0.1 and reach it through SSH (ssh -L 8265:127.0.0.1:8265 HOST)")
    if address is None and temp_dir is not None:
        existing = Path(temp_dir)
        while not existing.exists() and existing != existing.parent:
            existing = existing.parent
        if not existing.is_dir():
            fail(f"--temp-dir {temp_dir}: {existing} is a file, not a directory")
        if not os.access(existing, os.W_OK):
            fail(f"--temp-dir {temp_dir}: {existing} cannot be written")
    return dict(address=address, temp_dir=temp_dir, dashboard_host=dashboard_host,
                dashboard_port=dashboard_port, num_cpus=num_cpus, dashboard=dashboard)


def driver_log(run_dir: str) -> Path:
    """Where Ray's and Tune's log lines of a launch or resume go (orchestrator.progress):
    the run directory's icr-sweep.log; a remote run's beside its local report copy."""
    from orchestrator.cli.results import local_copy
    from orchestrator.rundir import DRIVER_LOG
    from orchestrator.storage import is_remote

    folder = local_copy(run_dir.rstrip("/").rsplit("/", 1)[-1]) if is_remote(run_dir) else Path(run_dir)
    return folder / DRIVER_LOG


def _start_ray(opts: dict, spec):
    from orchestrator import cluster
    from orchestrator.stopping import sigterm_after_ray_start

    if opts["address"] is not None:
        say(f"Attaching to the Ray cluster at {opts['address']} ...", err=True)
    else:
        say("Starting a local Ray with its dashboard (a few seconds) ..." if opts["dashboard"] else
                   "Starting a local Ray without its dashboard (--no-dashboard; a few seconds) ...", err=True)
    try:
        ctx, notes = cluster.start_ray(spec, **opts, say=lambda line: say(line, err=True))
        sigterm_after_ray_start()
        for note in notes:
            say(note, fg=typer.colors.YELLOW, err=True)
        url = getattr(ctx, "dashboard_url", None)
        if url:
            say(f"Ray dashboard: http://{url}", fg=typer.colors.GREEN, err=True)
            if cluster.ray_token_auth() or opts["address"] is not None:
                say("  It asks for Ray's token: print it with `ray get-auth-token` (kept in ~/.ray/auth_token).",
                           err=True)
            else:
                say(f"  It asks for no token (RAY_AUTH_MODE={os.environ.get('RAY_AUTH_MODE')}): it answers "
                           "this machine's users alone, on 127.0.0.1.", err=True)
        elif not opts["dashboard"] and opts["address"] is None:
            say("Ray is up, without its dashboard (--no-dashboard).", err=True)
        resources, note = cluster.trial_resources(spec, attached=opts["address"] is not None)
    except SystemExit as e:  # SIGTERM while ray.init ran: Ray's own handler, sys.exit(15), ended the launch unsaid
        if e.code != signal.SIGTERM:
            raise
        sigterm_after_ray_start()
        raise KeyboardInterrupt from None  # a stop like any other: said, the unstarted launch discarded, exit 130
    except cluster.ClusterError as e:
        fail(str(e))
    except Exception as e:  # Ray's own start failed (a timeout, a daemon that died): one line, not its traceback
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        if "dashboard" in first and opts["address"] is None and opts["dashboard"] and cluster.port_taken(opts["dashboard_host"], opts["dashboard_port"]):
            fail(f"Ray's dashboard did not start: port {opts['dashboard_port']} is taken by another program. "
                 "Launch again, or choose a free port with --dashboard-port")
        from orchestrator.cluster import ray_temp_dir

        fail(f"Ray did not start ({type(e).__name__}: {first.rstrip(': ')}); its logs are under "
             f"{ray_temp_dir(opts['temp_dir'])}/session_latest/logs")
    say(f"Trials: {note}.", err=True)
    return resources


def _finish(run_dir: str) -> None:
    """Reports the sweep; exits 130 when trials are left to run (interrupted), 1
    when some failed for good, 0 when every planned trial finished."""
    from orchestrator.cli.results import say_failed, write_and_print_report  # here: --help lists status after launch
    from orchestrator.stopping import sigterm_as_ctrl_c
    from orchestrator.rundir import SPEC_FILE, RunDirError, record_driver_end
    from orchestrator.storage import is_remote, silent_for

    silent = is_remote(run_dir) and silent_for(run_dir)
    if silent:  # the report would be read from there and written there: one bounded request says so first
        say(f"The report waits: the storage does not answer ({silent}). The trials' checkpoints there are "
                    f"intact; once it answers again:\n  {command('icr-sweep', 'resume', run_dir)}",
                    fg=typer.colors.YELLOW, err=True)
        raise typer.Exit(130)
    if is_remote(run_dir):  # no driver lock there: status learns from this that no trial runs now
        try:
            record_driver_end(run_dir)
        except (OSError, RunDirError) as e:
            say(f"warning: the driver's end could not be recorded ({e}); status shows the trials it ran as "
                        "running", fg=typer.colors.YELLOW, err=True)
    try:
        with sigterm_as_ctrl_c():  # Tune's loop has ended: a stop here must still say how to get the report
            trials = write_and_print_report(run_dir)
    except KeyboardInterrupt:
        say(f"Stopped while the report was written; the trials' files are intact. Write the report with:\n"
                    f"  {command('icr-sweep', 'report', run_dir)}\n`{command('icr-sweep', 'status', run_dir)}` says whether "
                    f"trials are left to run (then: {command('icr-sweep', 'resume', run_dir)}).",
                    fg=typer.colors.YELLOW, err=True)
        raise typer.Exit(130) from None
    left = trials[trials["state"].isin(["pending", "interrupted", "running"])]
    not_started = trials.attrs.get("not_started", 0)  # an Optuna budget's trials never asked
    if (len(left) or not_started or (trials["state"] == "error").any()) and _records_lost(run_dir):
        say(f"{run_dir} no longer holds {SPEC_FILE}, which launch wrote there: the run directory was deleted "
                    "or emptied while the sweep ran, so no resume can continue it (it would refuse). The trials' files "
                    "still there are in the report above; launch the spec again to run the sweep anew.",
                    fg=typer.colors.RED, err=True)
        raise typer.Exit(1)
    if len(left) or not_started:
        counts = dict(left["state"].value_counts()) | ({"not started": not_started} if not_started else {})
        listed = ", ".join(f"{v} {k}" for k, v in sorted(counts.items()))
        say(f"The sweep stopped with {len(left) + not_started} of {len(trials) + not_started} trials "
                    f"unfinished ({listed}; Ray's and Tune's own messages are in {driver_log(run_dir)}). Continue it "
                    f"with:\n  {command('icr-sweep', 'resume', run_dir)}", fg=typer.colors.YELLOW, err=True)
        raise typer.Exit(130)
    if say_failed(trials):
        say(advice_for_failures(trials[trials["state"] == "error"], run_dir), err=True)
        raise typer.Exit(1)


def _records_lost(run_dir: str) -> bool:
    """Whether the run directory lost the records this driver found or wrote there:
    the spec record, and (a local run's) the driver's own log, opened as the command
    began. A folder deleted mid-sweep is made anew by Tune's sync, without either."""
    from orchestrator.rundir import RecordError, spec_record
    from orchestrator.storage import is_remote

    if not is_remote(run_dir) and driver_log(run_dir).exists():
        return False
    try:
        return spec_record(run_dir) is None
    except (RecordError, OSError):  # there, if damaged: resume names that
        return False


def advice_for_failures(failed, run_dir: str) -> str:
    """What to change for each kind of failure among `failed` (trials in state error):
    a resume retries a trial from its checkpoint as it was, which cures a crash, a
    full disk once freed, but not a setting that makes the loss not finite."""
    errors = failed["error"].fillna("").astype(str)
    room = errors.str.contains("no room for a checkpoint")
    at_once = errors.str.contains("before any update")
    diverged = errors.str.contains(r"loss is -?(?:nan|inf) at step", regex=True) & ~at_once
    lines = []
    if at_once.any():
        lines.append(f"{at_once.sum()} trial(s) have a loss that is not finite before any update: a model or task "
                     "setting of the spec produces it, and any retry meets it again. Change the spec and launch it anew "
                     "(another name or --storage).")
    if diverged.any():
        lines.append(f"{diverged.sum()} trial(s) diverged: lower their architecture's lr in the spec (or set "
                     "training.grad_clip) and launch it anew; a resume retries them at the same rate (a member of a "
                     "trial array, resources.fuse, it leaves failed: its array trains on without it).")
    if room.any():  # where each error says: the storage, or the worker's temp folder a checkpoint is made in first
        folders = sorted(set(errors[room].str.extract(r"no room for a checkpoint in (.+?): \d", expand=False).dropna()))
        lines.append(f"{room.sum()} trial(s) found no room for a checkpoint in {', '.join(folders) or 'a folder'}: free "
                     f"space there, then:\n  {command('icr-sweep', 'resume', run_dir)}")
    if (~(room | at_once | diverged)).any():
        lines.append(f"Retry {'the others' if lines else 'them'} from their checkpoints with:\n  "
                     f"{command('icr-sweep', 'resume', run_dir)}")
    return "\n".join(lines)


def _run_locked(run_dir: str, work, footprint=None) -> None:
    """Runs `work()` holding the run directory's lock (local storage; remote storage
    has no lock), then reports. Ctrl-C stops the sweep; the report then says what
    is left and how to resume. A new launch (its `footprint`, taken before it wrote
    anything) that ends before any trial started (a failed Ray start, a refusal, a
    stop seconds in) removes what it wrote, and nothing else."""
    import contextlib

    from orchestrator.rundir import RunDirError, RunLock
    from orchestrator.storage import is_remote

    lock = contextlib.nullcontext() if is_remote(run_dir) else RunLock(run_dir)
    interrupted = discarded = False
    try:
        with lock:  # what is discarded, is discarded under the lock: no other driver writes there meanwhile
            try:
                work()
            except KeyboardInterrupt:
                interrupted = True
            except (RunDirError, SystemExit, typer.Exit):  # a refusal (exit 2) inside work: nothing of it is kept
                _discard(footprint)
                raise
            except Exception as e:  # the driver itself failed (a full disk, Tune's state cut short): the trials' files stay
                import errno

                full = isinstance(e, OSError) and e.errno == errno.ENOSPC or "truncated" in str(e)
                say(f"The sweep's driver stopped: {_cause(e)}"
                            + ("; the disk is full, or was: free some space before resuming" if full else ""),
                            fg=typer.colors.RED, err=True)
                interrupted = True
            discarded = _discard(footprint, tell=True)
    except RunDirError as e:  # the lock held by another driver, or a refusal inside work
        fail(str(e))
    except KeyboardInterrupt:  # Ctrl-C while the lock was taken or given back
        interrupted = True
    if discarded:
        raise typer.Exit(130)
    if interrupted:
        say("Interrupted.", fg=typer.colors.YELLOW, err=True)
    _finish(run_dir)


def _cause(e: Exception) -> str:
    """An exception in one line, its cause named: Tune hands a failure on as a
    TuneError whose text is the whole traceback, whose last line says what failed."""
    lines = [line.strip() for line in str(e).splitlines() if line.strip()]
    if not lines:
        return type(e).__name__
    return lines[-1] if lines[0].startswith("Traceback") else f"{type(e).__name__}: {lines[0]}"


def _discard(footprint, tell: bool = False) -> bool:
    """Removes what an unstarted launch wrote (nothing where a trial started, or on a
    resume: no footprint); with `tell`, says so. Returns whether it did."""
    kept = footprint.discard() if footprint is not None else None
    if kept is not None:  # the workers' lines go to the run's log until the command ends: not to this one
        from orchestrator import progress
        from orchestrator.rundir import DRIVER_LOG

        log = driver_log(str(footprint.path))
        progress.stop_logging_to(log)
        if DRIVER_LOG not in footprint.before:
            log.unlink(missing_ok=True)  # a line that came between the discard and the stop
    if kept is not None and tell:
        stays = [f"what {footprint.path} held before stays as it was"] if footprint.before else []
        stays += [f"{', '.join(kept)}, written there meanwhile by another hand, stay"] if kept else []
        say("Stopped before any trial started: nothing of this launch was kept"
            + (f" ({'; '.join(stays)})" if stays else "") + ". Launch the spec again to run it.",
            fg=typer.colors.YELLOW, err=True)
    return kept is not None


RAY_OPTIONS = dict(
    address=typer.Option(None, help="attach to a running Ray cluster (e.g. auto) instead of starting one"),
    temp_dir=typer.Option(None, help="a folder for the embedded Ray's files, kept in DIR/ray (default "
                          "<tmp>/icr-sweep-<uid>, made private to you)"),
    dashboard_host=typer.Option("127.0.0.1", help="where the embedded Ray's dashboard listens"),
    dashboard_port=typer.Option(8265, min=1, max=65535),
    num_cpus=typer.Option(None, min=1, help="CPUs the embedded Ray may use (default: all)"),
    dashboard=typer.Option(True, "--dashboard/--no-dashboard", envvar="ICR_SWEEP_DASHBOARD",
                           help="start the embedded Ray with its dashboard (--no-dashboard: a headless machine or CI, "
                           "nine fewer processes and less CPU; ICR_SWEEP_DASHBOARD=0 sets it)"),
)
VERBOSE = typer.Option(False, "--verbose", help="Tune's own status table every 30 s instead of the progress view")


@app.command("launch")
def launch(
    spec: Path = typer.Argument(..., metavar="SPEC", help="sweep spec (YAML)"),
    storage: Optional[str] = typer.Option(None, help="override the spec's storage path"),
    address: Optional[str] = RAY_OPTIONS["address"],
    temp_dir: Optional[str] = RAY_OPTIONS["temp_dir"],
    dashboard_host: str = RAY_OPTIONS["dashboard_host"],
    dashboard_port: int = RAY_OPTIONS["dashboard_port"],
    num_cpus: Optional[int] = RAY_OPTIONS["num_cpus"],
    dashboard: bool = RAY_OPTIONS["dashboard"],
    verbose: bool = VERBOSE,
):
    """Run a sweep on Ray Tune (embedded local Ray unless --address) and write its report."""
    from orchestrator.rundir import Footprint, RunDirError, check_launch_dir, check_storage

    s = spec_or_exit(spec, storage)
    run_dir = s.run_dir()
    opts = _ray_options(address, temp_dir, dashboard_host, dashboard_port, num_cpus, dashboard)
    if getattr(s, "kind", None) == "evaluation":
        return _launch_evaluation(s, opts, verbose)
    _check_trackers(s, run_dir)
    footprint = Footprint(run_dir, _tracker_folders(s, run_dir))  # before anything is written: what the folder held
    try:
        check_storage(run_dir)  # first: it names paths too long to look into
        check_launch_dir(run_dir)
    except RunDirError as e:
        _discard(footprint)
        fail(str(e))

    def work():
        from orchestrator import tune as sweep
        from orchestrator.stopping import ctrl_c_remembered

        with ctrl_c_remembered():
            _launch(sweep)

    def _launch(sweep):
        from orchestrator import progress

        if sweep.holds_sweep(run_dir):
            fail(f"{run_dir} already holds a sweep; continue it with `{command('icr-sweep', 'resume', run_dir)}`, "
                  "or pick another name or --storage")
        _check_optuna_storage(s, run_dir)
        _check_room(s, run_dir, num_cpus, attached=address is not None)
        _preflight(s, on_this_cpu=address is None and (s.resources.device == "cpu" or (
            s.resources.device == "auto" and not local_gpus())), cpus=num_cpus)
        with progress.console(verbose, driver_log(run_dir)):  # Ray's own lines from its start on
            resources = _start_ray(opts, s)
            if resources["gpu"]:
                from orchestrator.packing import gpu_memory_gb, gpu_shares, memory_warnings

                for warning in memory_warnings(gpu_memory_gb(s.resources), gpu_shares(s)):
                    say(f"warning: {warning}", fg=typer.colors.YELLOW, err=True)
            say(f"Sweep {s.name!r} -> {run_dir}", err=True)
            sweep.launch(s, resources)

    _run_locked(run_dir, work, footprint)


def _launch_evaluation(s, opts: dict, verbose: bool) -> None:
    """`launch` of an evaluation spec: pretrained models asked a task's questions
    (orchestrator/evaluations.py), with the run directory's checks, lock, Ray and
    report of a sweep's launch."""
    from orchestrator.rundir import Footprint, RunDirError, check_launch_dir, check_storage

    run_dir = s.run_dir()
    footprint = Footprint(run_dir, ())
    try:
        check_storage(run_dir)
        check_launch_dir(run_dir)
    except RunDirError as e:
        _discard(footprint)
        fail(str(e))

    def work():
        from orchestrator import evaluations, progress
        from orchestrator import tune as sweep
        from orchestrator.stopping import ctrl_c_remembered

        if sweep.holds_sweep(run_dir) or sweep.can_resume(run_dir):
            fail(f"{run_dir} already holds a run; continue it with `{command('icr-sweep', 'resume', run_dir)}`, "
                 "or pick another name or --storage")
        if opts["address"] is None:  # the embedded Ray's trials run here: what they read must be here
            missing = evaluations.preflight(s)
            if missing:
                fail("Nothing was started:\n" + "\n".join(f"  {line}" for line in missing))
        with ctrl_c_remembered(), progress.console(verbose, driver_log(run_dir)):
            resources = _start_ray(opts, s)
            say(f"Evaluation {s.name!r}: {s.trial_count()} trial(s) -> {run_dir}", err=True)
            evaluations.launch(s, resources)

    _run_locked(run_dir, work, footprint)


def _tracker_folders(s, run_dir: str) -> tuple[str, ...]:
    """The trackers' folders a launch of `s` makes in its run directory (W&B's, where
    the spec logs to W&B and its dir is the run directory)."""
    from orchestrator.trackers import folders

    return folders(s, run_dir)


def _check_trackers(s, run_dir: str) -> None:
    """The trackers the spec turns on can take the sweep in `run_dir`
    (orchestrator/trackers/): exit 2 naming the field before Ray starts."""
    from orchestrator.trackers import TrackerError, check_trackers

    try:
        check_trackers(s, run_dir)
    except TrackerError as e:
        fail(str(e))


def _check_optuna_storage(s, run_dir: str) -> None:
    """An Optuna sweep's study storage opens, and holds no study of this sweep's name
    yet (a new launch would otherwise continue an earlier sweep's studies)."""
    if s.search.method != "optuna":
        return
    from orchestrator.optuna_search import optuna_storage, studies_in_use

    storage = optuna_storage(s, run_dir)
    if storage is None:
        say("warning: the run directory is remote and search.storage is not set: the Optuna studies live "
                    "in the driver's memory (and its checkpoints) only, out of optuna-dashboard's reach",
                    fg=typer.colors.YELLOW, err=True)
        return
    try:
        taken = studies_in_use(s, storage)
    except Exception as e:  # a driver missing, a host down, a bad path: SQLAlchemy raises many kinds
        fail(f"search.storage: cannot open the Optuna storage {storage}: {type(e).__name__}: {str(e).splitlines()[0]}")
    if taken:
        fail(f"search.storage: {storage} already holds studies of a sweep named {s.name!r} ({taken[0]}, ...); "
              f"continue that sweep with `icr-sweep resume`, or rename this one")


def _check_optuna_studies_open(s, run_dir: str) -> None:
    """An Optuna sweep's studies can be read before it resumes: a damaged optuna.db
    was named only in Tune's logged traceback, and resume ended at rc 130 each time."""
    if s.search.method != "optuna":
        return
    from orchestrator.optuna_search import optuna_storage, sweep_studies

    storage = optuna_storage(s, run_dir)
    if storage is None:
        return
    import optuna

    remedy = ("the trials' results are intact. Put back a copy of the file, or launch the spec again into a new "
              "directory (another name or --storage)")
    where = storage.removeprefix("sqlite:///")
    if s.search.storage is None and not Path(where).exists():
        fail(f"{where} is gone: it held this sweep's Optuna studies (every trial's rate and value); {remedy}")
    try:
        known = set(optuna.get_all_study_names(storage))
    except Exception as e:  # SQLAlchemy's and sqlite's many kinds
        fail(f"{where}: Optuna's studies cannot be read ({type(e).__name__}: {str(e).splitlines()[0][:200]}); {remedy}")
    lost = [name for name in sweep_studies(s) if name not in known]
    if lost:
        fail(f"{where} lacks {len(lost)} of this sweep's Optuna studies ({', '.join(lost[:2])}): replaced or "
             f"emptied since the launch? {remedy}")


def _running_at_once(s, trials: int, cpus: Optional[int]) -> int:
    """How many trials an embedded Ray runs at once on this machine."""
    slots = int((cpus or os.cpu_count() or 1) // s.resources.cpus_per_trial) or 1
    return min(slots, s.resources.max_concurrent or slots, trials)


def _check_room(s, run_dir: str, cpus: Optional[int], attached: bool) -> None:
    """Local storage holds a checkpoint of each trial that runs at once (two while a
    new one is written, and a margin), or exit 2 before anything starts: the trials
    trained to their first evaluation and failed there, each retried from zero."""
    import shutil

    from orchestrator.grid import shape_trials
    from orchestrator.storage import is_remote
    from workloads.memory import SPACE_MARGIN, checkpoint_room

    if is_remote(run_dir):
        return
    trials = shape_trials(s)
    running = (s.resources.max_concurrent or 1) if attached else _running_at_once(s, len(trials), cpus)
    need = checkpoint_room(trials, min(running, len(trials)))
    free = shutil.disk_usage(run_dir.removeprefix("file://")).free  # check_storage made the directory
    if free < need:
        fail(f"storage {run_dir}: {free / 2**20:.1f} MiB free, but the {running} trial(s) that run at once need about "
             f"{need / 2**20:.0f} MiB to keep their checkpoints (two each while a new one is written, and "
             f"{SPACE_MARGIN >> 20} MiB kept free); free some space there or choose another --storage")


def _preflight(s, on_this_cpu: bool, cpus: Optional[int] = None) -> None:
    """Builds and runs each distinct model of the sweep once on the CPU, and holds
    CPU trials' memory against this machine's, before Ray starts: exit 2 naming
    the trials that could not run."""
    from orchestrator.grid import shape_trials
    from workloads.preflight import check_models, cpu_memory_problems

    trials = shape_trials(s)
    problems, warnings = [], []
    if on_this_cpu:
        problems, warnings = cpu_memory_problems(trials, _running_at_once(s, len(trials), cpus))
    too_big = {p.split(" ", 1)[0] for p in problems}
    problems += check_models([t for t in trials if t.name not in too_big], on_cpu=on_this_cpu)  # one too big is not built
    for warning in warnings:
        say(f"warning: {warning}", fg=typer.colors.YELLOW, err=True)
    if problems:
        more = f"\n  ... and {len(problems) - 10} more" if len(problems) > 10 else ""
        fail("no trial was started; these could not run:\n  " + "\n  ".join(problems[:10]) + more)


@app.command("resume")
def resume(
    run_dir: str = RUN_DIR,
    address: Optional[str] = RAY_OPTIONS["address"],
    temp_dir: Optional[str] = RAY_OPTIONS["temp_dir"],
    dashboard_host: str = RAY_OPTIONS["dashboard_host"],
    dashboard_port: int = RAY_OPTIONS["dashboard_port"],
    num_cpus: Optional[int] = RAY_OPTIONS["num_cpus"],
    dashboard: bool = RAY_OPTIONS["dashboard"],
    verbose: bool = VERBOSE,
):
    """Continue an interrupted sweep: finished trials stay, the rest continue from their checkpoints."""
    from orchestrator.rundir import SECRETS_FILE, RunDirError, blocked_files, check_storage, masked_secrets, spec_location
    from orchestrator.spec import SpecError, run_spec
    from orchestrator.storage import is_remote

    run = run_location(run_dir)
    try:
        s = run_spec(run)
    except SpecError as e:
        fail(f"{e}; launch the spec again into a new directory (finished trials there are kept as they are)")
    except (RunDirError, OSError) as e:
        fail(f"{run_dir}: cannot be read ({e})")
    if s is None:
        fail(f"{run_dir} is not a sweep run directory (no {spec_location(run_dir).rsplit('/', 1)[-1]}, which launch writes)")
    masked = [field for field in masked_secrets(s.model_dump(mode="json")) if field != "storage"]  # resume: RUN_DIR's
    if masked:
        fail(f"{run_dir}: the secret in {', '.join(masked)} is kept in {SECRETS_FILE}, which cannot be read here "
             "(missing, damaged, or another user's): resume as the user who launched the sweep, or put the file back")
    try:
        check_storage(run, flag="place: copy the run directory somewhere writable and resume the copy")
    except RunDirError as e:
        fail(str(e))
    blocked = [] if is_remote(run) else blocked_files(run)
    if blocked:  # the driver would stop at its first write there, and every resume again
        fail("; ".join(blocked[:5]) + (f"; and {len(blocked) - 5} more" if len(blocked) > 5 else "")
             + ". Move each away (a trial's results are restored from its checkpoints), then resume")
    opts = _ray_options(address, temp_dir, dashboard_host, dashboard_port, num_cpus, dashboard)
    if getattr(s, "kind", None) == "evaluation":
        return _resume_evaluation(run, s, opts, verbose)
    _check_trackers(s, run)

    def work():
        from orchestrator import progress, tune as sweep
        from orchestrator.cluster import ClusterError
        from orchestrator.stopping import ctrl_c_remembered

        if not sweep.can_resume(run) and not sweep.holds_sweep(run):
            fail(f"{run_dir}: Ray Tune saved no experiment state there yet; launch the spec again")
        _check_optuna_studies_open(s, run)
        _check_room(s, run, num_cpus, attached=address is not None)
        with ctrl_c_remembered(), progress.console(verbose, driver_log(run)):  # Ray's own lines from its start on
            resources = _start_ray(opts, s)
            try:
                sweep.resume(run, s, resources, say=lambda line: say(line, fg=typer.colors.YELLOW, err=True))
            except ClusterError as e:
                fail(str(e))

    _run_locked(run, work)


def _resume_evaluation(run: str, s, opts: dict, verbose: bool) -> None:
    """`resume` of an evaluation run: finished evaluations stay; the others ask only
    the questions their answers file lacks (the run directory checked as a sweep's)."""

    def work():
        from orchestrator import evaluations, progress
        from orchestrator.stopping import ctrl_c_remembered

        with ctrl_c_remembered(), progress.console(verbose, driver_log(run)):
            resources = _start_ray(opts, s)
            evaluations.resume(run, s, resources, say=lambda line: say(line, fg=typer.colors.YELLOW, err=True))

    _run_locked(run, work)
