"""`up` and `down` when the cloud fails: faults injected into the EC2 and IAM clients with botocore event
hooks, in front of a real moto server over HTTP.

An injected failure is raised where botocore would raise the cloud's error (before the request is sent,
so its own retries do not hide it); everything else reaches moto unchanged.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import replace

import pytest
from botocore.exceptions import ClientError

from provisioning.cloud.aws import teardown
from provisioning.cloud.aws.leftover import Leftover
from provisioning.cloud.aws.teardown import TeardownIncomplete, leftovers
from provisioning.cloud.keys import cluster_dir
from provisioning.clusters import lifecycle
from provisioning.clusters.handle import Cluster
from provisioning.clusters.lifecycle import UpRequest, up
from provisioning.clusters.store import Store
from provisioning.clusters.target import AwsTarget
from provisioning.core.errors import CloudError
from provisioning.core.home import deepvm_home
from tests.cloud.cloud_state import identity, left_of, named
from tests.cloud.plans import REGION, make_plan, make_tiering_plan

AMI = "ami-0000000000de3b0a1"


class Faults:
    """Records every EC2 and IAM call by operation name; fails those the test asks to fail."""

    def __init__(self, ctx) -> None:
        self.calls: list[str] = []
        self.failed: list[str] = []
        self.outage_s = 0.0  # how long the outage lasts once `start_outage_after` has succeeded
        self.start_outage_after = ""
        self.outage_until = 0.0
        self.always: dict[str, str] = {}  # operation -> error code it always fails with
        for service in ("ec2", "iam"):
            events = ctx.client(service).meta.events
            events.register(f"before-call.{service}", self._before)
            events.register(f"after-call.{service}", self._after)

    def _before(self, model, **kwargs) -> None:
        self.calls.append(model.name)
        code = self.always.get(model.name) or ("Unavailable" if time.monotonic() < self.outage_until else "")
        if code:
            self.failed.append(model.name)
            raise ClientError({"Error": {"Code": code, "Message": "injected"}}, model.name)

    def _after(self, model, **kwargs) -> None:
        if model.name == self.start_outage_after and not self.outage_until:
            self.outage_until = time.monotonic() + self.outage_s


@pytest.fixture
def aws(ctx, monkeypatch):
    """Every AWS call of the lifecycle goes through the test's clients, and so through its faults."""
    monkeypatch.setattr(AwsTarget, "context", lambda self, region, start=True: ctx)
    return Faults(ctx)


def _live(ctx) -> list[str]:
    reservations = ctx.client("ec2").describe_instances(
        Filters=[{"Name": "instance-state-name", "Values": ["pending", "running", "shutting-down", "stopped"]}]
    )["Reservations"]
    return [i["InstanceId"] for r in reservations for i in r["Instances"]]


def _recorded_fleets(ctx) -> list[dict]:
    """The cluster's fleets, by the ids its record keeps (AWS lists an instant fleet by its id only)."""
    return ctx.client("ec2").describe_fleets(FleetIds=list(Store().cluster("c1").resources.fleet_ids))["Fleets"]


def _states(ctx, instance_ids) -> set[str]:
    reservations = ctx.client("ec2").describe_instances(InstanceIds=list(instance_ids))["Reservations"]
    return {i["State"]["Name"] for r in reservations for i in r["Instances"]}


def test_up_failing_halfway_leaves_nothing_though_cleanup_meets_errors_too(ctx, aws, realism):
    # As on AWS, the new instances are missing from tag-filtered listings for the whole test, and instant
    # fleets from listings at all: the cleanup must work from the ids CreateFleet returned. EC2 and IAM
    # stop answering once the first of the Tiering plan's two fleets is launched: the second fleet fails,
    # and so does every call of the cleanup's first pass.
    realism.change(listing_lag_s=60)
    aws.start_outage_after, aws.outage_s = "CreateFleet", 2.0
    request = UpRequest(name="c1", plans=(make_tiering_plan(spot=2, holders=1),), image_id=AMI, wait_ssh=False)
    with pytest.raises(CloudError) as caught:
        up(AwsTarget(), request)
    assert str(caught.value) == "creating the EC2 Fleet for c5.xlarge: Unavailable: injected"
    assert aws.calls.count("CreateFleet") == 2 and aws.failed[0] == "CreateFleet"
    cleanup_failures = aws.failed[1:]
    assert {"DescribeInstances", "DescribeFleets", "DescribeLaunchTemplates", "DescribeKeyPairs"} <= set(
        cleanup_failures
    )
    assert "TerminateInstances" in aws.calls and "DeleteFleets" in aws.calls  # ...done on a later pass

    record = Store().cluster("c1").resources
    assert len(record.instance_ids) == 2 and len(record.fleet_ids) == 1  # the first fleet, as it answered
    assert _live(ctx) == [] and _states(ctx, record.instance_ids) == {"terminated"}  # though no listing showed them
    assert leftovers(ctx, identity("c1"), record) == []
    assert all(f["FleetState"].startswith("deleted") for f in _recorded_fleets(ctx))
    assert ctx.client("iam").list_roles()["Roles"] == []
    assert Store().cluster("c1").status == "failed"
    assert not (deepvm_home() / "clusters" / "c1").exists()


def test_down_removes_everything_it_can_and_names_what_is_left(ctx, aws, monkeypatch):
    monkeypatch.setattr(teardown, "_PASS_PAUSES_S", (0.0, 0.0))  # the refusal is for good: waiting changes nothing
    nodes = up(
        AwsTarget(), UpRequest(name="c1", plans=(make_plan(spot=2, on_demand=1),), image_id=AMI, wait_ssh=False)
    ).view.nodes
    group = ctx.client("ec2").describe_security_groups(GroupNames=[named()])["SecurityGroups"][0]["GroupId"]
    aws.always["DeleteSecurityGroup"] = "UnauthorizedOperation"  # this one resource cannot be deleted
    aws.calls.clear()

    with pytest.raises(TeardownIncomplete) as caught:
        lifecycle.down("c1")
    assert caught.value.left == (Leftover("security group", group),)
    first, *rest = str(caught.value).splitlines()
    assert first == (
        "cluster c1 is not fully deleted, 1 resource(s) left; run `deepvm down c1 --yes` again to retry, or by hand:"
    )
    assert rest == [
        f"  security group {group} (UnauthorizedOperation: injected): "
        f"aws ec2 delete-security-group --group-id {group} --region {REGION}"
    ]
    assert aws.failed.count("DeleteSecurityGroup") == 3  # tried on each of the three passes

    # every other resource is gone, instances terminated before their fleets were deleted
    assert aws.calls.index("TerminateInstances") < aws.calls.index("DeleteFleets")
    assert _live(ctx) == [] and {n.instance_id for n in nodes} <= set(_all_terminated(ctx))
    assert _recorded_fleets(ctx) and all(f["FleetState"].startswith("deleted") for f in _recorded_fleets(ctx))
    assert left_of(ctx, "c1") == [Leftover("security group", group)]
    iam = ctx.client("iam")
    assert iam.list_roles()["Roles"] == [] and iam.list_instance_profiles()["InstanceProfiles"] == []
    # the record and the local keys stay, for the retry
    assert Store().cluster("c1").status == "terminating" and cluster_dir("c1").exists()

    aws.always.clear()  # the permission arrives: the retry the message names finishes the job
    retry = lifecycle.down("c1")
    assert retry.deleted == [f"security group {group}"]
    assert left_of(ctx, "c1") == [] and Store().cluster("c1").status == "terminated"
    assert iam.list_roles()["Roles"] == []


def _all_terminated(ctx) -> list[str]:
    reservations = ctx.client("ec2").describe_instances(
        Filters=[{"Name": "instance-state-name", "Values": ["terminated"]}]
    )["Reservations"]
    return [i["InstanceId"] for r in reservations for i in r["Instances"]]


def test_down_finishes_once_aws_has_forgotten_the_clusters_fleets_and_instances(ctx, aws, realism):
    """AWS forgets an ended instant fleet (about two days after: DescribeFleets by its id answers
    InvalidFleetId.NotFound) and a terminated instance (about an hour after): `down` of a cluster whose nodes
    ended long ago (a head's autodown, Spot reclaims) finishes and says the fleets were gone already. Before,
    a fleet AWS no longer knew counted as live for ever, and `down` never finished (issue 37, finding 2)."""
    nodes = up(
        AwsTarget(), UpRequest(name="c1", plans=(make_plan(spot=2, on_demand=1),), image_id=AMI, wait_ssh=False)
    ).view.nodes
    fleets = Store().cluster("c1").resources.fleet_ids
    ctx.client("ec2").terminate_instances(InstanceIds=[n.instance_id for n in nodes])
    realism.change(forget_terminated_after_s=0, forget_fleets_after_s=0)
    with pytest.raises(ClientError) as forgotten:
        ctx.client("ec2").describe_fleets(FleetIds=list(fleets))
    assert forgotten.value.response["Error"]["Code"] == "InvalidFleetId.NotFound"

    result = lifecycle.down("c1")

    assert Store().cluster("c1").status == "terminated" and left_of(ctx, "c1") == []
    assert [line for line in result.deleted if "fleet" in line] == [f"fleet {f} (gone already)" for f in fleets]


def test_status_and_down_ask_aws_about_the_nodes_alive_not_every_node_ever(ctx, aws, realism):
    """A cluster that ran for weeks recorded every replacement it ever bought; AWS forgot the terminated ones
    an hour after, and each id it no longer knows costs a call of its own. The calls of `status` (refresh) and
    `down` are the same with 10 and with 100 such nodes recorded, and every recorded node is still listed."""
    realism.change(forget_terminated_after_s=0)
    calls: dict[int, tuple[Counter, Counter]] = {}
    for ever in (10, 100):
        name = f"c{ever}"
        plan = make_plan(spot=1, on_demand=1)
        nodes = up(AwsTarget(), UpRequest(name=name, plans=(plan,), image_id=AMI, wait_ssh=False)).view.nodes
        store = Store()
        gone = [replace(nodes[0], instance_id=f"i-{ever:03x}{k:014x}", state="terminated") for k in range(ever)]
        store.put_nodes(name, gone)
        resources = store.cluster(name).resources
        ids = (*resources.instance_ids, *(n.instance_id for n in gone))
        store.set_resources(name, replace(resources, instance_ids=ids))
        aws.calls.clear()
        assert Cluster.open_running(name).refresh()
        status = Counter(aws.calls)
        states = Counter(n.state for n in store.nodes(name))
        assert states == {"terminated": ever, "running": 2}  # status --json reads these: every node, its state
        aws.calls.clear()
        lifecycle.down(name)
        calls[ever] = (status, Counter(aws.calls))
    for op in ("DescribeInstances", "TerminateInstances"):
        assert [c[op] for c in calls[10]] == [c[op] for c in calls[100]], (op, calls)
