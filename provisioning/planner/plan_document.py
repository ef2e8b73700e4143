"""A plan file as a strictly typed document: what `deepvm up --plan` (and the saved plan) may contain.

A plan decides what is bought, so nothing in it is coerced or guessed:
- a count is a JSON integer from 1 to MAX_NODES (not "3", true or 2.5, which pydantic's lax mode would
  turn into 3, 1 and an error only sometimes);
- numbers are finite and not negative (Python's json reads NaN and Infinity);
- names are short and made of the characters EC2 uses, other strings printable (a NUL in an instance
  type once poisoned the sandbox's control plane);
- unknown keys are refused, so a typo such as `cout` never falls back to a default.

Every refusal is a PlanDocumentError naming the field by its path, e.g. `plans[0].nodes[1].count`. This
module checks the document's shape; provisioning/planner/plan_check.py checks its content against a
catalog (types, prices, quotas, roles). The module imports pydantic, so it is loaded only when a plan is
read back (`Plan.from_dict`), never by `deepvm plan`.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, JsonValue, ValidationError
from pydantic_core import PydanticCustomError

from provisioning.catalog import Market
from provisioning.planner.plan import Architecture, NodeGroup, Objective, Plan, Role

# The most nodes one plan may hold. EC2 Fleet and the sandbox get a number a person has seen: the
# planner's largest plans (DeepVM's simulation, --node-limit 255 per type) stay below it, and a count
# of 10^9 is refused here instead of being asked of EC2. Quotas narrow it further (plan_check.py).
MAX_NODES = 512
MAX_GROUPS = 64  # node groups in one plan (the planner makes at most one per type, market and role)
MAX_PLANS = 32  # ranked plans in one file (`deepvm plan --top` shows 3 by default)


class PlanDocumentError(ValueError):
    """A plan document is wrong at `path` (e.g. "plans[0].nodes[1].count"); the text says how."""

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"{path}: {problem}" if path else problem)


def _show(value: Any) -> str:
    """A value as its JSON text, cut short: error lines stay one line and never carry raw control bytes."""
    try:
        text = json.dumps(value)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _count(value: Any) -> int:
    if type(value) is not int or not 1 <= value <= MAX_NODES:
        raise PydanticCustomError(
            "count", "must be an integer from 1 to {limit}, got {got}", {"limit": MAX_NODES, "got": _show(value)}
        )
    return value


def _amount(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise PydanticCustomError("amount", "must be a finite number >= 0, got {got}", {"got": _show(value)})
    return float(value)


_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")  # instance types, regions and zones as EC2 spells them


def _name(value: Any) -> str:
    if not isinstance(value, str) or not _NAME.match(value):
        raise PydanticCustomError(
            "name", "must be a name of at most 64 letters, digits, '.', '_' or '-', got {got}", {"got": _show(value)}
        )
    return value


def _text(limit: int) -> Any:
    def check(value: Any) -> str:
        if not isinstance(value, str) or len(value) > limit or not value.isprintable():
            raise PydanticCustomError(
                "text", "must be a string of at most {limit} printable characters, got {got}",
                {"limit": limit, "got": _show(value)},
            )
        return value

    return BeforeValidator(check)


Count = Annotated[int, BeforeValidator(_count)]
Amount = Annotated[float, BeforeValidator(_amount)]
Name = Annotated[str, BeforeValidator(_name)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class NodeGroupDocument(_Strict):
    """`NodeGroup.to_dict()`."""

    instance_type: Name
    market: Market
    count: Count
    role: Role
    usd_per_hour: Amount


class PlanDocument(_Strict):
    """`Plan.to_dict()`."""

    architecture: Architecture
    price_per_hour: Amount
    objective_value: Amount
    effective_flops: Amount
    region: Name
    availability_zone: Name
    nodes: Annotated[list[NodeGroupDocument], Field(min_length=1, max_length=MAX_GROUPS)]
    objective: Objective = Objective.DEEPVM
    catalog_source: Annotated[str, _text(4096)] = ""  # "snapshot", "aws" or a catalog file's path
    prices_as_of: Annotated[str, _text(64)] = ""
    notes: Annotated[list[Annotated[str, _text(500)]], Field(max_length=32)] = []

    def to_plan(self) -> Plan:
        return Plan(
            architecture=self.architecture,
            region=self.region,
            availability_zone=self.availability_zone,
            nodes=tuple(
                NodeGroup(g.instance_type, g.market, g.count, g.role, g.usd_per_hour) for g in self.nodes
            ),
            price_per_hour=self.price_per_hour,
            effective_flops=self.effective_flops,
            objective_value=self.objective_value,
            objective=self.objective,
            catalog_source=self.catalog_source,
            prices_as_of=self.prices_as_of,
            notes=tuple(self.notes),
        )


class RankedPlansDocument(_Strict):
    """The saved plan and `deepvm plan --json`: ranked plans, best first, and what they were made from.

    Only `plans` is acted on; the other keys `deepvm plan` writes are informational and kept opaque.
    """

    plans: Annotated[list[PlanDocument], Field(min_length=1, max_length=MAX_PLANS)]
    request: JsonValue = None
    max_price: JsonValue = None
    objective: JsonValue = None
    baselines: JsonValue = None
    best_per_architecture: JsonValue = None
    catalog: JsonValue = None
    saved_to: JsonValue = None
    solve_seconds: JsonValue = None
    interruptions: JsonValue = None  # plan --interruptions: what was counted, and the plan without it


@dataclass(frozen=True)
class PlanEntry:
    """One plan of a document and where it is in it ("plans[2]", or "" for a file holding one plan)."""

    where: str
    plan: Plan


def read_plan_document(data: Any) -> tuple[PlanEntry, ...]:
    """The plans of a plan file: one plan (`Plan.to_dict()`) or ranked plans (`{"plans": [...], ...}`)."""
    if not isinstance(data, dict):
        raise PlanDocumentError("", f"expected a JSON object (one plan, or {{\"plans\": [...]}}), got {_show(data)}")
    if "plans" in data:
        ranked = _validate(RankedPlansDocument, data)
        return tuple(PlanEntry(f"plans[{i}]", p.to_plan()) for i, p in enumerate(ranked.plans))
    return (PlanEntry("", _validate(PlanDocument, data).to_plan()),)


def plan_from_dict(data: Any) -> Plan:
    """One plan (`Plan.to_dict()`), validated."""
    return _validate(PlanDocument, data).to_plan()


def _validate(model: type[_Strict], data: Any) -> Any:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        errors = exc.errors(include_url=False)
        first = errors[0]
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        raise PlanDocumentError(_field_path(first["loc"]), _problem(first) + more) from None


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
        return f"must be one of {err['ctx']['expected']}, got {_show(err['input'])}"
    if kind in ("list_type", "tuple_type"):
        return f"must be a list, got {_show(err['input'])}"
    if kind in ("model_type", "dict_type", "model_attributes_type"):
        return f"must be an object, got {_show(err['input'])}"
    if kind == "too_short":
        return f"must hold at least {err['ctx']['min_length']} entries"
    if kind == "too_long":
        return f"must hold at most {err['ctx']['max_length']} entries"
    return str(err["msg"])  # deepvm's own checks above say exactly what they want
