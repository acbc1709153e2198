"""The sweep spec: a tree of small frozen pydantic models, one per concern, and
how a YAML file or a run directory becomes one. One job per module: the
sections (sections.py), the sweep that holds and cross-checks them (sweep.py),
reading a YAML file with its error messages (loading.py), and reading the spec a
run directory stored (stored.py).

Unknown keys are errors (extra="forbid"), so a misspelt YAML key names its path
instead of being silently ignored. The grid a spec sweeps (its variants, cells
and trials) is orchestrator/grid.py; how its trials share a GPU,
orchestrator/packing.py.
"""

from orchestrator.spec.loading import MAX_SPEC_BYTES, SpecError, format_errors, load_spec
from orchestrator.spec.sections import (CHOOSABLE, STORAGE_SCHEMES, AxesSpec, Distribution, LearningRateSpec,
                                        ResourcesSpec, SearchSpec, TrainingOverride, TrainingSpec, scheme_typo)
from orchestrator.spec.stored import plan_of_record, run_spec, stored_spec
from orchestrator.spec.sweep import PLAUSIBLE_TRIALS, SweepSpec

# The `tracking:` section is made from the registered trackers (orchestrator/trackers/):
# sections.TrackingSpec, read there, as a tracker registered later remakes it.
__all__ = ["AxesSpec", "CHOOSABLE", "Distribution", "LearningRateSpec", "MAX_SPEC_BYTES", "PLAUSIBLE_TRIALS",
           "ResourcesSpec", "STORAGE_SCHEMES", "SearchSpec", "SpecError", "SweepSpec", "TrainingOverride",
           "TrainingSpec", "format_errors", "load_spec", "plan_of_record", "run_spec", "scheme_typo", "stored_spec"]
