"""EC2 Fleet requests of type `instant`: the plan's spot and on-demand capacity in its zone, in one call
per instance type.

Why one request per instance type rather than one for the whole plan: a fleet cannot tie an instance type
to a market, so a Tiering plan (spot GPU trainers + on-demand CPU holders) in a single request could come
back as spot CPU nodes. A Single Anchor plan (one type) is exactly one request.

Errors are data: an instant fleet answers with the instances it launched *and* an Errors[] list
(InsufficientInstanceCapacity, quota exceeded, ...), which is read even when instances came back, and
each entry is classified by its code (fleet_errors.py): a shortage, or a refusal with its fix.
"""

from __future__ import annotations

from dataclasses import dataclass

from provisioning.catalog.model import Market
from provisioning.cloud.aws.context import AwsContext, cloud_errors
from provisioning.cloud.aws.fleet_errors import FleetError
from provisioning.cloud.names import ClusterIdentity, tag_spec
from provisioning.cloud.types import Shortfall
from provisioning.planner.plan import NodeGroup

_MARKET_OF_LIFECYCLE = {"spot": Market.SPOT, "on-demand": Market.ON_DEMAND}


@dataclass(frozen=True)
class FleetResult:
    """One instant fleet's answer: its id, instance ids per market, and shortfalls."""

    fleet_id: str
    instance_ids: tuple[str, ...]
    shortfalls: tuple[Shortfall, ...]


@dataclass(frozen=True)
class LaunchSite:
    """Where a cluster's fleets launch: its launch template in one subnet of one zone."""

    cluster: ClusterIdentity
    launch_template_id: str
    subnet_id: str
    availability_zone: str


def fleet_request(
    site: LaunchSite,
    instance_type: str,
    groups: list[NodeGroup],
    client_token: str,
    all_or_nothing: bool,
    instance_tags: dict[str, str] | None = None,
) -> dict[str, object]:
    """The CreateFleet arguments for the groups of one instance type.

    all_or_nothing sets MinTargetCapacity, so EC2 launches nothing in a market it cannot fill entirely.
    `instance_tags`: tags the instances carry beside the cluster's (a replacement's role and price).
    """
    spot = sum(g.count for g in groups if g.market is Market.SPOT)
    on_demand = sum(g.count for g in groups if g.market is Market.ON_DEMAND)
    request: dict[str, object] = {
        "Type": "instant",
        "ClientToken": client_token,
        "LaunchTemplateConfigs": [
            {
                "LaunchTemplateSpecification": {
                    "LaunchTemplateId": site.launch_template_id,
                    "Version": "$Latest",
                },
                "Overrides": [
                    {
                        "InstanceType": instance_type,
                        "SubnetId": site.subnet_id,
                        "AvailabilityZone": site.availability_zone,
                    }
                ],
            }
        ],
        "TargetCapacitySpecification": {
            "TotalTargetCapacity": spot + on_demand,
            "OnDemandTargetCapacity": on_demand,
            "SpotTargetCapacity": spot,
            "DefaultTargetCapacityType": "spot" if spot else "on-demand",
        },
        "TagSpecifications": [
            tag_spec("fleet", site.cluster),
            tag_spec("instance", site.cluster, **(instance_tags or {})),
        ],
    }
    for key, count, strategy in (
        ("SpotOptions", spot, "price-capacity-optimized"),
        ("OnDemandOptions", on_demand, "lowest-price"),
    ):
        options: dict[str, object] = {"AllocationStrategy": strategy}
        if all_or_nothing and count:
            options.update(SingleInstanceType=True, SingleAvailabilityZone=True, MinTargetCapacity=count)
        request[key] = options
    return request


def launch_fleet(
    ctx: AwsContext,
    site: LaunchSite,
    instance_type: str,
    groups: list[NodeGroup],
    client_token: str,
    all_or_nothing: bool,
    instance_tags: dict[str, str] | None = None,
) -> FleetResult:
    """One instant fleet for the groups of one instance type (also how replacement nodes are bought)."""
    request = fleet_request(site, instance_type, groups, client_token, all_or_nothing, instance_tags)
    with cloud_errors(f"creating the EC2 Fleet for {instance_type}"):
        answer = ctx.client("ec2").create_fleet(**request)
    return read_fleet_answer(answer, instance_type, groups, ctx.region)


def read_fleet_answer(answer: dict, instance_type: str, groups: list[NodeGroup], region: str) -> FleetResult:
    """Instances launched and capacity missing, per market, from a CreateFleet response."""
    launched: dict[Market, list[str]] = {Market.SPOT: [], Market.ON_DEMAND: []}
    for item in answer.get("Instances") or []:
        launched[_MARKET_OF_LIFECYCLE.get(item.get("Lifecycle", "on-demand"), Market.ON_DEMAND)].extend(
            item.get("InstanceIds") or []
        )
    errors: dict[Market, list[FleetError]] = {Market.SPOT: [], Market.ON_DEMAND: []}
    for raw in answer.get("Errors") or []:
        market = _MARKET_OF_LIFECYCLE.get(raw.get("Lifecycle", ""))
        error = FleetError(raw.get("ErrorCode", "Error"), raw.get("ErrorMessage", ""), instance_type, market)
        for m in [market] if market else list(errors):
            errors[m].append(error)
    shortfalls = []
    for market in (Market.ON_DEMAND, Market.SPOT):
        wanted = sum(g.count for g in groups if g.market is market)
        if len(launched[market]) < wanted:
            refused = next((e for e in errors[market] if not e.is_shortage), None)
            shortfalls.append(
                Shortfall(
                    instance_type,
                    market,
                    wanted,
                    len(launched[market]),
                    tuple(dict.fromkeys(e.describe() for e in errors[market])),
                    refusal="" if refused is None else f"{refused.describe()}; {refused.fix(region)}",
                )
            )
    ids = tuple(launched[Market.ON_DEMAND] + launched[Market.SPOT])
    return FleetResult(fleet_id=answer.get("FleetId", ""), instance_ids=ids, shortfalls=tuple(shortfalls))
