"""icr-sweep's Python API: `from icr_sweep import load_run` (see orchestrator.api)."""

from orchestrator.api import load_run

__all__ = ["load_run"]
