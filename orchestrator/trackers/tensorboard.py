"""TensorBoard: event files in each trial's directory, an HParams session per trial
and the HParams experiment in the run directory (TensorBoard's logdir)."""

from __future__ import annotations

import functools
import numbers
from pathlib import Path
from typing import Optional

from orchestrator.secrets import command
from orchestrator.shell import missing
from orchestrator.trackers import Launch, Shown, Tracker, made_on_first_use, register

DIFFERS = bytes([7 << 3, 1])  # HParamInfo.differs = true: field 7, varint 1

# The columns TensorBoard's HParams shows by default (it shows the first five of those
# marked as differing, by name): what tells two trials apart (the swept fields marked
# too would push seed, setup and size out, and two seeds read as identical rows).
HPARAMS_SHOWN = ("setup", "model", "n", "lr", "seed")


def as_hparams(params: dict) -> dict:
    """Parameters as TensorBoard's HParams shows them readably: a whole number as its
    digits (HParams writes every number to five significant digits, so n=16 read
    16.000, seed 0 read 0.0000 and 1,050,688 parameters 1.0507e+6); a
    fraction (a learning rate) stays a number, filtered by its range."""
    return {key: str(value) if isinstance(value, numbers.Integral) and not isinstance(value, bool) else value
            for key, value in params.items()}


def hparams_of(spec) -> tuple[dict, set[str]]:
    """Every parameter a trial of `spec` (a SweepSpec) logs, in the trackers' order
    (the model's label, the ids, the swept fields, the rest), each with a value of
    one trial that has it; and those to show first (HPARAMS_SHOWN)."""
    from orchestrator.grid import shape_trials
    from orchestrator.trackers.common import swept_fields, tracked_params

    swept = swept_fields(spec)
    example = {}
    for trial in shape_trials(spec):
        for key, value in tracked_params(trial.model_dump(mode="json"), swept).items():
            example.setdefault(key, value)
    return as_hparams(example), set(HPARAMS_SHOWN) & set(example)


class EventFile:
    """A TensorBoard event file in `folder` whose every event is written (and, at
    `flush`, on disk) when `add` returns: tensorboardX's EventsWriter. Its
    SummaryWriter queues events for a thread that writes them and flushes every
    `flush_secs`, so a driver killed just after a row lost it from TensorBoard for
    good (seen: a trial's evaluation in its results, missing from its event file)."""

    def __init__(self, folder: str):
        from tensorboardX.event_file_writer import EventsWriter

        self.events = EventsWriter(str(Path(folder) / "events"))

    def add(self, summary, step: int | None = None) -> None:
        import time

        from tensorboardX.proto.event_pb2 import Event

        event = Event(summary=summary, wall_time=time.time())
        if step is not None:
            event.step = int(step)
        self.events.write_event(event)

    def flush(self) -> None:
        self.events.flush()

    def close(self) -> None:
        self.events.close()



@functools.cache
def callback_class() -> type:
    """The TensorBoard callback's class, made on first use (Ray's logger imported then)."""
    from ray.tune.logger import LoggerCallback
    from ray.tune.result import TRAINING_ITERATION

    from orchestrator.trackers.common import (RESOLVED, STEP, TRACKED, logged_once_per_member, resolved,
                                              tracked_metrics, trial_params)

    @logged_once_per_member
    class TensorBoard(LoggerCallback):
        """TensorBoard files in each trial's directory (`EventFile`): the
        figures under their short names at the trial's samples, and, at the trial's
        end, its HParams session (the flat config, the latest of each figure). The
        HParams experiment (which parameters, which metrics) is written once, in the
        run directory: TensorBoard sorts parameters by whether they differ between
        runs, then by name, and shows the first five, so HPARAMS_SHOWN alone are marked
        as differing: they come first and are shown; every other one is listed after
        them (as each trial's own experiment, TensorBoard listed them by name alone,
        and showed model.attn_init before setup)."""

        def __init__(self, swept: tuple[str, ...] = (), hparams: tuple[dict, set[str]] = ({}, set())):
            self.swept, (self.params, self.varying) = swept, hparams
            self.writers, self.latest, self.ran, self.experiment_written = {}, {}, {}, False

        def log_trial_start(self, trial) -> None:
            if trial in self.writers:
                self.writers[trial].close()
            trial.init_local_path()
            self.writers[trial] = EventFile(trial.local_path)
            self.latest.setdefault(trial, {})
            if not self.experiment_written and self.params:
                self.write_experiment(trial.local_experiment_path)

        def write_experiment(self, run_dir: str) -> None:
            """The HParams experiment: every parameter, those the spec sweeps marked as
            differing, and the metrics; in the run directory, TensorBoard's logdir."""
            from tensorboardX.proto.plugin_hparams_pb2 import HParamsPluginData
            from tensorboardX.summary import hparams

            every = {**self.params, **{key: "" for key in RESOLVED}}  # what ran: text, known at the trial's end
            experiment, _, _ = hparams(hparam_dict=every, metric_dict={name: 0.0 for name in TRACKED.values()})
            data = HParamsPluginData()
            value = experiment.value[0]
            data.ParseFromString(value.metadata.plugin_data.content)
            for info in data.experiment.hparam_infos:
                if info.name in self.varying:  # TensorBoard's HParamInfo.differs (field 7, a bool), which
                    info.MergeFromString(DIFFERS)  # tensorboardX's copy of the proto lacks: its wire bytes
            value.metadata.plugin_data.content = data.SerializeToString()
            writer = EventFile(run_dir)
            writer.add(experiment)
            writer.close()
            self.experiment_written = True

        def log_trial_result(self, iteration: int, trial, result: dict) -> None:
            from tensorboardX.summary import scalar

            if trial not in self.writers:
                self.log_trial_start(trial)
            figures = tracked_metrics(result)
            step = int(figures.pop(STEP, result[TRAINING_ITERATION]))
            for name, value in figures.items():
                self.writers[trial].add(scalar(name, value), step)
            self.latest[trial] = {**self.latest[trial], **figures}
            self.ran[trial] = {**self.ran.get(trial, {}), **resolved(result)}
            self.writers[trial].flush()

        def log_trial_end(self, trial, failed: bool = False) -> None:
            from tensorboardX.summary import hparams

            writer, latest, ran = self.writers.pop(trial, None), self.latest.pop(trial, {}), self.ran.pop(trial, {})
            if writer is None:
                return
            if latest:
                params = as_hparams({**trial_params(trial, self.swept), **ran})  # plain: TensorBoard takes no None
                _, session_start, session_end = hparams(hparam_dict=params, metric_dict=latest)
                for summary in (session_start, session_end):  # the experiment is the run directory's
                    writer.add(summary)
            writer.close()

    TensorBoard.__qualname__ = "TensorBoard"  # pickled by name, as the module's attribute
    return TensorBoard


__getattr__ = made_on_first_use(__name__, "TensorBoard", callback_class)


@register
class TensorBoardTracker(Tracker):
    """`tracking.tensorboard: true` (the default): TensorBoard's files in each trial's
    directory, opened with `tensorboard --logdir <run directory>`."""

    name, section, default = "tensorboard", bool, True
    description = "TensorBoard event files in each trial's directory (Ray Tune's)"

    def callbacks(self, config, launch: Launch) -> list:
        return [callback_class()(launch.swept, hparams_of(launch.spec))]

    def opens(self, config, shown: Shown) -> Optional[str]:
        if not next(shown.local.glob("*/events.out.tfevents.*"), None):
            return None
        return f"TensorBoard: `{command('tensorboard', '--logdir', shown.where)}`{missing('tensorboard')}"
