"""Plans built by hand for the cloud tests, priced from the built-in snapshot they name (as `deepvm up`
checks)."""

from __future__ import annotations

import json
from pathlib import Path

from provisioning.catalog.model import Market
from provisioning.catalog.snapshot import load_snapshot
from provisioning.planner.plan import Architecture, NodeGroup, Plan, Role

REGION = "us-east-1"
AZ = "us-east-1a"


def snapshot_price(instance_type: str, market: Market, az: str = AZ) -> float:
    """The built-in snapshot's price of one node in `az` (on-demand: in its region)."""
    snapshot = load_snapshot()
    if market is Market.ON_DEMAND:
        price = snapshot.on_demand_price(instance_type, az[:-1])
    else:
        price = snapshot.spot_prices(instance_type, az[:-1]).get(az)
    assert price is not None, f"the snapshot has no {market.value} price for {instance_type} in {az}"
    return price


def make_plan(spot: int = 3, on_demand: int = 1, instance_type: str = "g4dn.xlarge", az: str = AZ) -> Plan:
    groups = []
    if on_demand:
        price = snapshot_price(instance_type, Market.ON_DEMAND, az)
        groups.append(NodeGroup(instance_type, Market.ON_DEMAND, on_demand, Role.ANCHOR, price))
    if spot:
        price = snapshot_price(instance_type, Market.SPOT, az)
        groups.append(NodeGroup(instance_type, Market.SPOT, spot, Role.TRAINER, price))
    return Plan(
        architecture=Architecture.SINGLE_ANCHOR,
        region=az[:-1],
        availability_zone=az,
        nodes=tuple(groups),
        price_per_hour=sum(g.count * g.usd_per_hour for g in groups),
        effective_flops=65.0 * (spot + on_demand),
        objective_value=1.0,
        catalog_source="snapshot",
        prices_as_of="2026-11-01T00:00:00Z",
    )


def make_tiering_plan(spot: int = 3, holders: int = 1, az: str = AZ) -> Plan:
    """DeepVM's Tiering shape: spot GPU trainers + on-demand CPU checkpoint holders."""
    groups = (
        NodeGroup("g4dn.xlarge", Market.SPOT, spot, Role.TRAINER, snapshot_price("g4dn.xlarge", Market.SPOT, az)),
        NodeGroup(
            "c5.xlarge", Market.ON_DEMAND, holders, Role.HOLDER, snapshot_price("c5.xlarge", Market.ON_DEMAND, az)
        ),
    )
    return Plan(
        architecture=Architecture.TIERING,
        region=az[:-1],
        availability_zone=az,
        nodes=groups,
        price_per_hour=sum(g.count * g.usd_per_hour for g in groups),
        effective_flops=65.0 * spot,
        objective_value=1.0,
        catalog_source="snapshot",
        prices_as_of="2026-11-01T00:00:00Z",
    )


def write_plans(path: Path, *plans: Plan) -> Path:
    data = plans[0].to_dict() if len(plans) == 1 else {"plans": [p.to_dict() for p in plans]}
    path.write_text(json.dumps(data))
    return path
