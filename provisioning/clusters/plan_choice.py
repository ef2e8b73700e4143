"""The plans `deepvm up` launches: a plan file, the plan `deepvm plan` saved, or a fresh plan for a price.

A plan file holds one plan (`Plan.to_dict()`) or ranked plans (`{"plans": [...], ...}`, best first, as
`deepvm plan` saves them and `deepvm plan --json` prints them); the others are what `--on-shortage
next-plan` falls back to.

A file is read back as untrusted input, because `up` turns it into paid instances: it is read within
size and nesting limits (provisioning/core/jsonfile.py), validated as a strictly typed document
(plan_document.py), and every plan is checked against the catalog it names (plan_check.py), all before
anything is created. The catalog a plan names is its `catalog_source`:
- "snapshot" (or nothing, for a plan written by hand): the built-in price snapshot;
- "aws": live AWS prices for the plan's region (cached; the snapshot when AWS cannot be reached, with
  the warning `deepvm plan` would give);
- anything else is the path of the catalog file it was planned on, which must still be readable.
Every refusal is one InputError line naming the file and the field, e.g.
`plan.json: plans[0].nodes[1].count: must be an integer from 1 to 512, got 2.5`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from provisioning.catalog.model import Catalog
from provisioning.core.errors import InputError
from provisioning.core.home import saved_plan_path
from provisioning.core.inputfile import MIB
from provisioning.core.jsonfile import read_json_file
from provisioning.planner.plan import Plan
from provisioning.planner.plan_check import check_plan
from provisioning.planner.plan_document import PlanDocumentError, PlanEntry, read_plan_document

MAX_PLAN_BYTES = 1 * MIB  # a plan of 32 ranked plans with 64 groups each is far below this


@dataclass(frozen=True)
class LoadedPlans:
    """Plans ready to launch, best first, priced from their catalogs, and what the user must be told."""

    plans: tuple[Plan, ...]
    warnings: tuple[str, ...]
    catalogs: tuple[Catalog, ...] = ()  # the catalog each plan was checked against, in the same order


def load_plans(path: Path | None) -> LoadedPlans:
    """Plans from the file, or from the saved plan when no file is given, checked before anything is bought."""
    chosen = path or saved_plan_path()
    if path is None and not chosen.exists():
        raise InputError("no saved plan: run `deepvm plan --max-price X` first, or pass --plan FILE")
    return checked_plans(read_json_file(chosen, "plan file", MAX_PLAN_BYTES), str(chosen))


def checked_plans(data: Any, name: str) -> LoadedPlans:
    """The plans of a parsed plan document (`name` is its file in messages), each checked against the
    catalog it names; anything wrong is one InputError line naming the file and the field."""
    catalogs = _Catalogs()
    plans: list[Plan] = []
    used: list[Catalog] = []
    warnings: list[str] = []
    try:
        for entry in read_plan_document(data):
            catalog, label = catalogs.named_by(entry)
            warnings.extend(catalog.warnings)
            checked = check_plan(entry, catalog, label)
            plans.append(checked.plan)
            used.append(catalog)
            warnings.extend(f"{name}: {w}" for w in checked.warnings)
    except PlanDocumentError as exc:
        raise InputError(f"{name}: {exc}") from None
    return LoadedPlans(tuple(plans), tuple(dict.fromkeys(warnings)), tuple(used))


class _Catalogs:
    """The catalogs plans name, each loaded once however many plans name it."""

    def __init__(self) -> None:
        self._loaded: dict[tuple[str, str], tuple[Catalog, str]] = {}

    def named_by(self, entry: PlanEntry) -> tuple[Catalog, str]:
        plan = entry.plan
        source = plan.catalog_source or "snapshot"
        key = (source, plan.region if source == "aws" else "")
        if key not in self._loaded:
            try:
                self._loaded[key] = _load(source, plan.region)
            except InputError as exc:
                field = "region" if source == "aws" else "catalog_source"
                raise PlanDocumentError(f"{entry.where}.{field}" if entry.where else field, str(exc)) from None
        return self._loaded[key]


def catalog_of(plan: Plan) -> Catalog:
    """The catalog a checked plan was planned on (its `catalog_source`), for readers that need its types'
    FLOPS and scaling curves, such as `deepvm simulate --plan`."""
    return named_catalog(plan)[0]


def named_catalog(plan: Plan) -> tuple[Catalog, str]:
    """The catalog a plan names (its `catalog_source`) and how messages name it; InputError if unreadable."""
    return _load(plan.catalog_source or "snapshot", plan.region)


def _load(source: str, region: str) -> tuple[Catalog, str]:
    """The catalog `source` names, and how to name it in messages (AWS may have fallen back to the snapshot)."""
    from provisioning.catalog.snapshot import load_snapshot, snapshot_label
    from provisioning.catalog.sources import resolve_catalog

    if source == "snapshot":
        catalog = load_snapshot()
    elif source == "aws":
        catalog = resolve_catalog(regions=[region], offline=False, catalog_file=None)
    else:
        catalog = resolve_catalog(regions=["all"], offline=False, catalog_file=Path(source))
    labels = {"snapshot": snapshot_label(catalog), "aws": "the live AWS prices"}
    return catalog, labels.get(catalog.source, f"catalog {catalog.source}")


def plans_for_price(max_price: float, region: str | None, offline: bool) -> tuple[Plan, ...]:
    """Plan on the spot, as `deepvm plan --max-price` would; best plan first."""
    from provisioning.catalog.sources import resolve_catalog
    from provisioning.planner import plan_cluster  # the planner and market data load only when used
    from provisioning.planner.request import PlanRequest

    catalog = resolve_catalog(regions=[region] if region else None, offline=offline, catalog_file=None)
    result = plan_cluster(catalog, PlanRequest(max_price=max_price, regions=(region,) if region else None))
    return tuple(result.plans)
