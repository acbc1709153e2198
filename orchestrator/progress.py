"""What the console shows of a running sweep: one block that updates in place on
a terminal (rich's Live display), a line per change where the output is a file or
a pipe; Tune's own status table only with --verbose.

The block and the lines say the same: trials finished / running / pending /
failed of the plan, training samples done of the plan, the rate measured in this
run, the time left at that rate, and the newest evaluation. An array's members
(orchestrator/arrays.py) count as the trials they are. Tune calls the reporter
after every step of its loop; it pickles it with the run (tuner.pkl) and a resume
unpickles it, so the console's settings are read when it reports (`console`)."""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Sequence

from ray.tune import ProgressReporter

from orchestrator.arrays import array_of, member_names
from orchestrator.projection import format_duration
from workloads.metrics import HEADLINE, METRICS

REFRESH_S = 0.5  # the block is redrawn at most this often (its clock ticks with it)
TOLD_EVERY_S = 2.0  # a running trial's told count is read at most this often
RUNNING_SHOWN = 6  # running trials listed in the block, the rest counted
BAR_WIDTH, MIN_BAR_WIDTH = 40, 12  # the bar's columns, and the fewest it keeps beside its words
_HEADLINE = METRICS[HEADLINE].label.replace("_", " ")  # "exact match" (on the validation set)

_CONSOLE = {"verbose": False, "shown": []}


@contextlib.contextmanager
def console(verbose: bool, log_file: Optional[Path] = None):
    """Within it, sweeps report as `verbose` says (Tune's table, or ours), and Ray's
    and Tune's log lines (their restore, their stop, their warnings) go to
    `log_file`, appended, not to the console, unless `verbose`. Afterwards any block
    still drawn is closed (a stop, a failure), so that what follows prints below it."""
    _CONSOLE.update(verbose=verbose, shown=[])
    try:
        with contextlib.nullcontext() if verbose or log_file is None else _logs_to(log_file):
            yield
    finally:
        for shown in _CONSOLE["shown"]:
            shown.close()
        _CONSOLE.update(verbose=False, shown=[])


class _LogFile(logging.FileHandler):
    """A log file that a full disk silences (its lines lost) rather than printing
    logging's own traceback to the console at every line, and that never holds a
    URL's secret (a storage's key that Ray's or Tune's lines name). Once stopped
    (`stop_logging_to`) it writes nothing, not even a line already on its way."""

    stopped = False

    def emit(self, record):
        if not self.stopped:  # a closed FileHandler reopens its file at the next line
            super().emit(record)

    def handleError(self, record):
        pass

    def format(self, record) -> str:
        from orchestrator.secrets import redact

        return redact(super().format(record))


# Libraries whose loggers print on the driver's console (Ray's, Tune's and Train's
# under "ray"; Optuna's study lines; MLflow's database set-up): the run's log instead.
LIBRARIES = ("ray", "optuna", "mlflow")


def stop_logging_to(log_file: Path) -> None:
    """The workers' lines, which go to the run's log for the rest of the command
    (`_logs_to`), no longer go to `log_file`: a launch that removes what it wrote
    (nothing of it is kept) must not write it again with a late line of Ray's."""
    from orchestrator.unpromised import WORKER_LOG

    workers = logging.getLogger(WORKER_LOG)
    gone = [h for h in workers.handlers if getattr(h, "baseFilename", None) == str(log_file.resolve())]
    for handler in gone:
        handler.stopped = True
        handler.close()
    if gone:
        workers.handlers = [h for h in workers.handlers if h not in gone] or [logging.NullHandler()]


@contextlib.contextmanager
def _logs_to(log_file: Path):
    """The loggers of LIBRARIES write to `log_file` alone; the workers' lines kept
    off the console (unpromised.WORKER_LOG) go there for the rest of the command
    (W&B's actor prints after Tune's loop has ended)."""
    import optuna.logging

    from orchestrator.unpromised import WORKER_LOG

    log_file.parent.mkdir(parents=True, exist_ok=True)
    workers = logging.getLogger(WORKER_LOG)
    workers.propagate = False
    if not any(getattr(h, "baseFilename", None) == str(log_file.resolve()) for h in workers.handlers):
        kept = _LogFile(log_file, encoding="utf-8", delay=True)
        kept.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s -- %(message)s"))
        workers.handlers = [kept]
    handler = _LogFile(log_file, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(filename)s:%(lineno)d -- %(message)s"))
    optuna.logging.get_verbosity()  # Optuna adds its console handler once, at first use: now, to be replaced
    # MLflow adds its own at import (a tracker's callback imports it after this), unless told not to
    configure = "MLFLOW_CONFIGURE_LOGGING"
    given = os.environ.setdefault(configure, "false") if configure not in os.environ else None
    loggers = [logging.getLogger(name) for name in LIBRARIES]
    saved = [(logger.handlers[:], logger.propagate, logger.level) for logger in loggers]
    for logger in loggers:
        logger.handlers, logger.propagate = [handler], False
        logger.setLevel(logger.level or logging.INFO)  # unset, it would take the root's WARNING
    try:
        yield
    finally:
        for logger, (handlers, propagate, level) in zip(loggers, saved):
            logger.handlers, logger.propagate = handlers, propagate
            logger.setLevel(level)
        if given is not None:
            os.environ.pop(configure, None)
        handler.close()


@dataclass
class Tally:
    """The sweep at one moment, counted in the user's trials (an array's members)."""

    finished: int = 0
    running: list[tuple[str, int, int]] = field(default_factory=list)  # (name, samples done, samples planned)
    failed: int = 0
    started: int = 0  # trials Tune has been handed (the rest of the plan is pending)
    waiting: int = 0  # trials Tune holds that wait for resources
    samples: int = 0
    speed: float = 0.0  # samples per second of the running trials, as measured
    queued: list = field(default_factory=list)  # the cost (grid.planned_costs) of each trial Tune holds waiting


@dataclass
class Evaluation:
    trial: str
    samples: int
    value: Optional[float]


class SweepProgress(ProgressReporter):
    """Tune's progress reporter for a sweep of `planned_trials` trials training
    `planned_samples` samples in all; `table` is Tune's own (shown with --verbose)."""

    def __init__(self, planned_trials: int, planned_samples: int, table: ProgressReporter,
                 costs: Sequence[tuple[tuple, int, float]] = ()):
        self.planned_trials, self.planned_samples, self.table = planned_trials, planned_samples, table
        self.costs = list(costs)  # each planned trial's (class, samples, cost of a sample): grid.planned_costs
        self.kept = (0, 0)  # (trials, samples) finished before a rebuilt resume, which hands Tune the rest alone
        self._fresh()

    def __getstate__(self):  # pickled with the run: what it has seen and drawn stays behind
        return {"planned_trials": self.planned_trials, "planned_samples": self.planned_samples, "table": self.table,
                "kept": self.kept, "costs": self.costs}

    def __setstate__(self, state):
        self.__dict__.update({"kept": (0, 0), "costs": [], **state})  # a run of an earlier version: no costs
        self._fresh()

    def _fresh(self) -> None:
        self.states: dict[str, str] = {}  # trial name -> its last state seen
        self.iterations: dict[str, int] = {}  # Tune trial id -> the last result seen
        self.failures: dict[str, int] = {}  # Tune trial id -> its failures seen (Tune retries up to max_failures)
        self.names: dict[str, list[str]] = {}  # Tune trial id -> the user's trials it runs
        self.failed_members: set[str] = set()
        self.newest: Optional[Evaluation] = None
        self.first: Optional[tuple[float, int]] = None  # (time, samples) when this driver first reported
        self.live, self.drawn_at = None, 0.0
        self.interactive: Optional[bool] = None  # whether the console redraws: asked once, at the first report
        self.told: dict[str, tuple[float, Optional[tuple[int, float]]]] = {}  # trial id -> (when read, its word)
        self.shapes: dict[str, Optional[tuple]] = {}  # trial id -> (class, samples, cost of a sample), or None
        self.rates: dict[str, tuple[tuple, float, float]] = {}  # trial id -> (class, cost of a sample, samples/s)
        self.training_shares: dict[str, float] = {}  # trial id -> its time's share spent training (rows: evaluations)
        self.slots = 1  # the most trials seen running at once
        self.clock = time.monotonic
        self.seen: dict[str, float] = {}  # trial id -> when it was first seen running
        self.starts: list[float] = []  # seconds a trial ran before it trained (its worker's start), as measured

    def should_report(self, trials, done: bool = False) -> bool:
        return self.table.should_report(trials, done) if _CONSOLE["verbose"] else True

    def report(self, trials, done: bool, *sys_info: str) -> None:
        if _CONSOLE["verbose"]:
            return self.table.report(trials, done, *sys_info)
        first = self.first is None
        events = self._events(trials)
        tally = self._tally(trials)
        if first:
            self.first = (time.monotonic(), tally.samples)
            if tally.samples:  # a resume: what it restored comes first
                events.insert(0, _restored(trials, self.planned_trials, self.kept[0]))
        if self.interactive is None:
            self.interactive = _interactive()
        if self.interactive:
            self._draw(events, tally, done)
        else:
            for event in events:
                print(f"[{time.strftime('%H:%M:%S')}] {event} · {self.summary(tally)}", flush=True)
            if done:
                ended = "stopped" if tally.running else "ended"
                print(f"[{time.strftime('%H:%M:%S')}] {ended} · {self.summary(tally)}", flush=True)

    def _events(self, trials) -> list[str]:
        """What changed since the last report, a line each: trials started, evaluated,
        finished, failed."""
        events = []
        for trial in trials:
            result = trial.last_result or {}
            rows = _rows(trial, result)
            for member in (result.get("member_errors") or {}):
                if member not in self.failed_members:
                    self.failed_members.add(member)
                    events.append(f"failed {member}: {str(result['member_errors'][member]).splitlines()[0][:200]}")
            iteration = result.get("training_iteration") or 0
            if iteration > self.iterations.get(trial.trial_id, 0):
                self.iterations[trial.trial_id] = iteration
                evaluated = [(name, row) for name, row in rows.items() if row.get("evaluated", True)
                             and row.get("samples") and name not in self.failed_members]
                if evaluated:
                    name, row = evaluated[0]
                    self.newest = Evaluation(name, int(row["samples"]), _number(row.get(HEADLINE)))
                    if trial.status == "RUNNING" and self.states.get(trial.trial_id) == "RUNNING":
                        events.append(f"evaluated {_evaluation(self.newest)}")
            before, now = self.states.get(trial.trial_id), trial.status
            self.states[trial.trial_id] = now
            failures = getattr(trial, "num_failures", 0) or 0
            if failures > self.failures.setdefault(trial.trial_id, failures) and now != "ERROR":
                events.append(f"retrying {', '.join(self._members(trial))} after a failure ({failures} so far; "
                              f"its error: {_error_file(trial)})")
            self.failures[trial.trial_id] = failures
            if now == before or (before is None and now in ("PENDING", "TERMINATED")):
                continue  # a trial restored finished, or not started yet, is counted, not announced
            names = ", ".join(n for n in self._members(trial) if n not in self.failed_members) or str(trial)
            if now == "RUNNING":
                events.append(f"started {names}")
            elif now == "TERMINATED":
                scores = {name: _figure(_number(row.get(HEADLINE))) for name, row in rows.items()
                          if name not in self.failed_members}
                events.append(f"finished {names}: {_HEADLINE} " + (
                    next(iter(scores.values())) if len(scores) == 1 else
                    ", ".join(f"{score} ({name})" for name, score in scores.items()) or "none"))
            elif now == "ERROR":
                events.append(f"failed {names} (its error: {_error_file(trial)})")
        return events

    def _tally(self, trials) -> Tally:
        tally = Tally(finished=self.kept[0], started=self.kept[0], samples=self.kept[1])
        for trial in trials:
            result = trial.last_result or {}
            self._shape(trial)
            members = [n for n in self._members(trial) if n not in self.failed_members]
            tally.failed += len(self._members(trial)) - len(members)
            tally.started += len(self._members(trial))
            rows = _rows(trial, result)
            tally.samples += sum(int(rows.get(n, {}).get("samples") or 0) for n in members)
            if trial.status == "TERMINATED":
                tally.finished += len(members)
            elif trial.status == "ERROR":
                tally.failed += len(members)
            elif trial.status == "RUNNING":
                planned = _planned_samples(trial)
                told = self._told(trial)
                done = 0
                for n in members:
                    done = max(int(rows.get(n, {}).get("samples") or 0), told[0] if told else 0)
                    tally.samples += done - int(rows.get(n, {}).get("samples") or 0)
                    tally.running.append((n, done, planned))
                spent = _number(result.get("time_total_s"))  # Tune's: the trainable's time so far
                tally.speed += self._measure(trial, rows, told, done, spent) * len(members)
            else:
                tally.waiting += len(members)
                tally.queued += [self._shape(trial)] * len(members)
        self.slots = max(self.slots, len(tally.running))
        return tally

    def _told(self, trial) -> Optional[tuple[int, float]]:
        """The (samples, samples/s) a running trial told last (it tells every few
        seconds between its evaluations: worker.py), read at most every TOLD_EVERY_S."""
        now = self.clock()
        when, told = self.told.get(trial.trial_id, (-TOLD_EVERY_S, None))
        if now - when >= TOLD_EVERY_S:
            told = _told_by(trial)
            self.told[trial.trial_id] = (now, told)
        return told

    def _shape(self, trial) -> Optional[tuple[tuple, int, float]]:
        """A Tune trial's (class, samples, cost of a sample), its array's first member's."""
        if trial.trial_id not in self.shapes:
            try:
                self.shapes[trial.trial_id] = _shape(trial)
            except Exception:  # a config of another version, or none: no weight
                self.shapes[trial.trial_id] = None
        return self.shapes[trial.trial_id]

    def _measure(self, trial, rows: dict, told: Optional[tuple[int, float]], done: int,
                 spent: Optional[float] = None) -> float:
        """A running trial's training speed, samples per second: what it told, else its
        newest row's (its training's own, evaluations aside); 0 where neither is known
        yet. Kept for the time left: once it has a row, its samples over the time its
        trainable has run (`spent`, Tune's time_total_s), so that its evaluations
        count (generating them stops its training: the capacity spec's run 2 read 13
        minutes left where 18.5 were), never above its training speed. The first time the
        speed is known, the seconds the trial ran before it trained are kept too."""
        now = self.clock()
        seen = self.seen.setdefault(trial.trial_id, now)
        newest = next(iter(rows.values()), {})
        rate = told[1] if told else 0.0
        if not rate:
            rate = _number(newest.get("samples_per_s")) or 0.0
        shape = self._shape(trial)
        if rate > 0 and shape is not None:
            if trial.trial_id not in self.rates and seen < now:
                self.starts.append(max(0.0, now - seen - done / rate))
            trained = _number(newest.get("samples"))
            if trained and spent:  # its share of time spent training, evaluations aside
                self.training_shares[trial.trial_id] = min(1.0, trained / spent / rate)
            share = self.training_shares.get(trial.trial_id)
            if share is None:  # no row yet: the share the trials with rows measured
                shares = sorted(self.training_shares.values())
                share = shares[len(shares) // 2] if shares else 1.0
            self.rates[trial.trial_id] = (shape[0], shape[2], rate * share)
        return rate

    def summary(self, tally: Tally) -> str:
        """The sweep in one line: trials, samples, rate and time left."""
        return " · ".join(self._summary_parts(tally))

    def _summary_parts(self, tally: Tally) -> list[str]:
        """The trials; the samples; the rate and the time left, where measured."""
        pending = max(0, self.planned_trials - tally.started) + tally.waiting
        parts = [f"{tally.finished}/{self.planned_trials} finished, {len(tally.running)} running, {pending} pending"
                 + (f", {tally.failed} failed" if tally.failed else "")]
        share = f" ({100 * tally.samples / self.planned_samples:.0f}%)" if self.planned_samples else ""
        parts.append(f"{tally.samples:,}/{self.planned_samples:,} samples{share}")
        rate, left = self._rate(tally), self.time_left(tally)
        parts += [f"{rate:,.0f} samples/s"] if rate else []
        parts += [f"about {format_duration(left)} left"] if left and left >= 1 else []
        return parts

    def time_left(self, tally: Tally) -> Optional[float]:
        """The seconds the summary says are left (None before any speed is measured)."""
        left = self._left(tally)
        if left is not None:
            return left
        rate = self._rate(tally)  # without the plan's costs (a run of an earlier version): the samples left at it
        return max(0, self.planned_samples - tally.samples) / rate if rate else None

    def _left(self, tally: Tally) -> Optional[float]:
        """Seconds left: each trial's samples left times the cost of a sample
        (grid.sample_cost), at its class's speed measured in this run (else its
        model's, its arch's, the sweep's), the running trials' and the pending
        ones' shared among the trials that run at once, never less than the
        longest running trial's. None before any speed is measured, or without the
        plan's costs."""
        if not self.costs or not self.rates:
            return None
        speeds: dict[tuple, list[float]] = {}
        for cls, cost, rate in self.rates.values():
            for key in (cls, cls[:2], cls[:1], ()):
                speeds.setdefault(key, []).append(rate * cost)  # cost per second

        def seconds(cls: tuple, samples: int, cost: float) -> float:
            speed = next(sum(v) / len(v) for key in (cls, cls[:2], cls[:1], ()) if (v := speeds.get(key)))
            return samples * cost / speed

        start = sum(self.starts) / len(self.starts) if self.starts else 0.0  # a worker's start, before it trains
        now = self.clock()
        shapes = {name: (trial_id, shape) for trial_id, shape in self.shapes.items() if shape
                  for name in self.names.get(trial_id, [])}
        running = [seconds(shape[0], max(0, planned - done), shape[2])
                   + (0.0 if trial_id in self.rates else max(0.0, start - (now - self.seen.get(trial_id, now))))
                   for n, done, planned in tally.running if n in shapes for trial_id, shape in [shapes[n]]]
        handed = [shape for _, shape in shapes.values()]
        unhanded = _minus(self.costs, handed)[:max(0, self.planned_trials - tally.started)]
        waiting = [start + seconds(cls, samples, cost) for cls, samples, cost in [*unhanded, *filter(None, tally.queued)]]
        total = sum(running) + sum(waiting)
        return max(max(running, default=0.0), total / max(1, self.slots))

    def _rate(self, tally: Tally) -> float:
        """Samples per second: the running trials' measured speeds added up, else
        the samples trained since this driver started over its time (0 before any)."""
        if tally.speed:
            return tally.speed
        if self.first is None:
            return 0.0
        elapsed, done = time.monotonic() - self.first[0], tally.samples - self.first[1]
        return done / elapsed if done > 0 and elapsed > 0 else 0.0

    def _draw(self, events: list[str], tally: Tally, done: bool) -> None:
        """The block, in place on the terminal, with each change of a trial's state
        printed above it (an evaluation updates the block alone)."""
        from rich.live import Live

        if self.live is None and not done:
            self.live = Live(auto_refresh=False, redirect_stdout=True, redirect_stderr=True, transient=False)
            self.live.start()
            _CONSOLE["shown"].append(self)
        if self.live is None:
            return
        for event in events:
            if not event.startswith("evaluated "):  # the block's newest evaluation shows these
                self.live.console.print(f"[dim]{time.strftime('%H:%M:%S')}[/dim] {event}", highlight=False)
        now = time.monotonic()
        if events or done or now - self.drawn_at >= REFRESH_S:
            self.drawn_at = now
            self.live.update(self._block(tally), refresh=True)
        if done:
            self.close()

    def _block(self, tally: Tally):
        from rich.console import Group
        from rich.progress_bar import ProgressBar
        from rich.table import Table
        from rich.text import Text

        trials, *rest = self._summary_parts(tally)
        text = " · ".join(rest)
        width = self.live.console.width if self.live is not None else 100
        beside = min(BAR_WIDTH, width - len(text) - 1)  # the bar shrinks for the words beside it, to a point
        if beside >= MIN_BAR_WIDTH:
            bar = Table.grid(padding=(0, 1))
            bar.add_row(ProgressBar(total=max(1, self.planned_samples), completed=tally.samples, width=beside),
                        Text(text))
        else:  # a narrow terminal: the words under the bar, wrapped at their own width
            bar = Group(ProgressBar(total=max(1, self.planned_samples), completed=tally.samples,
                                    width=min(BAR_WIDTH, width)), Text(text))
        lines = [Text(trials, style="bold"), bar]
        if self.newest is not None:
            lines.append(Text(f"newest evaluation: {_evaluation(self.newest)}"))
        for name, samples, planned in tally.running[:RUNNING_SHOWN]:
            lines.append(Text(f"  running {name}: {samples:,}/{planned:,} samples", style="dim"))
        if len(tally.running) > RUNNING_SHOWN:
            lines.append(Text(f"  and {len(tally.running) - RUNNING_SHOWN} more running", style="dim"))
        return Group(*lines)

    def _members(self, trial) -> list[str]:
        """The user's trials a Tune trial runs: an array's members, or the trial itself."""
        if trial.trial_id not in self.names:
            self.names[trial.trial_id] = _members(trial)
        return self.names[trial.trial_id]

    def close(self) -> None:
        """Stops drawing the block (it stays on the terminal as last drawn)."""
        if self.live is not None:
            live, self.live = self.live, None
            live.stop()


def _restored(trials, planned: int, kept: int = 0) -> str:
    """What a resume found: trials kept finished, those that continue from a
    checkpoint (they have trained), and those still to start (Tune gives a trial
    that never reported a last result holding its id alone)."""
    finished = kept + sum(len(_members(t)) for t in trials if t.status == "TERMINATED")
    going_on = sum(1 for t in trials if t.status != "TERMINATED"
                   for row in _rows(t, t.last_result or {}).values() if int(row.get("samples") or 0) > 0)
    return (f"resumed: {finished} finished trial(s) kept, {going_on} continue from their newest checkpoint, "
            f"{max(0, planned - finished - going_on)} not started yet")


def _interactive() -> bool:
    """Whether the console is a terminal that can redraw (not a file, a pipe or TERM=dumb)."""
    from rich.console import Console

    return Console(file=sys.stdout).is_interactive


def _members(trial) -> list[str]:
    """The user's trials a Tune trial runs: an array's members, or the trial itself."""
    array = array_of(trial.config or {})
    return member_names(array) if array else [str(trial)]


def _error_file(trial) -> str:
    return f"{getattr(trial, 'path', None) or trial}/error.txt"


def _rows(trial, result: dict) -> dict[str, dict]:
    """Each of the Tune trial's trials' latest row, by name."""
    if array_of(trial.config or {}):
        return dict(result.get("members") or {})
    return {_members(trial)[0]: result} if result else {}


def _told_by(trial) -> Optional[tuple[int, float]]:
    """What a running trial told of its samples and speed (worker.py), None before it
    has: read from Ray's cluster store under its directory's path."""
    from orchestrator.unpromised import told_progress

    storage = getattr(trial, "storage", None)
    return told_progress(storage.trial_fs_path) if storage is not None else None


def _shape(trial) -> tuple[tuple, int, float]:
    """A Tune trial's (class, samples, cost of a sample): an array's first member's."""
    from orchestrator.grid import cost_class, sample_cost
    from workloads.config import TrialConfig

    array = array_of(trial.config or {})
    t = TrialConfig.model_validate(array["members"][0] if array else trial.config["trial"])
    return cost_class(t), t.train.samples, sample_cost(t)


def _minus(planned: list, started: list) -> list:
    """The planned costs not yet started: `planned` less `started`, as multisets."""
    left = Counter(started)
    out = []
    for cost in planned:
        if left[cost]:
            left[cost] -= 1
        else:
            out.append(cost)
    return out


def _planned_samples(trial) -> int:
    array = array_of(trial.config or {})
    trial_config = array["members"][0] if array else (trial.config or {}).get("trial") or {}
    return int((trial_config.get("train") or {}).get("samples") or 0)


def _number(value) -> Optional[float]:
    try:
        value = float(value)
    except (TypeError, ValueError):
        return None
    return None if value != value else value


def _figure(value: Optional[float]) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def _evaluation(e: Evaluation) -> str:
    return f"{e.trial} at {e.samples:,} samples: {_HEADLINE} {_figure(e.value)}"
