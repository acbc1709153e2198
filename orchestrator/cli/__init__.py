"""The `icr-sweep` command line, a module per concern: what the registries hold
(catalog.py), one trial without Ray (train.py), a spec checked and planned
(plan.py), a sweep launched and resumed on Ray Tune (sweep.py), a run read back
(results.py); flags.py turns flags into configs, common.py holds what every
command shares. Ray is imported only by the sweep commands that need it."""

# Each module registers its commands, in this order in --help.
from orchestrator.cli import catalog, train, plan, sweep, results  # noqa: I001
from orchestrator.cli.common import app

__all__ = ["app", "catalog", "plan", "results", "sweep", "train"]
