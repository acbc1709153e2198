"""The spec a run directory stored, read by today's schema: what `status`,
`resume` and `report` start from."""

from pathlib import Path
from typing import Optional

from pydantic import ValidationError

from orchestrator.grid import plan
from orchestrator.spec.loading import SpecError, format_errors
from orchestrator.spec.sections import AxesSpec
from orchestrator.spec.sweep import SweepSpec
from workloads.tasks import DEFAULT_TASK, TASKS, tasks_having


def run_spec(run_dir: Path | str) -> Optional["SweepSpec"]:
    """The spec a run directory (local or remote) was launched with, or None where
    it holds none; SpecError naming the file when it is damaged."""
    from orchestrator.rundir import RecordError, spec_location, spec_record  # pandas: not for `validate`

    try:
        stored = spec_record(run_dir)
    except RecordError as e:
        raise SpecError(str(e)) from None
    if stored is None:
        return None
    try:
        return stored_spec(stored)
    except SpecError as e:
        raise SpecError(f"{spec_location(run_dir)} is damaged ({e})") from None


def stored_spec(data: dict) -> "SweepSpec":
    """A spec as a run directory stored it, validated by today's schema; SpecError
    with the first problem where it no longer validates."""
    if data.get("kind") == "evaluation":
        from orchestrator.spec.evaluation import EvaluationSpec

        model, data = EvaluationSpec, data
    else:
        model, data = SweepSpec, _stored_before_family_was_the_tasks(data)
    try:
        return model.model_validate(data)
    except ValidationError as e:  # the first problem, with its field path (an unknown key names itself)
        raise SpecError(format_errors(e, "the spec").splitlines()[0].removeprefix("the spec: ")) from None
    except (ValueError, KeyError, TypeError) as e:
        problem = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise SpecError(f"{type(e).__name__}: {problem}") from None


def plan_of_record(stored: dict) -> Optional[dict]:
    """The plan of a run launched before plans were stored (orchestrator.rundir's
    plan.json), from its stored spec; None where today's schema cannot read it."""
    try:
        spec = stored_spec(stored)
    except SpecError:
        return None
    return plan(spec) if isinstance(spec, SweepSpec) else None


def _stored_before_family_was_the_tasks(data: dict) -> dict:
    """A stored spec as it loads today. Earlier versions let axes hold one value of
    a task field for every trial (IsTree's graph family, `axes: {family: binary}`)
    and wrote it for tasks without that field too: an axes key that is no axis but
    a field of a registered task is task_params' now where the spec's task has the
    field (unless task_params gives it), and set nothing where it has not. Any
    other unknown key is damage, and stays to be named."""
    if not isinstance(data, dict):
        return data  # the schema names what it is
    axes, task, params = data.get("axes"), TASKS.get(data.get("task", DEFAULT_TASK)), data.get("task_params") or {}
    if not (isinstance(axes, dict) and task and isinstance(params, dict)):
        return data
    moved = {k: v for k, v in axes.items() if k not in AxesSpec.model_fields and tasks_having(k)
             and (v is None or isinstance(v, str))}
    if not moved:
        return data
    kept = {k: v for k, v in moved.items() if v is not None and task[0].has(k) and k not in params}
    return {**data, "axes": {k: v for k, v in axes.items() if k not in moved}, "task_params": {**params, **kept}}
