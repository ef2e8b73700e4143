"""The plans `deepvm up` launches: a plan file, the plan `deepvm plan` saved, or a fresh plan for a price.

A plan file holds one plan (`Plan.to_dict()`), the document `deepvm plan` saves (`{"plan": ..., "request":
...}`), or several plans (`{"plans": [...]}`, best first); the others are what `--on-shortage next-plan`
falls back to.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from provisioning.errors import InputError
from provisioning.home import saved_plan_path
from provisioning.planner.plan import Plan


def load_plans(path: Path | None) -> tuple[Plan, ...]:
    """Plans from the file, or from the saved plan when no file is given."""
    chosen = path or saved_plan_path()
    if not chosen.is_file():
        if path is None:
            raise InputError("no saved plan: run `deepvm plan --max-price X` first, or pass --plan FILE")
        raise InputError(f"plan file {str(path)!r} not found")
    try:
        data = json.loads(chosen.read_text())
        return plans_from_dict(data)
    except (ValueError, KeyError, TypeError) as exc:
        raise InputError(f"{chosen} is not a deepvm plan ({type(exc).__name__}: {exc})") from exc


def plans_from_dict(data: dict[str, Any]) -> tuple[Plan, ...]:
    raw = data["plans"] if "plans" in data else [data.get("plan", data)]
    plans = tuple(Plan.from_dict(p) for p in raw)
    if not plans:
        raise ValueError("the file holds no plan")
    for plan in plans:
        if not plan.nodes or any(g.count < 1 for g in plan.nodes):
            raise ValueError("a plan has no nodes, or a node group with no nodes")
    return plans


def plans_for_price(max_price: float, region: str | None, offline: bool) -> tuple[Plan, ...]:
    """Plan on the spot, as `deepvm plan --max-price` would; best plan first."""
    from provisioning.planner import plan_cluster  # the planner and market data load only when used
    from provisioning.planner.request import PlanRequest
    from provisioning.sources import resolve_catalog

    catalog = resolve_catalog(regions=[region] if region else None, offline=offline, catalog_file=None)
    result = plan_cluster(catalog, PlanRequest(max_price=max_price, regions=(region,) if region else None))
    return tuple(result.plans)
