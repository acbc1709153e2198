"""A YAML spec file into a SweepSpec, and every problem found as one line naming
the file, the field path, the bad value and what is allowed."""

import re
from pathlib import Path

import yaml
from pydantic import ValidationError

from orchestrator.spec.section import section_of
from orchestrator.spec.sections import AxesSpec
from orchestrator.spec.sweep import SweepSpec
from workloads.tasks import tasks_having

MAX_SPEC_BYTES = 1_000_000


class SpecError(ValueError):
    """A spec that cannot be used; the message names the file, field path and problem."""


def _path(loc) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else f".{part}" if out else str(part)
    return out or "(top level)"


def _allowed_keys(loc, model=None) -> list[str]:
    """The field names of the spec model (`model`, a sweep's by default) at `loc` (for
    unknown-key errors)."""
    model = model or SweepSpec
    for part in loc[:-1]:
        if isinstance(part, int):
            continue  # an item of a list of sections: the section's model
        field = model.model_fields.get(part) if isinstance(part, str) else None
        section = section_of(field.annotation) if field is not None else None  # a section, or a list of them
        if section is None:
            return []
        model = section
    return list(model.model_fields)


SCALARS = {"int": "an integer", "float": "a number", "str": "a string", "bool": "true or false"}


def _scalar_unions(errors: list[dict]) -> list[dict]:
    """Pydantic says of a value that fits none of a union of scalars (a task
    parameter: int, float or str) one error per branch, each at loc + [branch]: one
    error instead, naming the value and every kind the field takes."""
    out, merged = [], {}
    for err in errors:
        loc = tuple(err["loc"])
        if loc and loc[-1] in SCALARS and err["type"] != "missing":
            key = (loc[:-1], repr(err.get("input")))
            if key not in merged:
                merged[key] = dict(err, loc=loc[:-1], type="scalar_union", kinds=[])
                out.append(merged[key])
            merged[key]["kinds"].append(SCALARS[loc[-1]])
            continue
        out.append(err)
    return out


def format_errors(error: ValidationError, source: str, model=None) -> str:
    lines = []
    for err in _scalar_unions(error.errors()):
        loc = [p for p in err["loc"] if not (isinstance(p, str) and "[" in p)]  # drop union branch tags
        msg = err["msg"]
        if err["type"] == "extra_forbidden":
            allowed = _allowed_keys(loc, model)
            msg = "unknown key" + (f"; allowed keys: {', '.join(allowed)}" if allowed else "") + _task_field_hint(loc)
        elif err["type"] == "value_error":
            msg = msg.removeprefix("Value error, ")  # our own messages name the bad value
            field, sep, rest = msg.partition(": ")
            if sep and loc == ["axes"] and field in AxesSpec.model_fields:  # a check of axes against the task
                loc, msg = ["axes", field], rest
        elif err["type"] == "scalar_union":
            msg = f"one value, {' or '.join(err['kinds'])}, got {err['input']!r}"
            if loc[:1] == ["task_params"] and isinstance(err["input"], list) and len(loc) == 2:
                msg += f"; to sweep it, give it as axes.task.{loc[1]}: {err['input']!r}"
        elif err["type"] == "model_type":  # a section given as something else ("lr: 1e-3")
            keys = _allowed_keys(loc + ["?"], model)
            msg = (f"a mapping{' of ' + ', '.join(keys) if keys else ''}, got {err['input']!r}"
                   + _yaml_number_hint(err["input"]))
        elif "input" in err and err["type"] != "missing":
            msg += f" (got {err['input']!r})" + _yaml_number_hint(err["input"])
        if not loc:  # a check across fields: its message names the field it is about
            match = re.match(r"^((?:axes|training|resources|search|lr)\.\w+ with \w+|(?:axes|training|resources|search|lr)\.\w+): (.*)$", msg, re.S)
            if match:
                lines.append(f"{source}: {match.group(1)}: {match.group(2)}")
                continue
        lines.append(f"{source}: {_path(loc)}: {msg}")
    from orchestrator.secrets import redact  # a bad value may be a URL with its password

    return redact("\n".join(dict.fromkeys(lines)))


def _task_field_hint(loc) -> str:
    """Where an unknown axes key is a task's config field (IsTree's graph family,
    which earlier versions took as axes.family): where it goes instead."""
    if len(loc) != 2 or loc[0] != "axes":
        return ""
    field = loc[1]
    having = tasks_having(field)
    if not having:
        return ""
    return (f"; {field} is a task field ({', '.join(having)}): give it as task_params.{field} for every trial, or "
            f"sweep it as axes.task.{field}: [...]")


def _yaml_number_hint(value) -> str:
    """YAML 1.1 reads 1e-3 and 1.0e6 as text (its floats want a point and a signed
    exponent: 1.0e-3, 1.0e+6): say so, with the form it reads, where a text is a number."""
    if not isinstance(value, str):
        return ""
    try:
        float(value)
    except ValueError:
        return ""
    match = re.fullmatch(r"\s*([-+]?)(\d*)(?:\.(\d*))?[eE]([-+]?)(\d+)\s*", value)
    if not match:
        return ""
    sign, whole, fraction, exp_sign, exponent = match.groups()
    fixed = f"{sign}{whole or '0'}.{fraction or '0'}e{exp_sign or '+'}{exponent}"
    return f"; YAML reads {value} as text (its numbers need a point and a signed exponent): write {fixed}"


class _SpecLoader(yaml.SafeLoader):
    """YAML for specs: no aliases (an alias bomb expands exponentially once
    validated), and a repeated key is an error instead of a silent overwrite."""

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise yaml.constructor.ConstructorError(
                None, None, f"aliases (*{event.anchor}) are not allowed in a spec; write the value out", event.start_mark
            )
        return super().compose_node(parent, index)

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            if key in seen:
                raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep)


def load_spec(path: Path | str):
    """Reads and validates a YAML spec: a sweep's (SweepSpec), or with `kind: evaluation`
    an evaluation's (EvaluationSpec); raises SpecError with every problem found."""
    path = Path(path)
    if path.is_dir():
        raise SpecError(f"{path} is a directory, not a spec file: name a YAML spec such as sweeps/istree_grid.yaml")
    if not path.is_file():
        raise SpecError(f"{path}: no such spec file")
    size = path.stat().st_size
    if size > MAX_SPEC_BYTES:
        raise SpecError(f"{path}: {size:,} bytes is not a spec (specs are a few hundred bytes; the limit is {MAX_SPEC_BYTES:,})")
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as e:
        raise SpecError(f"{path}: not UTF-8 text (byte {e.start}); a spec is a YAML file") from None
    if "\x00" in text:
        raise SpecError(f"{path}: a binary file (it holds NUL bytes); a spec is a YAML file")
    try:
        data = yaml.load(text, Loader=_SpecLoader)
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark
        raise SpecError(f"{path}:{mark.line + 1}:{mark.column + 1}: not valid YAML: {e.problem}") from None
    except yaml.YAMLError as e:
        raise SpecError(f"{path}: not valid YAML: {e}") from None
    except RecursionError:  # PyYAML parses nested lists by recursion
        raise SpecError(_too_deep(path)) from None
    if not isinstance(data, dict):
        raise SpecError(f"{path}: the spec must be a mapping of keys (name, axes, ...), got {type(data).__name__}")
    model = SweepSpec
    if "kind" in data:
        from orchestrator.spec.evaluation import EvaluationSpec

        if data["kind"] != "evaluation":
            raise SpecError(f"{path}: kind: {data['kind']!r} is not a kind of spec; the one kind is evaluation "
                            "(pretrained models asked a task's questions); a sweep that trains has no kind")
        model = EvaluationSpec
    try:
        return model.model_validate(data)
    except ValidationError as e:
        raise SpecError(format_errors(e, str(path), model)) from None
    except RecursionError:
        raise SpecError(_too_deep(path)) from None


def _too_deep(path: Path) -> str:
    return (f"{path}: lists or mappings nested hundreds deep; a spec nests a few levels (axes.model.<arch>.<field>: "
            "[values]): look for brackets that never close or repeat")
