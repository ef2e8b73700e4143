"""Reading instances back. EC2 is eventually consistent: an id CreateFleet just returned may be unknown to
DescribeInstances for a while, so lookups retry within a time budget instead of failing at once."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

from botocore.exceptions import ClientError

from provisioning.catalog.model import Market
from provisioning.cloud.aws.context import AwsContext, cloud_errors, error_code
from provisioning.cloud.names import PRICE_TAG, ROLE_TAG, ClusterIdentity, cluster_filter, owned_by
from provisioning.cloud.types import InstanceInfo
from provisioning.core.errors import CloudError
from provisioning.planner.plan import Role

LIVE_STATES = ("pending", "running", "shutting-down", "stopping", "stopped")


def describe(ctx: AwsContext, instance_ids: list[str]) -> list[InstanceInfo]:
    """The instances by id; ids EC2 does not know yet are left out (the caller retries)."""
    return [_info(i) for i in describe_raw(ctx, instance_ids)]


def describe_raw(ctx: AwsContext, instance_ids: list[str]) -> list[dict[str, Any]]:
    """DescribeInstances' answer for these ids, instance by instance; ids EC2 does not know (not yet, or no
    longer) are left out."""
    if not instance_ids:
        return []
    try:
        pages = ctx.client("ec2").get_paginator("describe_instances").paginate(InstanceIds=instance_ids)
        return [i for page in pages for r in page["Reservations"] for i in r["Instances"]]
    except ClientError as exc:
        if error_code(exc) != "InvalidInstanceID.NotFound":
            raise
        if len(instance_ids) == 1:
            return []
    # Some ids are not visible: ask one by one so that the visible ones are still reported.
    return [raw for instance_id in instance_ids for raw in describe_raw(ctx, [instance_id])]


def terminate_instances(ctx: AwsContext, instance_ids: list[str]) -> dict[str, str]:
    """Terminate these instances now; {instance id: the state EC2 answered}. Idempotent, as the provider
    contract promises (provisioning/cloud/__init__.py): TerminateInstances on an instance that is already
    shutting down or terminated succeeds and reports that state, and "Terminated instances remain visible
    after termination (for approximately one hour)"
    (https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_TerminateInstances.html). One that EC2 no
    longer knows (InvalidInstanceID.NotFound fails the whole call) is gone already: it is reported as
    "terminated" and the others are still terminated, one by one."""
    if not instance_ids:
        return {}
    with cloud_errors(f"terminating {', '.join(instance_ids)}"):
        try:
            answer = ctx.client("ec2").terminate_instances(InstanceIds=instance_ids)
        except ClientError as exc:
            if error_code(exc) != "InvalidInstanceID.NotFound":
                raise
            if len(instance_ids) == 1:
                return {instance_ids[0]: "terminated"}
            return {i: state for one in instance_ids for i, state in terminate_instances(ctx, [one]).items()}
    return {i["InstanceId"]: i["CurrentState"]["Name"] for i in answer.get("TerminatingInstances", [])}


def wait_running(
    ctx: AwsContext,
    instance_ids: list[str],
    timeout_s: float,
    on_progress: Callable[[int, int], None] = lambda running, total: None,
) -> list[InstanceInfo]:
    """Poll until every instance is running with an address; fail with the stragglers' states."""
    deadline = time.monotonic() + timeout_s
    delay = 0.2
    while True:
        with cloud_errors("describing the new instances"):
            infos = describe(ctx, instance_ids)
        running = [i for i in infos if i.state == "running" and i.private_ip]
        on_progress(len(running), len(instance_ids))
        if len(running) == len(instance_ids):
            return running
        dead = [i for i in infos if i.state in ("shutting-down", "terminated")]
        if dead or time.monotonic() > deadline:
            states = {i.instance_id: i.state for i in infos}
            missing = [
                f"{iid} ({states.get(iid, 'not visible')})"
                for iid in instance_ids
                if iid not in {r.instance_id for r in running}
            ]
            raise CloudError(f"instances did not reach 'running': {', '.join(missing)}")
        time.sleep(delay)
        delay = min(delay * 1.5, 5.0)


def cluster_instances(
    ctx: AwsContext, cluster: ClusterIdentity, states: tuple[str, ...] = LIVE_STATES
) -> list[InstanceInfo]:
    """Every instance tagged with the cluster, in the given states (found even without local state)."""
    filters = [*cluster_filter(cluster), {"Name": "instance-state-name", "Values": list(states)}]
    with cloud_errors("listing the cluster's instances"):
        pages = ctx.client("ec2").get_paginator("describe_instances").paginate(Filters=filters)
        raw = [i for page in pages for r in page["Reservations"] for i in r["Instances"]]
    return [_info(i) for i in owned_by(cluster, raw)]


def _info(raw: dict) -> InstanceInfo:
    tags = {t.get("Key"): t.get("Value") for t in raw.get("Tags") or ()}
    launched = raw.get("LaunchTime")
    if isinstance(launched, datetime):
        launched_at = launched.astimezone(timezone.utc).isoformat(timespec="seconds")
    else:
        launched_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
    return InstanceInfo(
        instance_id=raw["InstanceId"],
        instance_type=raw["InstanceType"],
        market=Market.SPOT if raw.get("InstanceLifecycle") == "spot" else Market.ON_DEMAND,
        availability_zone=raw.get("Placement", {}).get("AvailabilityZone", ""),
        state=raw["State"]["Name"],
        private_ip=raw.get("PrivateIpAddress"),
        public_ip=raw.get("PublicIpAddress"),
        launched_at=launched_at,
        state_reason=(raw.get("StateReason") or {}).get("Code", ""),
        bought_as=_tagged(tags, ROLE_TAG, Role),
        bought_at_usd=_tagged(tags, PRICE_TAG, float),
    )


def _tagged(tags: dict, key: str, kind: type) -> Any:
    """A tag's value read as `kind`; None when the tag is missing or not one (a node of `up`, or edited)."""
    try:
        return kind(tags[key]) if key in tags else None
    except ValueError:
        return None
