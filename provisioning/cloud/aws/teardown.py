"""Tearing a cluster down so that nothing keeps billing, even when local state was lost or the cloud fails.

Each step lists what it deletes afresh: the resources the store remembers (exact ids) plus a sweep by the
cluster tag that finds whatever an interrupted `up` or a lost state directory left behind. "Already gone"
is success, so tearing down twice is safe.

The recorded ids come first because a sweep cannot find everything on AWS: an instance launched seconds
ago may be missing from a tag-filtered DescribeInstances (eventual consistency:
https://docs.aws.amazon.com/ec2/latest/devguide/eventual-consistency.html), and an instant fleet is never
returned by DescribeFleets without its id
(https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_DescribeFleets.html). Fleets are therefore
deleted by their recorded ids only; a fleet of a cluster with no record cannot be found, but it bills
nothing: its instances are found by their tag.

Instances go first: they bill, and an instance must not outlive a failure of anything after it. Their
fleets are deleted after them, with TerminateInstances: an instant fleet is only a record once its
instances are gone, and deleting it terminates any instance of it no listing showed yet. A step
that fails does not stop the next ones: a security group that cannot be deleted must not leave a key pair
or an IAM role behind. A pass with failures is run again after a pause, because clouds fail for moments
(throttling beyond botocore's own retries, a 5xx burst, an instance still shutting down). What is still
there after the last pass is named, one resource per line with the command that deletes it, in a
TeardownIncomplete error.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from botocore.exceptions import BotoCoreError, ClientError

from provisioning.cloud.aws.buckets import bucket_of, delete_bucket
from provisioning.cloud.aws.context import AwsContext, cloud_errors, error_code
from provisioning.cloud.aws.iam import controller_leftovers, delete_controller, identities_in_iam
from provisioning.cloud.aws.instances import LIVE_STATES, cluster_instances, describe, terminate_instances
from provisioning.cloud.aws.leftover import Leftover
from provisioning.cloud.aws.network import cluster_security_groups
from provisioning.cloud.names import CLUSTER_ID_TAG, CLUSTER_TAG, ClusterIdentity, cluster_filter, owned_by
from provisioning.cloud.types import CloudResources
from provisioning.core.errors import CloudError

_GONE_CODES = (".NotFound", ".Malformed", "NotFoundException")
_PASS_PAUSES_S = (1.0, 2.0)  # a pass with failures is retried after each pause in turn
_DEPENDENCY_WAIT_S = 120.0  # how long a security group may stay in use by instances that are shutting down


class TeardownIncomplete(CloudError):
    """Something of the cluster is still there after the teardown's last pass."""

    def __init__(
        self, cluster: str, region: str, left: list[Leftover], failures: dict[str, str], endpoint_url: str | None = None
    ) -> None:
        self.left = tuple(left)
        retry = f"run `deepvm down {cluster} --yes` again to retry"
        if not left:  # the listing itself failed: say what did
            steps = "; ".join(f"{kind}: {error}" for kind, error in failures.items())
            super().__init__(f"cluster {cluster} may not be fully deleted ({steps}); {retry}")
            return
        lines = [f"cluster {cluster} is not fully deleted, {len(left)} resource(s) left; {retry}, or by hand:"]
        for item in left:
            why = failures.get(str(item)) or failures.get(item.kind)
            lines.append(f"  {item}{f' ({why})' if why else ''}: {item.delete_command(region, endpoint_url)}")
        super().__init__("\n".join(lines))


@dataclass
class _Pass:
    """One pass over every step: what it deleted and what failed (by resource, or by kind when listing)."""

    deleted: list[str] = field(default_factory=list)
    failures: dict[str, str] = field(default_factory=dict)

    def attempt(self, key: str, call: Callable[[], object]) -> bool:
        """Run one step; a failure is noted under `key` and the teardown goes on."""
        try:
            call()
            return True
        except (CloudError, ClientError, BotoCoreError) as exc:
            self.failures[key] = _reason(exc)
            return False

    def delete(self, what: str, call: Callable[[], object]) -> None:
        """Delete one resource: noted as deleted, as nothing when it was already gone, or as a failure."""
        try:
            call()
        except ClientError as exc:
            if not error_code(exc).endswith(_GONE_CODES):
                self.failures[what] = _reason(exc)
            return
        except (CloudError, BotoCoreError) as exc:
            self.failures[what] = _reason(exc)
            return
        self.deleted.append(what)


def terminate_cluster(
    ctx: AwsContext,
    cluster: ClusterIdentity,
    known: CloudResources = CloudResources(),
    timeout_s: float = 600,
    on_step: Callable[[str], None] = lambda step: None,
    keep_outputs: bool = False,
) -> list[str]:
    """Delete everything of the cluster; return what was deleted ("instance i-..", "fleet fleet-..").
    Raises TeardownIncomplete naming what is left when passes with pauses between them did not suffice.
    `keep_outputs`: the cluster's outputs bucket stays (buckets.py)."""
    deadline = time.monotonic() + timeout_s
    deleted: list[str] = []
    for pause in (*_PASS_PAUSES_S, None):
        done = _one_pass(ctx, cluster, known, deadline, on_step, keep_outputs)
        deleted += [d for d in done.deleted if d not in deleted]
        if not done.failures or pause is None or time.monotonic() + pause > deadline:
            break
        on_step(f"{len(done.failures)} teardown step(s) failed; trying again in {pause:g} s")
        time.sleep(pause)
    try:
        left = leftovers(ctx, cluster, known, keep_outputs)
    except CloudError as exc:
        raise TeardownIncomplete(cluster.name, ctx.region, [], {**done.failures, "listing": str(exc)}) from exc
    if left:
        raise TeardownIncomplete(cluster.name, ctx.region, left, done.failures, ctx.endpoint_url)
    return deleted


def _one_pass(
    ctx: AwsContext,
    cluster: ClusterIdentity,
    known: CloudResources,
    deadline: float,
    on_step: Callable[[str], None],
    keep_outputs: bool,
) -> _Pass:
    ec2 = ctx.client("ec2")
    run = _Pass()

    on_step("terminating instances")
    live: list[str] = []

    def terminate() -> None:
        found = {i.instance_id: i for i in cluster_instances(ctx, cluster)}
        with cloud_errors("describing the recorded instances"):
            found.update((i.instance_id, i) for i in describe(ctx, list(known.instance_ids)))
        live.extend(i for i, info in found.items() if info.state != "terminated")
        running = [i for i, info in found.items() if info.state not in ("shutting-down", "terminated")]
        if running:
            with cloud_errors("terminating instances"):
                ec2.terminate_instances(InstanceIds=running)
            run.deleted += [f"instance {i}" for i in running]
        # launched, but no describe shows them (not yet, or any more): EC2's "not found" is no failure here,
        # the deletion of their fleets, which follows, terminates them if they exist
        terminate_instances(ctx, [i for i in known.instance_ids if i not in found])

    instances_gone = run.attempt("instance", terminate)

    on_step("deleting fleets")  # after their instances: a fleet that cannot be deleted bills nothing
    fleets: dict[str, str] = {}
    run.attempt("fleet", lambda: fleets.update(_fleet_states(ctx, known.fleet_ids)))
    for fleet_id, state in fleets.items():
        if not state:  # AWS no longer knows it: it ended long ago, and said so here
            run.deleted.append(f"fleet {fleet_id} (gone already)")
        elif not state.startswith("deleted"):
            run.delete(f"fleet {fleet_id}", lambda f=fleet_id: _delete_fleet(ctx, f))

    on_step("waiting for instances to terminate")
    instances_gone = instances_gone and run.attempt("instance", lambda: _wait_terminated(ctx, live, deadline))

    on_step("deleting the controller's IAM role and instance profile")  # the head that held it is gone
    run.attempt("IAM role", lambda: run.deleted.extend(delete_controller(ctx, cluster, known.controller)))

    on_step("deleting launch template")

    def templates() -> list[str]:
        with cloud_errors("listing launch templates"):
            found = owned_by(cluster, ec2.describe_launch_templates(Filters=cluster_filter(cluster))["LaunchTemplates"])
        return list(filter(None, dict.fromkeys([t["LaunchTemplateId"] for t in found] + [known.launch_template_id])))

    for template_id in _listed(run, "launch template", templates):
        run.delete(
            f"launch template {template_id}", lambda t=template_id: ec2.delete_launch_template(LaunchTemplateId=t)
        )

    on_step("deleting security group")

    def groups() -> list[str]:
        return list(filter(None, dict.fromkeys([*cluster_security_groups(ctx, cluster), known.security_group_id])))

    for group_id in _listed(run, "security group", groups):
        if not instances_gone:  # instances that may still run hold it: a later pass deletes it
            run.failures[f"security group {group_id}"] = "the cluster's instances are not terminated yet"
        else:
            run.delete(f"security group {group_id}", lambda g=group_id: _delete_group(ctx, g, deadline))

    on_step("deleting key pair")

    def key_pairs() -> list[str]:
        with cloud_errors("listing key pairs"):
            found = owned_by(cluster, ec2.describe_key_pairs(Filters=cluster_filter(cluster))["KeyPairs"])
            if known.key_name:  # DeleteKeyPair succeeds for missing names: look the recorded one up first
                by_name = [{"Name": "key-name", "Values": [known.key_name]}]
                found += ec2.describe_key_pairs(Filters=by_name)["KeyPairs"]
        return list(dict.fromkeys(k["KeyName"] for k in found))

    for key_name in _listed(run, "key pair", key_pairs):
        run.delete(f"key pair {key_name}", lambda k=key_name: ec2.delete_key_pair(KeyName=k))

    on_step("deleting detached volumes")

    for volume_id in _listed(run, "volume", lambda: _detached_volumes(ctx, cluster)):
        run.delete(f"volume {volume_id}", lambda v=volume_id: ec2.delete_volume(VolumeId=v))
    if not keep_outputs:
        on_step("deleting the outputs bucket")
        outputs = _listed(run, "S3 bucket", lambda: list(filter(None, [bucket_of(ctx, cluster, known.outputs_bucket)])))
        for bucket in outputs:
            run.delete(f"S3 bucket {bucket}", lambda b=bucket: delete_bucket(ctx, b))
    return run


def leftovers(
    ctx: AwsContext, cluster: ClusterIdentity, known: CloudResources = CloudResources(), keep_outputs: bool = False
) -> list[Leftover]:
    """Everything of the cluster (tagged with it, or recorded in `known`) that costs money, blocks a new
    cluster of that name, or grants rights (the controller's IAM role and profile); the outputs bucket
    unless it is to be kept."""
    ec2 = ctx.client("ec2")
    with cloud_errors("checking for leftovers"):
        instances = {i.instance_id for i in cluster_instances(ctx, cluster)}
        instances |= {i.instance_id for i in describe(ctx, list(known.instance_ids)) if i.state in LIVE_STATES}
        found = [Leftover("instance", i) for i in sorted(instances)]
        found += [Leftover("fleet", f) for f in _live_fleets(ctx, known.fleet_ids)]
        templates = ec2.describe_launch_templates(Filters=cluster_filter(cluster))["LaunchTemplates"]
        found += [Leftover("launch template", t["LaunchTemplateId"]) for t in owned_by(cluster, templates)]
        found += [Leftover("security group", g) for g in cluster_security_groups(ctx, cluster)]
        key_pairs = ec2.describe_key_pairs(Filters=cluster_filter(cluster))["KeyPairs"]
        found += [Leftover("key pair", k["KeyName"]) for k in owned_by(cluster, key_pairs)]
    found += [Leftover("volume", v) for v in _detached_volumes(ctx, cluster)]
    bucket = "" if keep_outputs else bucket_of(ctx, cluster, known.outputs_bucket)
    found += [Leftover("S3 bucket", bucket)] if bucket else []
    return found + controller_leftovers(ctx, cluster)


def leftovers_named(ctx: AwsContext, name: str) -> list[Leftover]:
    """What is left of every cluster called `name`, whatever its id (the sweep after a `down NAME`)."""
    return [item for cluster in clusters_named(ctx, name) for item in leftovers(ctx, cluster)]


def _detached_volumes(ctx: AwsContext, cluster: ClusterIdentity) -> list[str]:
    """The cluster's volumes no instance holds: they bill until deleted (a node's own volumes go with it)."""
    with cloud_errors("listing volumes"):
        found = ctx.client("ec2").describe_volumes(
            Filters=[*cluster_filter(cluster), {"Name": "status", "Values": ["available"]}]
        )["Volumes"]
    return [v["VolumeId"] for v in owned_by(cluster, found)]


def clusters_named(ctx: AwsContext, name: str) -> list[ClusterIdentity]:
    """Every cluster called `name` that something in the region (or its IAM roles for the region) is tagged
    with, for `down NAME` without a record: one per id, and one without an id for a cluster made before
    ids. More than one means other users of the account (or lost records) have clusters of that name."""
    ec2 = ctx.client("ec2")
    by_name = [{"Name": f"tag:{CLUSTER_TAG}", "Values": [name]}]
    with cloud_errors(f"looking for clusters named {name}"):
        pages = ec2.get_paginator("describe_instances").paginate(Filters=by_name)
        tagged = [
            i
            for page in pages
            for r in page["Reservations"]
            for i in r["Instances"]
            if i["State"]["Name"] != "terminated"
        ]
        tagged += ec2.describe_launch_templates(Filters=by_name)["LaunchTemplates"]
        tagged += ec2.describe_security_groups(Filters=by_name)["SecurityGroups"]
        tagged += ec2.describe_key_pairs(Filters=by_name)["KeyPairs"]
    ids = [{t["Key"]: t["Value"] for t in item.get("Tags") or []}.get(CLUSTER_ID_TAG, "") for item in tagged]
    return list(dict.fromkeys([*(ClusterIdentity(name, i) for i in ids), *identities_in_iam(ctx, name)]))


def _listed(run: _Pass, kind: str, listing: Callable[[], list[str]]) -> list[str]:
    """What a listing found, or nothing (noted as a failure of that kind) when it failed."""
    found: list[str] = []
    run.attempt(kind, lambda: found.extend(listing()))
    return found


def _live_fleets(ctx: AwsContext, fleet_ids: tuple[str, ...]) -> list[str]:
    """The recorded fleets not yet deleted, asked for by id (the only way AWS shows an instant fleet)."""
    return [f for f, state in _fleet_states(ctx, fleet_ids).items() if state and not state.startswith("deleted")]


def _fleet_states(ctx: AwsContext, fleet_ids: tuple[str, ...]) -> dict[str, str]:
    """{fleet id: its FleetState, "" for one AWS no longer knows}. AWS keeps an ended instant fleet a while
    only (about two days): then DescribeFleets refuses its id (InvalidFleetId.NotFound) and every id asked
    with it, so the ids are asked one by one, and one refused alone is gone."""
    if not fleet_ids:
        return {}
    try:
        pages = ctx.client("ec2").get_paginator("describe_fleets").paginate(FleetIds=list(fleet_ids))
        fleets = {f["FleetId"]: str(f.get("FleetState") or "active") for page in pages for f in page["Fleets"]}
    except ClientError as exc:
        if not error_code(exc).startswith(("InvalidFleetId", "InvalidParameterValue")):
            raise CloudError(f"describing fleets: {_reason(exc)}") from exc
        if len(fleet_ids) == 1:
            return {fleet_ids[0]: ""}
        return {f: state for one in fleet_ids for f, state in _fleet_states(ctx, (one,)).items()}
    except BotoCoreError as exc:
        raise CloudError(f"describing fleets: {exc}") from exc
    return {f: fleets.get(f, "") for f in fleet_ids}


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
            raise CloudError(f"instances still shutting down: {', '.join(alive)}")
        time.sleep(1.0)


def _delete_group(ctx: AwsContext, group_id: str, deadline: float) -> None:
    """Delete a security group, retrying a while as terminated instances' interfaces let go of it."""
    until = min(deadline, time.monotonic() + _DEPENDENCY_WAIT_S)
    while True:
        try:
            ctx.client("ec2").delete_security_group(GroupId=group_id)
            return
        except ClientError as exc:
            if error_code(exc) != "DependencyViolation" or time.monotonic() > until:
                raise
        time.sleep(2.0)


def _reason(exc: BaseException) -> str:
    """A failure in one line: the cloud's error code and message, or deepvm's own."""
    if isinstance(exc, ClientError):
        return f"{error_code(exc)}: {exc.response.get('Error', {}).get('Message', '')}".rstrip(": ")
    return str(exc)
