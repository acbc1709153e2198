"""icr-sweep's Python API: `from icr_sweep import load_run, best` (see orchestrator.api)."""

from orchestrator.api import best, load_run

__all__ = ["best", "load_run"]
