"""icr-sweep's Python API: `from icr_sweep import load_run, best, findings` (see
orchestrator.api); `Findings.from_json` reads a run's findings.json back."""

from orchestrator.api import best, findings, load_run
from workloads.tasks.verdicts import Findings

__all__ = ["best", "findings", "load_run", "Findings"]
