"""A plan file as a strictly typed document: what `deepvm up --plan` (and the saved plan) may contain.

A plan decides what is bought, so it follows provisioning/core/strictdoc.py's rules: counts are JSON
integers from 1 to MAX_NODES (core/strictdoc.py), numbers finite and not negative, names shaped as EC2's, strings
printable, unknown keys refused. Every refusal is a PlanDocumentError naming the field by its path,
e.g. `plans[0].nodes[1].count`. This module checks the document's shape;
provisioning/planner/plan_check.py checks its content against a catalog (types, prices, quotas,
roles). The module imports pydantic, so it is loaded only when a plan is read back (`plan_from_dict`),
never by `deepvm plan`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Annotated, Any

from pydantic import BeforeValidator, Field, JsonValue

from provisioning.catalog.model import Market
from provisioning.core.strictdoc import (
    Amount,
    DocumentError,
    Name,
    NodeCount,
    Strict,
    integer_in,
    show,
    text,
    validate,
)
from provisioning.planner.plan import MAX_PLANS, Architecture, NodeGroup, Objective, Plan, Role

MAX_GROUPS = 64  # node groups in one plan (the planner makes at most one per type, market and role)


class PlanDocumentError(DocumentError):
    """A plan document is wrong at `path` (e.g. "plans[0].nodes[1].count"); the text says how."""


MAX_GPUS = 64  # GPUs of one instance (EC2's largest have 16)

Gpus = Annotated[int, BeforeValidator(integer_in(0, MAX_GPUS))]


class NodeGroupDocument(Strict):
    """`NodeGroup.to_dict()`."""

    instance_type: Name
    market: Market
    count: NodeCount
    role: Role
    usd_per_hour: Amount
    gpus: Gpus | None = None  # absent in plans of earlier versions
    tflops: Amount | None = None


class PlanDocument(Strict):
    """`Plan.to_dict()`."""

    architecture: Architecture
    price_per_hour: Amount
    objective_value: Amount
    effective_flops: Amount
    region: Name
    availability_zone: Name
    nodes: Annotated[list[NodeGroupDocument], Field(min_length=1, max_length=MAX_GROUPS)]
    objective: Objective = Objective.DEEPVM
    catalog_source: Annotated[str, text(4096)] = ""  # "snapshot", "aws" or a catalog file's path
    prices_as_of: Annotated[str, text(64)] = ""
    notes: Annotated[list[Annotated[str, text(500)]], Field(max_length=32, default_factory=list)]
    price_cap: Amount | None = None  # the --max-price it was planned under (absent: not recorded)

    def to_plan(self) -> Plan:
        return Plan(
            architecture=self.architecture,
            region=self.region,
            availability_zone=self.availability_zone,
            nodes=tuple(
                NodeGroup(g.instance_type, g.market, g.count, g.role, g.usd_per_hour, g.gpus, g.tflops)
                for g in self.nodes
            ),
            price_per_hour=self.price_per_hour,
            effective_flops=self.effective_flops,
            objective_value=self.objective_value,
            objective=self.objective,
            catalog_source=self.catalog_source,
            prices_as_of=self.prices_as_of,
            notes=tuple(self.notes),
            price_cap=self.price_cap,
        )


class RankedPlansDocument(Strict):
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
    scaling_curves: JsonValue = None  # each GPU type's S(n) and where it came from (a profile, the catalog, ...)


@dataclass(frozen=True)
class PlanEntry:
    """One plan of a document and where it is in it ("plans[2]", or "" for a file holding one plan)."""

    where: str
    plan: Plan


def read_plan_document(data: Any) -> tuple[PlanEntry, ...]:
    """The plans of a plan file: one plan (`Plan.to_dict()`) or ranked plans (`{"plans": [...], ...}`)."""
    if not isinstance(data, dict):
        raise PlanDocumentError("", f'expected a JSON object (one plan, or {{"plans": [...]}}), got {show(data)}')
    if "plans" in data:
        ranked = _validate(RankedPlansDocument, data)
        cap = _price_cap(ranked)
        return tuple(PlanEntry(f"plans[{i}]", _capped(p.to_plan(), cap)) for i, p in enumerate(ranked.plans))
    return (PlanEntry("", _validate(PlanDocument, data).to_plan()),)


def _price_cap(ranked: RankedPlansDocument) -> float | None:
    """The --max-price the ranked plans were made under: `deepvm plan --json`'s "max_price", or the saved
    plan's "request" (kept opaque otherwise: only a positive finite number is taken)."""
    request = ranked.request if isinstance(ranked.request, dict) else {}
    for value in (ranked.max_price, request.get("max_price")):
        if isinstance(value, int | float) and not isinstance(value, bool) and 0 < value < float("inf"):
            return float(value)
    return None


def _capped(plan: Plan, cap: float | None) -> Plan:
    """The plan with the cap it was made under, where its own file does not say (never below its price)."""
    if plan.price_cap is not None or cap is None or cap < plan.price_per_hour:
        return plan
    return replace(plan, price_cap=cap)


def plan_from_dict(data: Any) -> Plan:
    """One plan (`Plan.to_dict()`), validated."""
    return _validate(PlanDocument, data).to_plan()


def _validate(model: type[Strict], data: Any) -> Any:
    try:
        return validate(model, data)
    except DocumentError as exc:
        raise PlanDocumentError("", str(exc)) from None
