"""A setting that is on, off, or on where it measured faster (auto): the type of the
levers a spec turns (training.cuda_graphs, resources.mps). Its own module, light, so
that the spec's base section reads it without the trainer."""

from typing import Annotated, Literal

from pydantic import BeforeValidator


def yaml_switch(value):
    """YAML 1.1 reads a bare on/off (and yes/no) as a boolean: taken as the word."""
    return {True: "on", False: "off"}.get(value, value) if isinstance(value, bool) else value


Switch = Annotated[Literal["auto", "on", "off"], BeforeValidator(yaml_switch)]


def reads_yaml_booleans(field) -> bool:
    """Whether a pydantic field takes a YAML boolean as the word it stands for (a Switch)."""
    return any(getattr(item, "func", None) is yaml_switch for item in field.metadata)
