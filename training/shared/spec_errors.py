"""How a pydantic error of a job file reads: the line it belongs to, the dotted name of its field, and a short
text of the problem, with a suggestion for a misspelt field (training.shared.jobspec's load_job_spec). Apart from
the schema, so the schema's module says what a job is and this one how its mistakes are told."""

from __future__ import annotations

import difflib
import re
from typing import Any, get_args

from pydantic import BaseModel

from training.shared.yamlmarks import YamlDocument, locate


def place(doc: YamlDocument, err: Any) -> tuple[int, str]:
    """The line and dotted field name an error belongs to.

    A missing field has no line of its own: it gets its parent's. A bad union tag belongs to the tag.
    """
    loc = tuple(err["loc"])
    if err["type"] == "union_tag_invalid":
        loc += (err["ctx"]["discriminator"].strip("'"),)
    where = locate(doc, loc)
    names = where.names + ((loc[-1],) if err["type"] == "missing" else ())
    return where.line, dotted(names)


def dotted(names: tuple[str | int, ...]) -> str:
    return ".".join(_shown(n) for n in names) or "(top level)"


def _shown(name: str | int) -> str:
    """A key as the message shows it: quoted unless plain, so a key holding a newline or an invisible
    character cannot break or disguise the line."""
    text = str(name)
    return text if re.fullmatch(r"[A-Za-z0-9_.-]+", text) else repr(text)


_EXPECTED = {
    "int_parsing": "an integer",
    "int_type": "an integer",
    "int_from_float": "an integer",
    "float_parsing": "a number",
    "float_type": "a number",
    "bool_parsing": "true or false",
    "bool_type": "true or false",
    "string_type": "a string",
    "list_type": "a list",
    "tuple_type": "a list",
    "dict_type": "a mapping",
    "model_type": "a mapping",
    "model_attributes_type": "a mapping",
}
_BOUNDS = {
    "greater_than": "greater than",
    "greater_than_equal": "at least",
    "less_than": "less than",
    "less_than_equal": "at most",
}


def describe(err: Any, root: type[BaseModel]) -> str:
    """A short lower-case problem text for one pydantic error of a `root` model."""
    kind = err["type"]
    if kind == "extra_forbidden":
        return "unknown field" + _did_you_mean(tuple(err["loc"]), root)
    if kind == "missing":
        return "required field missing"
    if kind == "finite_number":
        return f"must be a finite number, got {err['input']!r}"
    if kind in _EXPECTED:
        return f"expected {_EXPECTED[kind]}, got {err['input']!r}"
    if kind in _BOUNDS:
        limit = next(iter(err["ctx"].values()))  # the one bound that failed: gt, ge, lt or le
        shown = int(limit) if isinstance(limit, float) and limit.is_integer() else limit
        return f"must be {_BOUNDS[kind]} {shown}, got {err['input']!r}"
    if kind == "literal_error":
        return f"expected {err['ctx']['expected']}, got {err['input']!r}"
    if kind == "union_tag_invalid":
        return f"unknown kind {err['ctx']['tag']!r}, expected {err['ctx']['expected_tags']}"
    if kind == "union_tag_not_found":
        return "missing `kind` (synthetic or cifar10)"
    if kind == "value_error":
        return str(err["ctx"]["error"])
    msg: str = err["msg"]
    return msg[0].lower() + msg[1:]


def _did_you_mean(loc: tuple[str | int, ...], root: type[BaseModel]) -> str:
    """'; did you mean steps?' for an unknown field `step`: the closest field of the model it was found in."""
    close = difflib.get_close_matches(str(loc[-1]), _fields_at(loc[:-1], root), n=1, cutoff=0.6)
    return f"; did you mean {close[0]}?" if close else ""


def _fields_at(loc: tuple[str | int, ...], root: type[BaseModel]) -> list[str]:
    """The field names of the model(s) at an error location. pydantic puts a union member's tag in the
    location (`dataset.synthetic.colour`), which picks that member."""
    models: list[type[BaseModel]] = [root]
    for part in loc:
        inner = [
            m
            for model in models
            if part in model.model_fields
            for m in _models_in(model.model_fields[str(part)].annotation)
        ]
        models = inner or [m for m in models if _has_tag(m, part)] or models
    return sorted({name for model in models for name in model.model_fields})


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    """The models a field's annotation holds, through Optional, unions and Annotated."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [model for arg in get_args(annotation) for model in _models_in(arg)]


def _has_tag(model: type[BaseModel], tag: str | int) -> bool:
    return any(tag in get_args(f.annotation) for f in model.model_fields.values())
