"""Strictly typed JSON documents that users hand deepvm (a plan file, a profile): the shared rules.

A document decides what is bought or how it is planned, so nothing in it is coerced or guessed:
- a count is a JSON integer in its range (not "3", true or 2.5, which pydantic's lax mode would turn
  into 3, 1 and an error only sometimes);
- numbers are finite (Python's json reads NaN and Infinity) and within their bounds;
- names are short and made of the characters EC2 uses, other strings printable (a NUL in an instance
  type once poisoned the sandbox's control plane);
- unknown keys are refused, so a typo such as `cout` never falls back to a default.

Every refusal is a DocumentError naming the field by its path, e.g. `plans[0].nodes[1].count`. The
module imports pydantic, so only commands that read such a document load it.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from typing import Annotated, Any, TypeVar

from pydantic import BaseModel, BeforeValidator, ConfigDict, ValidationError
from pydantic_core import PydanticCustomError

M = TypeVar("M", bound=BaseModel)


class DocumentError(ValueError):
    """A document is wrong at `path` (e.g. "plans[0].nodes[1].count"); the text says how."""

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"{path}: {problem}" if path else problem)


class Strict(BaseModel):
    """Base of every document model: unknown keys are errors, instances are immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True)


def show(value: Any) -> str:
    """A value as its JSON text, cut short: error lines stay one line and never carry raw control bytes."""
    try:
        text = json.dumps(value)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def integer_in(low: int, high: int) -> Callable[[Any], int]:
    """A validator of JSON integers from `low` to `high` (booleans and floats refused)."""

    def check(value: Any) -> int:
        if type(value) is not int or not low <= value <= high:
            raise PydanticCustomError(
                "count",
                "must be an integer from {low} to {high}, got {got}",
                {"low": low, "high": high, "got": show(value)},
            )
        return value

    return check


def _number(value: Any) -> float | None:
    """The JSON number `value` as a float when it is finite, else None (booleans are not numbers)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def _amount(value: Any) -> float:
    number = _number(value)
    if number is None or number < 0:
        raise PydanticCustomError("amount", "must be a finite number >= 0, got {got}", {"got": show(value)})
    return number


def _positive(value: Any) -> float:
    number = _number(value)
    if number is None or number <= 0:
        raise PydanticCustomError("positive", "must be a finite number > 0, got {got}", {"got": show(value)})
    return number


def _finite(value: Any) -> float:
    number = _number(value)
    if number is None:
        raise PydanticCustomError("finite", "must be a finite number, got {got}", {"got": show(value)})
    return number


_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")  # instance types, regions and zones as EC2 spells them


def _name(value: Any) -> str:
    if not isinstance(value, str) or not _NAME.match(value):
        raise PydanticCustomError(
            "name", "must be a name of at most 64 letters, digits, '.', '_' or '-', got {got}", {"got": show(value)}
        )
    return value


def text(limit: int) -> BeforeValidator:
    """A validator of printable strings of at most `limit` characters."""

    def check(value: Any) -> str:
        if not isinstance(value, str) or len(value) > limit or not value.isprintable():
            raise PydanticCustomError(
                "text",
                "must be a string of at most {limit} printable characters, got {got}",
                {"limit": limit, "got": show(value)},
            )
        return value

    return BeforeValidator(check)


Amount = Annotated[float, BeforeValidator(_amount)]  # finite, >= 0
Positive = Annotated[float, BeforeValidator(_positive)]  # finite, > 0
Finite = Annotated[float, BeforeValidator(_finite)]
Name = Annotated[str, BeforeValidator(_name)]

# The most nodes one plan may hold. EC2 Fleet and the sandbox get a number a person has seen: the
# planner's largest plans (DeepVM's simulation, --node-limit 255 per type) stay below it, and a count
# of 10^9 is refused here instead of being asked of EC2. Quotas narrow it further (provisioning/planner/plan_check.py).
MAX_NODES = 512
NodeCount = Annotated[int, BeforeValidator(integer_in(1, MAX_NODES))]  # nodes of a plan group, or measured


def validate(model: type[M], data: Any) -> M:
    """`data` as `model`, or a DocumentError for its first problem (and how many more there are)."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        errors = exc.errors(include_url=False)
        first = errors[0]
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        raise DocumentError(_field_path(first["loc"]), _problem(first) + more) from None


def _field_path(loc: tuple[int | str, ...]) -> str:
    """("plans", 0, "nodes", 1, "count") -> "plans[0].nodes[1].count"."""
    path = ""
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    return path


def _problem(err: Any) -> str:
    kind = err["type"]
    if kind == "missing":
        return "required field missing"
    if kind == "extra_forbidden":
        return "unknown field"
    if kind == "enum":
        return f"must be one of {err['ctx']['expected']}, got {show(err['input'])}"
    if kind == "literal_error":
        return f"must be {err['ctx']['expected']}, got {show(err['input'])}"
    if kind in ("list_type", "tuple_type"):
        return f"must be a list, got {show(err['input'])}"
    if kind in ("model_type", "dict_type", "model_attributes_type"):
        return f"must be an object, got {show(err['input'])}"
    if kind == "too_short":
        return f"must hold at least {err['ctx']['min_length']} entries"
    if kind == "too_long":
        return f"must hold at most {err['ctx']['max_length']} entries"
    return str(err["msg"])  # deepvm's own checks above say exactly what they want
