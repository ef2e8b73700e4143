"""Plans built by hand for the cloud tests."""

from __future__ import annotations

import json
from pathlib import Path

from provisioning.catalog import Market
from provisioning.planner.plan import Architecture, NodeGroup, Plan, Role

REGION = "us-east-1"
AZ = "us-east-1a"


def make_plan(spot: int = 3, on_demand: int = 1, instance_type: str = "g4dn.xlarge", az: str = AZ) -> Plan:
    groups = []
    if on_demand:
        groups.append(NodeGroup(instance_type, Market.ON_DEMAND, on_demand, Role.ANCHOR, 0.526))
    if spot:
        groups.append(NodeGroup(instance_type, Market.SPOT, spot, Role.TRAINER, 0.2104))
    return Plan(
        architecture=Architecture.SINGLE_ANCHOR,
        region=az[:-1],
        availability_zone=az,
        nodes=tuple(groups),
        price_per_hour=sum(g.count * g.usd_per_hour for g in groups),
        effective_flops=65.0 * (spot + on_demand),
        objective_value=1.0,
        catalog_source="test",
        prices_as_of="2026-11-01T00:00:00Z",
    )


def make_tiering_plan(spot: int = 3, holders: int = 1, az: str = AZ) -> Plan:
    """DeepVM's Tiering shape: spot GPU trainers + on-demand CPU checkpoint holders."""
    groups = (
        NodeGroup("g4dn.xlarge", Market.SPOT, spot, Role.TRAINER, 0.1499),
        NodeGroup("c5.xlarge", Market.ON_DEMAND, holders, Role.HOLDER, 0.17),
    )
    return Plan(
        architecture=Architecture.TIERING,
        region=az[:-1],
        availability_zone=az,
        nodes=groups,
        price_per_hour=sum(g.count * g.usd_per_hour for g in groups),
        effective_flops=65.0 * spot,
        objective_value=1.0,
        catalog_source="test",
        prices_as_of="2026-11-01T00:00:00Z",
    )


def write_plans(path: Path, *plans: Plan) -> Path:
    data = plans[0].to_dict() if len(plans) == 1 else {"plans": [p.to_dict() for p in plans]}
    path.write_text(json.dumps(data))
    return path
