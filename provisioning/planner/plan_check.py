"""A plan checked against a catalog before anything is bought: `deepvm up` launches only what the
catalog says exists, at the catalog's prices, in the shape the architecture names.

A plan file can be edited, truncated or written by hand, and `up` turns it into paid instances, so
everything that decides what is bought is checked (plan_document.py has already checked the types):
- the region is one the catalog prices, the zone is one of that region's;
- every instance type is in the catalog and offered in the group's market there;
- roles fit the architecture: Tiering is spot GPU trainers plus at least one on-demand CPU holder;
  Single Anchor is exactly one on-demand GPU anchor plus spot GPU trainers and no holders (with `--mix`
  the anchor may be a GPU type of its own, so its type is not tied to the trainers');
- the nodes stay within MAX_NODES and within the catalog's vCPU quotas where it knows them;
- the GPUs and TFLOPS a group states of its type are the catalog's (training runs a rank per GPU); a
  group that states none (a plan of an earlier version, or written by hand) gets the catalog's;
- prices equal the catalog's within rounding. A plan whose prices differ (older prices, or edited ones)
  is re-priced from the catalog with a warning, so that what `up` shows and what `status` charges are
  the catalog's numbers and never the file's.
"""

from __future__ import annotations

import difflib
import math
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, replace

from provisioning.catalog.model import Catalog, InstanceType, Market
from provisioning.core.strictdoc import MAX_NODES
from provisioning.planner.plan import Architecture, NodeGroup, Plan, Role
from provisioning.planner.plan_document import PlanDocumentError, PlanEntry

# Prices are written with 6 decimals (`Plan.to_dict`) and catalogs keep 4 to 8: closer than this is equal.
PRICE_TOLERANCE = 1e-6


@dataclass(frozen=True)
class CheckedPlan:
    """A plan that may be launched, priced from the catalog, and what was changed on the way."""

    plan: Plan
    warnings: tuple[str, ...]  # e.g. that it was re-priced


def check_plan(entry: PlanEntry, catalog: Catalog, label: str) -> CheckedPlan:
    """`entry`'s plan checked against `catalog` (named `label` in messages); PlanDocumentError if wrong."""
    plan, at = entry.plan, _path(entry.where)
    _check_place(plan, catalog, label, at)
    priced: list[NodeGroup] = []
    for index, group in enumerate(plan.nodes):
        where = at(f"nodes[{index}]")
        itype = _known_type(group.instance_type, catalog, label, f"{where}.instance_type")
        _check_role(group, itype, where)
        _check_facts(group, itype, label, where)
        price = _catalog_price(group, plan, catalog)
        if price is None:
            raise PlanDocumentError(
                f"{where}.market",
                f"{label} has no {group.market.value} price for {group.instance_type} in {_place(group, plan)}",
            )
        priced.append(replace(group, usd_per_hour=price, gpus=itype.gpu_count, tflops=itype.flops))
    _check_architecture(plan, at("architecture"))
    _check_size(plan, catalog, at("nodes"))
    stated = tuple(replace(g, gpus=p.gpus, tflops=p.tflops) for g, p in zip(plan.nodes, priced))
    return _repriced(replace(plan, nodes=stated), tuple(priced), label, entry.where)


def _path(where: str) -> Callable[[str], str]:
    """Paths of a plan's fields below `where` ("plans[0]" -> "plans[0].region"; "" -> "region")."""
    return lambda field: f"{where}.{field}" if where else field


def _check_place(plan: Plan, catalog: Catalog, label: str, at: Callable[[str], str]) -> None:
    if plan.region not in catalog.regions:
        raise PlanDocumentError(
            at("region"), f"unknown region {plan.region!r}; {label} has {', '.join(catalog.regions)}"
        )
    zones = sorted({p.availability_zone for p in catalog.prices if p.region == plan.region and p.availability_zone})
    if plan.availability_zone not in zones:
        raise PlanDocumentError(
            at("availability_zone"),
            f"{plan.availability_zone!r} is not a zone of {plan.region} in {label} (it has {', '.join(zones)})",
        )


def _known_type(name: str, catalog: Catalog, label: str, where: str) -> InstanceType:
    itype = catalog.types.get(name)
    if itype is None:
        close = difflib.get_close_matches(name, list(catalog.types), n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise PlanDocumentError(where, f"unknown instance type {name!r} in {label}{hint}")
    return itype


def _check_role(group: NodeGroup, itype: InstanceType, where: str) -> None:
    """Trainers are spot GPU nodes, the anchor one on-demand GPU node, holders on-demand CPU nodes."""
    market, gpu = {
        Role.TRAINER: (Market.SPOT, True),
        Role.ANCHOR: (Market.ON_DEMAND, True),
        Role.HOLDER: (Market.ON_DEMAND, False),
    }[group.role]
    if group.market is not market:
        raise PlanDocumentError(
            f"{where}.market", f"a {group.role.value} is bought {market.value}, not {group.market.value}"
        )
    if itype.is_gpu != gpu:
        kind = "GPU" if gpu else "CPU"
        raise PlanDocumentError(
            f"{where}.instance_type", f"a {group.role.value} is a {kind} instance type, and {itype.name} is not"
        )


def _check_facts(group: NodeGroup, itype: InstanceType, label: str, where: str) -> None:
    if group.gpus is not None and group.gpus != itype.gpu_count:
        raise PlanDocumentError(
            f"{where}.gpus", f"{itype.name} has {itype.gpu_count} GPUs in {label}, not {group.gpus}"
        )
    if group.tflops is not None and not math.isclose(group.tflops, itype.flops, rel_tol=1e-6, abs_tol=1e-6):
        raise PlanDocumentError(
            f"{where}.tflops", f"{itype.name} has {itype.flops:g} TFLOPS in {label}, not {group.tflops:g}"
        )


def _catalog_price(group: NodeGroup, plan: Plan, catalog: Catalog) -> float | None:
    if group.market is Market.ON_DEMAND:
        return catalog.on_demand_price(group.instance_type, plan.region)
    return catalog.spot_prices(group.instance_type, plan.region).get(plan.availability_zone)


def _place(group: NodeGroup, plan: Plan) -> str:
    return plan.availability_zone if group.market is Market.SPOT else plan.region


def _check_architecture(plan: Plan, where: str) -> None:
    nodes: dict[Role, int] = defaultdict(int)
    for group in plan.nodes:
        nodes[group.role] += group.count
    anchors, holders, trainers = nodes[Role.ANCHOR], nodes[Role.HOLDER], nodes[Role.TRAINER]
    found = f"the nodes have {anchors} anchor(s), {holders} holder(s) and {trainers} spot trainer(s)"
    if plan.architecture is Architecture.SINGLE_ANCHOR and (anchors != 1 or holders):
        raise PlanDocumentError(where, f"single-anchor is one on-demand anchor, spot trainers and no holders; {found}")
    if plan.architecture is Architecture.TIERING and (anchors or not holders or not trainers):
        raise PlanDocumentError(
            where, f"tiering is spot trainers and at least one on-demand holder, no anchor; {found}"
        )


def _check_size(plan: Plan, catalog: Catalog, where: str) -> None:
    total = sum(g.count for g in plan.nodes)
    if total > MAX_NODES:
        raise PlanDocumentError(where, f"{total} nodes in all; deepvm launches at most {MAX_NODES} per cluster")
    for (quota_group, market), needed in sorted(vcpus_by_quota(plan, catalog).items()):
        quota = catalog.quota(plan.region, quota_group, market)
        if quota is not None and needed > quota:
            raise PlanDocumentError(
                where,
                f"needs {needed} {market.value} vCPUs of quota group {quota_group!r} in {plan.region}; "
                f"the quota is {quota:g}",
            )


def vcpus_by_quota(plan: Plan, catalog: Catalog) -> dict[tuple[str, Market], int]:
    """The vCPUs the plan's nodes count against each quota group, per market (EC2's vCPU quotas are per
    group and market; P5 Spot has its own: InstanceType.quota_group_in); every type must be in the catalog."""
    vcpus: dict[tuple[str, Market], int] = defaultdict(int)
    for group in plan.nodes:
        itype = catalog.types[group.instance_type]
        vcpus[(itype.quota_group_in(group.market), group.market)] += itype.vcpus * group.count
    return dict(vcpus)


def _repriced(plan: Plan, priced: tuple[NodeGroup, ...], label: str, where: str) -> CheckedPlan:
    total = sum(g.count * g.usd_per_hour for g in priced)
    nodes_total = sum(g.count * g.usd_per_hour for g in plan.nodes)
    if all(_same(old.usd_per_hour, new.usd_per_hour) for old, new in zip(plan.nodes, priced)) and _same(
        plan.price_per_hour, total
    ):
        return CheckedPlan(plan, ())
    # the file's figure that is off: its total, or else what its node prices add up to
    said = nodes_total if _same(plan.price_per_hour, total) else plan.price_per_hour
    name = f"{where}: " if where else ""
    warning = f"{name}its prices are not those of {label}; re-priced from ${said:.4f}/h to ${total:.4f}/h"
    return CheckedPlan(replace(plan, nodes=priced, price_per_hour=total), (warning,))


def _same(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=PRICE_TOLERANCE, abs_tol=PRICE_TOLERANCE)
