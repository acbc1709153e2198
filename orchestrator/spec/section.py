"""The base of every spec section: a small frozen pydantic model that forbids unknown
keys and takes no YAML boolean where a number is meant. Its own module, so that a
tracker's module (orchestrator/trackers/) declares its section without the rest of
the spec."""

import json
import typing

from pydantic import BaseModel, ConfigDict, field_validator

from workloads.switch import reads_yaml_booleans


def _admits_bool(annotation) -> bool:
    return annotation is bool or any(_admits_bool(a) for a in typing.get_args(annotation))


def section_of(annotation):
    """The spec section (a model class) an optional field holds, else None."""
    for a in (annotation, *typing.get_args(annotation)):
        if isinstance(a, type) and issubclass(a, BaseModel):
            return a
    return None


def _holds_bool(value) -> bool:
    if isinstance(value, bool):
        return True
    if isinstance(value, dict):
        return any(_holds_bool(v) for v in value.values())
    return isinstance(value, (list, tuple)) and any(_holds_bool(v) for v in value)


class Section(BaseModel):
    # No inf or nan in any number; and no YAML true/false where a number is meant
    # (pydantic would read true as 1: `samples: true` trained one sample).
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    @field_validator("*", mode="before")
    @classmethod
    def _no_bools_for_numbers(cls, value, info):
        field = cls.model_fields.get(info.field_name)
        if field is None or (isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel)):
            return value  # a section: its own fields check theirs
        if reads_yaml_booleans(field):
            return value  # on/off, which YAML reads as booleans
        if _holds_bool(value) and not _admits_bool(field.annotation):
            if isinstance(value, bool) and section_of(field.annotation):
                raise ValueError(f"a section of {section_of(field.annotation).__name__.removesuffix('Spec')}'s fields is "
                                 f"expected (`icr-sweep schema` lists them), not the YAML boolean {str(value).lower()}")
            if isinstance(value, bool):
                raise ValueError(f"a number is expected, not the YAML boolean {str(value).lower()}")
            raise ValueError(f"numbers are expected, not YAML booleans: {json.dumps(value)}")
        return value
