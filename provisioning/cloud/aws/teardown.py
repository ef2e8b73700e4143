"""Tearing a cluster down so that nothing keeps billing, even when local state was lost.

Two passes: first the resources the store remembers (exact ids), then a sweep by the cluster tag that finds
whatever an interrupted `up` or a lost state directory left behind. Every step treats "already gone" as
success, so terminating twice is safe. The last step lists what still carries the tag; anything there is
reported as an error rather than silently left running.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from botocore.exceptions import ClientError

from provisioning.cloud.aws.context import AwsContext, cloud_errors, error_code
from provisioning.cloud.aws.iam import controller_leftovers, delete_controller
from provisioning.cloud.aws.instances import cluster_instances, describe
from provisioning.cloud.aws.network import cluster_security_groups
from provisioning.cloud.names import CLUSTER_TAG, cluster_filter
from provisioning.cloud.types import CloudResources
from provisioning.errors import CloudError

_GONE_CODES = (".NotFound", ".Malformed", "NotFoundException")


def terminate_cluster(
    ctx: AwsContext,
    cluster: str,
    known: CloudResources = CloudResources(),
    timeout_s: float = 600,
    on_step: Callable[[str], None] = lambda step: None,
) -> list[str]:
    """Delete everything of the cluster; return what was deleted ("instance i-..", "fleet fleet-..")."""
    ec2 = ctx.client("ec2")
    deleted: list[str] = []
    deadline = time.monotonic() + timeout_s

    instance_ids = [i.instance_id for i in cluster_instances(ctx, cluster)]
    on_step("deleting fleets")
    for fleet_id in _live_fleets(ctx, cluster, known.fleet_ids):
        _delete_fleet(ctx, fleet_id)
        deleted.append(f"fleet {fleet_id}")

    on_step("terminating instances")
    if instance_ids:
        with cloud_errors("terminating instances"):
            ec2.terminate_instances(InstanceIds=instance_ids)
        deleted += [f"instance {i}" for i in instance_ids]

    on_step("waiting for instances to terminate")
    _wait_terminated(ctx, instance_ids, deadline)

    on_step("deleting the controller's IAM role and instance profile")  # the head that held it is gone
    deleted += delete_controller(ctx, cluster, known.controller)

    on_step("deleting launch template")
    with cloud_errors("listing launch templates"):
        templates = ec2.describe_launch_templates(Filters=cluster_filter(cluster))["LaunchTemplates"]
    template_ids = dict.fromkeys([t["LaunchTemplateId"] for t in templates] + [known.launch_template_id])
    for template_id in filter(None, template_ids):
        if _gone_ok(lambda tid=template_id: ec2.delete_launch_template(LaunchTemplateId=tid)):
            deleted.append(f"launch template {template_id}")

    on_step("deleting security group")
    groups = dict.fromkeys([*cluster_security_groups(ctx, cluster), known.security_group_id])
    for group_id in filter(None, groups):
        if _delete_group(ctx, group_id, deadline):
            deleted.append(f"security group {group_id}")

    on_step("deleting key pair")
    with cloud_errors("listing key pairs"):
        keys = ec2.describe_key_pairs(Filters=cluster_filter(cluster))["KeyPairs"]
        if known.key_name:  # DeleteKeyPair succeeds for missing names: look the recorded one up first
            by_name = [{"Name": "key-name", "Values": [known.key_name]}]
            keys += ec2.describe_key_pairs(Filters=by_name)["KeyPairs"]
    for key_name in dict.fromkeys(k["KeyName"] for k in keys):
        if _gone_ok(lambda name=key_name: ec2.delete_key_pair(KeyName=name)):
            deleted.append(f"key pair {key_name}")

    on_step("deleting detached volumes")
    with cloud_errors("listing volumes"):
        volumes = ec2.describe_volumes(
            Filters=[*cluster_filter(cluster), {"Name": "status", "Values": ["available"]}]
        )["Volumes"]
    for volume in volumes:
        if _gone_ok(lambda vid=volume["VolumeId"]: ec2.delete_volume(VolumeId=vid)):
            deleted.append(f"volume {volume['VolumeId']}")

    left = leftovers(ctx, cluster)
    if left:
        raise CloudError(
            f"cluster {cluster}: still present after teardown: {', '.join(left)}; run `deepvm down` again"
        )
    return deleted


def leftovers(ctx: AwsContext, cluster: str) -> list[str]:
    """Everything still tagged with the cluster that costs money, blocks a new cluster of that name, or
    grants rights (the controller's IAM role and profile)."""
    ec2 = ctx.client("ec2")
    with cloud_errors("checking for leftovers"):
        found = [f"instance {i.instance_id}" for i in cluster_instances(ctx, cluster)]
        found += [f"fleet {f}" for f in _live_fleets(ctx, cluster)]
        found += [
            f"launch template {t['LaunchTemplateId']}"
            for t in ec2.describe_launch_templates(Filters=cluster_filter(cluster))["LaunchTemplates"]
        ]
        found += [f"security group {g}" for g in cluster_security_groups(ctx, cluster)]
        found += [
            f"key pair {k['KeyName']}"
            for k in ec2.describe_key_pairs(Filters=cluster_filter(cluster))["KeyPairs"]
        ]
    return found + controller_leftovers(ctx, cluster)


def _live_fleets(ctx: AwsContext, cluster: str, known_ids: tuple[str, ...] = ()) -> list[str]:
    """Fleets of the cluster not yet deleted: the recorded ones plus any tagged with the cluster
    (DescribeFleets has no tag filter, so tags are matched here)."""
    with cloud_errors("listing fleets"):
        pages = ctx.client("ec2").get_paginator("describe_fleets").paginate()
        fleets = [f for page in pages for f in page["Fleets"]]
    return [
        f["FleetId"]
        for f in fleets
        if not str(f.get("FleetState", "")).startswith("deleted")
        and (
            f["FleetId"] in known_ids
            or any(t["Key"] == CLUSTER_TAG and t["Value"] == cluster for t in f.get("Tags") or [])
        )
    ]


def _delete_fleet(ctx: AwsContext, fleet_id: str) -> None:
    """Delete an instant fleet with its instances (the only way AWS allows for instant fleets)."""
    try:
        answer = ctx.client("ec2").delete_fleets(FleetIds=[fleet_id], TerminateInstances=True)
    except ClientError as exc:
        # moto 5 answers InvalidParameterCombination when none of the fleet's instances still runs,
        # after it has marked the fleet deleted; nothing is left to do then.
        if error_code(exc) == "InvalidParameterCombination":
            return
        raise CloudError(f"deleting fleet {fleet_id}: {error_code(exc)}") from exc
    for failure in answer.get("UnsuccessfulFleetDeletions") or []:
        error = failure.get("Error", {})
        if error.get("Code") not in ("fleetIdDoesNotExist", "fleetNotInDeletableState"):
            raise CloudError(f"deleting fleet {fleet_id}: {error.get('Code')}: {error.get('Message', '')}")


def _wait_terminated(ctx: AwsContext, instance_ids: list[str], deadline: float) -> None:
    while instance_ids:
        with cloud_errors("waiting for instances to terminate"):
            alive = [i.instance_id for i in describe(ctx, instance_ids) if i.state != "terminated"]
        if not alive:
            return
        if time.monotonic() > deadline:
            raise CloudError(f"instances still shutting down: {', '.join(alive)}; run `deepvm down` again")
        time.sleep(1.0)


def _delete_group(ctx: AwsContext, group_id: str, deadline: float) -> bool:
    """Delete a security group, retrying while terminating instances still hold it."""
    while True:
        try:
            ctx.client("ec2").delete_security_group(GroupId=group_id)
            return True
        except ClientError as exc:
            code = error_code(exc)
            if code.endswith(_GONE_CODES):
                return False
            if code != "DependencyViolation" or time.monotonic() > deadline:
                raise CloudError(f"deleting security group {group_id}: {code}") from exc
        time.sleep(2.0)


def _gone_ok(call: Callable[[], object]) -> bool:
    """Run a delete; True if it deleted something, False if it was already gone."""
    try:
        call()
        return True
    except ClientError as exc:
        if error_code(exc).endswith(_GONE_CODES):
            return False
        raise CloudError(f"teardown: {error_code(exc)}: {exc.response['Error'].get('Message', '')}") from exc
