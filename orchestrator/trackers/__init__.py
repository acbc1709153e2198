"""Experiment trackers as plug-ins. A tracker is one module that registers a
`Tracker`: its name (the spec's key under `tracking:`), its section (the spec's
value there: a pydantic model, or an on/off switch), the package it needs, its
check before Ray starts, its Ray Tune logger callbacks, the folders it writes in a
run directory, and the line that opens a run in it (the console's last lines and
report.md's first). TensorBoard, MLflow and W&B are registered here; another is
registered by importing its module, or by a package's entry point in the group
`icr_sweep.trackers`, which `load` imports before any spec is read.

Importing this package imports no Ray and no tracker's own package: a tracker's
callbacks are made where a sweep starts.
"""

from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, ClassVar, Optional

from orchestrator.shell import install, install_extra

BUILT_IN = ("tensorboard", "mlflow", "wandb")  # their modules beside this one, in the order the report lists them
ENTRY_POINTS = "icr_sweep.trackers"


class TrackerError(ValueError):
    """A tracker of the spec cannot be used; the message names the field and the fix."""


@dataclass(frozen=True)
class Launch:
    """What a tracker is given where a sweep starts: the spec (a SweepSpec) and its
    run directory as the user names it (a path or a URI)."""

    spec: Any
    run_dir: str

    @property
    def swept(self) -> tuple[str, ...]:
        """The task's and model's fields the spec's axes sweep (the trackers' first parameters)."""
        from orchestrator.trackers.common import swept_fields

        return swept_fields(self.spec)


@dataclass(frozen=True)
class Shown:
    """What a tracker is given to say how a run opens in it: the run's stored spec
    (a dict), its run directory as the user names it, and a local folder holding the
    run's files."""

    spec: dict
    where: str
    local: Path


class Tracker:
    """A tracker plug-in (one module; `register` it). `section`: the type of the
    spec's `tracking.<name>` (a pydantic model, every field checked and named in
    errors; or `bool`, an on/off switch); `default`: its value where the spec leaves
    it out (None: off). `package`: what must be importable to log (named, with how to
    install it, before Ray starts). `writes`: for each folder it makes at the top of
    a run directory, the names it writes in it (a launch that stops before its first
    trial removes those alone)."""

    name: ClassVar[str]
    section: ClassVar[Any] = bool
    default: ClassVar[Any] = None
    description: ClassVar[str] = ""  # the spec field's, in `icr-sweep schema`
    package: ClassVar[Optional[str]] = None
    writes: ClassVar[dict[str, tuple[str, ...]]] = {}

    def check(self, config, launch: Launch) -> None:
        """Raises TrackerError, naming `tracking.<name>`'s field and the fix, where the
        sweep could not log to the tracker: before Ray starts, so nothing is launched."""

    def callbacks(self, config, launch: Launch) -> list:
        """Ray Tune logger callbacks that log each trial (an array's members each a trial:
        trackers.common.logged_once_per_member)."""
        raise NotImplementedError

    def folders(self, config, launch: Launch) -> tuple[str, ...]:
        """The folders of `writes` this launch makes in its run directory."""
        return ()

    def opens(self, config, shown: Shown) -> Optional[str]:
        """The line that opens the run in this tracker ("Name: `command`"), or None
        where the run has nothing of it; `config` is the stored spec's section."""
        return None


TRACKERS: dict[str, Tracker] = {}


def register(cls: type[Tracker]) -> type[Tracker]:
    """Adds a tracker (a class decorator). Its section joins the spec's `tracking:`."""
    if not getattr(cls, "name", "").isidentifier():
        raise ValueError(f"{cls.__name__}: a tracker's name must be a spec key (a Python identifier), not "
                         f"{getattr(cls, 'name', None)!r}")
    TRACKERS[cls.name] = cls()
    _changed()
    return cls


def unregister(name: str) -> None:
    """Removes a tracker (tests); the spec's `tracking:` no longer takes it."""
    TRACKERS.pop(name, None)
    _changed()


def _changed() -> None:
    import sys

    sections = sys.modules.get("orchestrator.spec.sections")
    if sections is not None and hasattr(sections, "rebuild_tracking"):
        sections.rebuild_tracking()


_loaded = False


def load() -> dict[str, Tracker]:
    """Every tracker: the built-in ones, then those of installed packages' entry points."""
    global _loaded
    if not _loaded:
        _loaded = True
        for name in BUILT_IN:
            importlib.import_module(f"orchestrator.trackers.{name}")
        from importlib.metadata import entry_points

        for point in entry_points(group=ENTRY_POINTS):
            point.load()
    return ordered()


def ordered() -> dict[str, Tracker]:
    """The registered trackers, the built-in ones first in BUILT_IN's order (as the
    report lists them), then the others as they were registered."""
    first = {name: TRACKERS[name] for name in BUILT_IN if name in TRACKERS}
    return {**first, **{name: t for name, t in TRACKERS.items() if name not in first}}


def on(tracking) -> list[tuple[Tracker, Any]]:
    """The trackers the spec's `tracking` section turns on, each with its section."""
    return [(t, value) for t in load().values() if (value := getattr(tracking, t.name, None))]


def check_trackers(spec, run_dir: str) -> None:
    """Raises TrackerError for the first tracker the spec turns on that cannot take
    the sweep in `run_dir`: its package missing, else its own check."""
    launch = Launch(spec, run_dir)
    for tracker, config in on(spec.tracking):
        if tracker.package and importlib.util.find_spec(tracker.package) is None:
            raise TrackerError(f"tracking.{tracker.name}: the {tracker.package} package is not installed here; "
                               f"{install_extra('track')} (or {install(tracker.package)})")
        tracker.check(config, launch)


def callbacks(spec, run_dir: str) -> list:
    """Ray Tune's logger callbacks of a sweep: the trial's own files (progress.csv),
    each tracker the spec turns on, and the trial's params.json and result.json last:
    a row stored was logged by every tracker before it, which a killed driver's
    resumed trial relies on (trackers.common.RowsOnce)."""
    import os

    from orchestrator.trial_files import ArrayCSV, MemberCSV, TrialFilesCallback

    # Tune adds its own JSON, CSV and TensorBoard loggers unless told not to.
    os.environ["TUNE_DISABLE_AUTO_CALLBACK_LOGGERS"] = "1"
    launch = Launch(spec, run_dir)
    out = [MemberCSV(), ArrayCSV()]
    for tracker, config in on(spec.tracking):
        out += tracker.callbacks(config, launch)
    return out + [TrialFilesCallback()]


def folders(spec, run_dir: str) -> tuple[str, ...]:
    """The folders the spec's trackers make at the top of `run_dir`."""
    launch = Launch(spec, run_dir)
    return tuple(f for tracker, config in on(spec.tracking) for f in tracker.folders(config, launch))


def writes() -> dict[str, tuple[str, ...]]:
    """Each tracker folder's name, and what its tracker writes in it."""
    return {folder: names for t in load().values() for folder, names in t.writes.items()}


def opens(spec: dict, where: str, local: Path) -> list[str]:
    """Each line that opens the run in a tracker its stored spec turned on (a stored
    spec lacking a tracker's key reads its default)."""
    tracking = spec.get("tracking") or {}
    shown = Shown(spec, where, Path(local))
    out = []
    for tracker in load().values():
        config = tracking.get(tracker.name, tracker.default)
        if config is not None and config is not False:
            line = tracker.opens(config, shown)
            if line:
                out.append(line)
    return out


def made_on_first_use(module: str, name: str, make: Callable[[], type]) -> Callable[[str], type]:
    """A tracker module's `__getattr__` (PEP 562) that gives its callback class `name`
    as `make()` makes it, on first use: Ray (and the tracker's package) are imported
    where a sweep starts, and pickle, which finds a class by its module and name,
    finds it there."""

    def __getattr__(attr: str) -> type:
        if attr == name:
            return make()
        raise AttributeError(f"module {module!r} has no attribute {attr!r}")

    return __getattr__


# Runs launched before the trackers were a package pickled their callbacks (Tune's
# tuner.pkl) under this module's names: a resume finds each where it lives now.
_MOVED = {"TensorBoard": "orchestrator.trackers.tensorboard", "MLflow": "orchestrator.trackers.mlflow",
          "Wandb": "orchestrator.trackers.wandb", "TrialFilesCallback": "orchestrator.trial_files",
          "MemberCSV": "orchestrator.trial_files", "ArrayCSV": "orchestrator.trial_files"}


def __getattr__(name: str):
    if name in _MOVED:
        return getattr(importlib.import_module(_MOVED[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
