"""The AWS implementation of the provider interface (contract: provisioning/cloud/__init__.py)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from provisioning.catalog.model import Market
from provisioning.cloud.aws.context import AwsContext
from provisioning.cloud.aws.fleet import LaunchSite, launch_fleet
from provisioning.cloud.aws.iam import ensure_controller
from provisioning.cloud.aws.instances import cluster_instances as query_instances
from provisioning.cloud.aws.instances import terminate_instances
from provisioning.cloud.aws.instances import wait_running as wait_instances
from provisioning.cloud.aws.network import ensure_security_group, subnet_vpc, zone_subnets
from provisioning.cloud.aws.profiles import attach_profile
from provisioning.cloud.aws.teardown import terminate_cluster
from provisioning.cloud.aws.template import ensure_key_pair, ensure_launch_template
from provisioning.cloud.names import PRICE_TAG, ROLE_TAG, ClusterIdentity, resource_name
from provisioning.cloud.types import (
    CloudResources,
    ClusterSpec,
    ControllerAccess,
    LaunchOutcome,
    Shortfall,
    groups_by_type,
)
from provisioning.planner.plan import NodeGroup, Plan

__all__ = [
    "add_instances",
    "attach_to_head",
    "attach_to_holders",
    "ensure_controller",
    "planned_resources",
    "query_instances",
    "run_instances",
    "terminate_cluster",
    "terminate_instances",
    "wait_instances",
]


def planned_resources(cluster: str, plan: Plan) -> list[str]:
    """What `run_instances` creates for `plan`, in its order, described for a person (`up --dry-run`); the
    cluster's id is made by `up` itself, so it shows as <id>."""
    name = resource_name(ClusterIdentity(cluster, "<id>"))
    fleets = []
    for instance_type, groups in groups_by_type(plan.nodes).items():
        markets = " + ".join(
            f"{sum(g.count for g in groups if g.market is market)} {market.value}"
            for market in Market
            if any(g.market is market for g in groups)
        )
        fleets.append(f"EC2 Fleet (instant) of {instance_type}: {markets} in {plan.availability_zone}")
    return [f"key pair {name}", f"security group {name}", f"launch template {name}", *fleets]


def run_instances(
    ctx: AwsContext,
    spec: ClusterSpec,
    all_or_nothing: bool,
    record: Callable[[CloudResources], None] = lambda created: None,
) -> LaunchOutcome:
    """Create the cluster's resources and launch its instances, one instant fleet per instance type;
    shortfalls come back as data.

    all_or_nothing asks EC2 for each market's whole capacity or none of it (MinTargetCapacity), so a
    failing `up` has fewer instances to clean up. A fleet that EC2 refuses outright (a right, a quota, the
    image: `Shortfall.refusal`) ends the launch there. `record` is called with what exists so far after each
    creation, fleets with the instances they returned: a failure halfway (the second fleet refused) still
    leaves the ids of everything to delete, including instances and instant fleets no listing shows yet.
    """
    vpc = subnet_vpc(ctx, spec.subnet_id)
    created = CloudResources(subnet_id=spec.subnet_id, zone_subnets=zone_subnets(ctx, vpc, spec.subnet_id))
    created = replace(created, key_name=ensure_key_pair(ctx, spec.identity, spec.ssh_public_key))
    record(created)
    group_id = ensure_security_group(ctx, spec.identity, vpc, spec.ssh_cidr)
    created = replace(created, security_group_id=group_id)
    record(created)
    created = replace(created, launch_template_id=ensure_launch_template(ctx, spec, group_id, created.key_name))
    record(created)
    site = LaunchSite(spec.identity, created.launch_template_id, spec.subnet_id, spec.availability_zone)
    shortfalls: list[Shortfall] = []
    for index, (instance_type, groups) in enumerate(groups_by_type(spec.plan.nodes).items()):
        fleet = launch_fleet(ctx, site, instance_type, groups, f"{spec.launch_token}-fleet-{index}", all_or_nothing)
        created = created.with_fleets([fleet.fleet_id], fleet.instance_ids)
        record(created)
        shortfalls += fleet.shortfalls
        if any(s.refusal for s in fleet.shortfalls):
            break  # the next fleet would only be deleted again: the launch fails whatever it gets
    return LaunchOutcome(resources=created, instance_ids=created.instance_ids, shortfalls=tuple(shortfalls))


def add_instances(
    ctx: AwsContext,
    cluster: ClusterIdentity,
    resources: CloudResources,
    site_zone: tuple[str, str],
    group: NodeGroup,
    token: str,
) -> LaunchOutcome:
    """Launch `group` more nodes from the cluster's launch template (a replacement, a stand-in, a repair of
    another type) in `site_zone`'s (the cluster's zone, the zone to buy in) subnet; the new fleet is added
    to the resources. The instances are tagged with the role and price they were bought for (a type or
    market the plan lacks cannot be matched to it later: clusters/noderecords.py). Idempotent through
    `token`."""
    own_zone, zone = site_zone
    site = LaunchSite(cluster, resources.launch_template_id, resources.subnet_in(zone, own_zone), zone)
    tags = {ROLE_TAG: group.role.value, PRICE_TAG: f"{group.usd_per_hour:.6f}"}
    fleet = launch_fleet(ctx, site, group.instance_type, [group], token, all_or_nothing=False, instance_tags=tags)
    return LaunchOutcome(
        resources.with_fleets([fleet.fleet_id], fleet.instance_ids), fleet.instance_ids, fleet.shortfalls
    )


def attach_to_head(ctx: AwsContext, access: ControllerAccess, instance_id: str) -> None:
    """Give the head node, and only it, the controller's profile (provisioning.cloud.aws.iam)."""
    attach_profile(ctx, access.profile, instance_id, new=access.owned)


def attach_to_holders(ctx: AwsContext, access: ControllerAccess, instance_ids: list[str]) -> None:
    """Give the checkpoint holders other than the head deepvm's holders profile, when it made one (their
    S3 rights for a job's L3 come with it at `train`); else they keep the launch template's."""
    for instance_id in instance_ids if access.holders else ():
        attach_profile(ctx, access.holders, instance_id, new=True)
