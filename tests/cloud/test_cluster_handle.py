"""The cluster handle (provisioning/clusters/handle.py) against the moto server: opened once, it answers
for a running cluster (nodes, logins, cost, environment), records the nodes the head's controller bought,
terminates a node it is told to retire, and may be used from a second thread."""

from __future__ import annotations

import threading

import pytest

from provisioning.catalog.model import Market
from provisioning.cloud.names import CLUSTER_TAG, PRICE_TAG, ROLE_TAG, cluster_tags
from provisioning.cloud.progress import Reporter
from provisioning.cloud.types import CloudKind
from provisioning.clusters import handle as cluster_module
from provisioning.clusters import lifecycle
from provisioning.clusters.handle import Cluster, running_clusters
from provisioning.clusters.lifecycle import UpRequest
from provisioning.clusters.store import ClusterStatus
from provisioning.clusters.target import AwsTarget
from provisioning.core.errors import CloudError, NotFoundError
from provisioning.planner.plan import NodeGroup, Role
from tests.cloud.plans import REGION, make_plan


@pytest.fixture
def cluster(ctx, ami) -> Cluster:
    """c1 up on the moto server: one on-demand anchor and two spot trainers (no SSH to wait for)."""
    request = UpRequest(
        name="c1", plans=(make_plan(spot=2, on_demand=1),), ssh_cidr="198.51.100.7/32", image_id=ami, wait_ssh=False
    )
    lifecycle.up(AwsTarget(), request)
    return Cluster.open_running("c1")


def test_a_running_cluster_answers_from_one_handle(cluster):
    assert cluster.is_up and cluster.banner == "" and cluster.target.kind is CloudKind.AWS
    assert cluster.node_python == "python3"  # the Deep Learning AMI's
    assert running_clusters() == ["c1"]
    logins = cluster.endpoints()
    assert sorted(e.role for e in logins) == [Role.ANCHOR, Role.TRAINER, Role.TRAINER]
    assert {e.host.name.split("-")[0] for e in logins} == {"anchor", "trainer"}
    assert all(e.host.known_hosts == cluster.keys.known_hosts_path for e in logins)
    assert cluster.node_env() == {"AWS_DEFAULT_REGION": REGION}
    assert cluster.cost().usd >= 0.0
    view = cluster.view(refresh=True)
    assert view.refreshed and [n.state for n in view.nodes] == ["running"] * 3


def test_open_running_names_what_to_run(ctx):
    expected = r"^no running cluster named 'c9'; there are no clusters yet; start it with `deepvm up --name c9`$"
    with pytest.raises(NotFoundError, match=expected):
        Cluster.open_running("c9")
    assert Cluster.find("c9") is None


def test_refresh_records_a_node_the_head_bought(cluster, ctx, ami):
    bought = ctx.client("ec2").run_instances(
        ImageId=ami,
        InstanceType="g4dn.xlarge",
        MinCount=1,
        MaxCount=1,
        TagSpecifications=[{"ResourceType": "instance", "Tags": cluster_tags(cluster.row.identity)}],
    )["Instances"][0]["InstanceId"]
    assert bought not in {n.instance_id for n in cluster.nodes()}
    assert cluster.refresh()
    (adopted,) = [n for n in cluster.nodes() if n.instance_id == bought]
    assert adopted.role is Role.ANCHOR and adopted.usd_per_hour == make_plan().nodes[0].usd_per_hour


def test_a_node_bought_as_another_type_is_adopted_with_the_role_and_price_it_was_bought_for(cluster, ctx, ami):
    """The head's ladder buys types the plan lacks (a repair) and on-demand trainers (stand-ins): their tags,
    not the plan, say what they are; a node whose tags are not deepvm's own reading is left to the plan."""
    tags = cluster_tags(cluster.row.identity, **{ROLE_TAG: "trainer", PRICE_TAG: "0.331600"})
    ec2 = ctx.client("ec2")
    repair = ec2.run_instances(
        ImageId=ami,
        InstanceType="g6.xlarge",
        MinCount=1,
        MaxCount=1,
        TagSpecifications=[{"ResourceType": "instance", "Tags": tags}],
    )["Instances"][0]
    edited = cluster_tags(cluster.row.identity, **{ROLE_TAG: "captain", PRICE_TAG: "x"})
    odd = ec2.run_instances(
        ImageId=ami,
        InstanceType="p3.2xlarge",
        MinCount=1,
        MaxCount=1,
        TagSpecifications=[{"ResourceType": "instance", "Tags": edited}],
    )["Instances"][0]
    assert cluster.refresh()
    nodes = {n.instance_id: n for n in cluster.nodes()}
    adopted = nodes[repair["InstanceId"]]
    assert (adopted.instance_type, adopted.role, adopted.usd_per_hour) == ("g6.xlarge", Role.TRAINER, 0.3316)
    assert odd["InstanceId"] not in nodes  # no group of its type and market, no readable tags: not a node


def test_retire_terminates_the_node_and_ends_its_cost_from_another_thread(cluster, ctx):
    victim = next(e.instance_id for e in cluster.endpoints() if e.role is Role.TRAINER)
    failed: list[BaseException] = []

    def retire() -> None:  # the controller retires nodes on its main thread while a buyer thread runs
        try:
            cluster.retire([victim], "hangs")
        except BaseException as exc:
            failed.append(exc)

    worker = threading.Thread(target=retire)
    worker.start()
    worker.join()
    assert failed == []
    state = ctx.client("ec2").describe_instances(InstanceIds=[victim])["Reservations"][0]["Instances"][0]["State"]
    assert state["Name"] in ("shutting-down", "terminated")
    assert victim not in {e.instance_id for e in cluster.endpoints()}
    assert cluster.row.status is ClusterStatus.UP


def test_a_torn_down_cluster_is_left_alone(cluster, ctx):
    lifecycle.down("c1")
    victim = cluster.nodes()[0].instance_id
    cluster.retire([victim], "too late")  # nothing of it runs: no call, no error
    assert cluster.row.status is ClusterStatus.TERMINATED and not cluster.is_up
    assert running_clusters() == []


def test_a_replacement_that_never_becomes_usable_is_terminated(cluster, ctx):
    """Bought, running, but its host key never shows (moto's console prints none): `add_nodes` fails, and
    the instance it bought does not go on billing until `down`."""
    before = {n.instance_id for n in cluster.nodes()}
    with pytest.raises(Exception):  # noqa: B017 - whichever wait gives up first; the point is what is left
        cluster.add_nodes(NodeGroup("g4dn.xlarge", Market.SPOT, 1, Role.TRAINER, 0.2), timeout_s=1.0)
    live = ctx.client("ec2").describe_instances(
        Filters=[
            {"Name": f"tag:{CLUSTER_TAG}", "Values": ["c1"]},
            {"Name": "instance-state-name", "Values": ["pending", "running"]},
        ]
    )["Reservations"]
    running = {i["InstanceId"] for r in live for i in r["Instances"]}
    assert running <= before  # the replacement was terminated; the cluster's own nodes still run
    assert len(running) == 3


def test_terminating_instances_is_idempotent(cluster, ctx):
    """The provider's terminate_instances may be called twice, and with an id EC2 no longer knows, as the
    contract promises (a controller retiring a node races `down` and a second retire)."""
    from provisioning.cloud.aws.provider import terminate_instances

    victim = next(e.instance_id for e in cluster.endpoints() if e.role is Role.TRAINER)
    first = terminate_instances(ctx, [victim])
    again = terminate_instances(ctx, [victim])
    assert first[victim] in ("shutting-down", "terminated") and again[victim] in ("shutting-down", "terminated")
    gone = "i-0123456789abcdef0"  # never existed: InvalidInstanceID.NotFound for the whole call
    other = next(e.instance_id for e in cluster.endpoints() if e.role is Role.TRAINER and e.instance_id != victim)
    both = terminate_instances(ctx, [gone, other])
    assert both == {gone: "terminated", other: both[other]} and both[other] in ("shutting-down", "terminated")
    state = ctx.client("ec2").describe_instances(InstanceIds=[other])["Reservations"][0]["Instances"][0]["State"]
    assert state["Name"] in ("shutting-down", "terminated")


def _bought(cluster, group: NodeGroup, **options) -> list[str]:
    steps: list[str] = []
    with pytest.raises(Exception):  # noqa: B017 - moto's console shows no host key: what matters is what it bought
        cluster.add_nodes(group, Reporter(step=steps.append), timeout_s=1.0, **options)
    return [s for s in steps if s.startswith("launching")]


def test_a_node_of_another_type_and_zone_is_bought_in_that_zones_subnet_with_its_role_and_price(
    cluster, ctx, monkeypatch
):
    """What the ladder orders (a repair of a type the plan lacks; a zone of the region other than the cluster's)
    is what EC2 is asked for: in the subnet `up` recorded for that zone, tagged with the role and price."""
    monkeypatch.setattr(cluster_module, "pin_nodes", lambda *args, **kwargs: cluster.keys)
    monkeypatch.setattr(cluster_module, "wait_reachable", lambda *args, **kwargs: None)
    other_zone = next(z for z in ("us-east-1b", "us-east-1c") if z != cluster.row.availability_zone)
    repair = NodeGroup("g6.xlarge", Market.SPOT, 1, Role.TRAINER, 0.3316)
    (added,) = cluster.add_nodes(repair, zone=other_zone)
    assert (added.instance_type, added.market, added.availability_zone) == ("g6.xlarge", Market.SPOT, other_zone)
    raw = ctx.client("ec2").describe_instances(InstanceIds=[added.instance_id])["Reservations"][0]["Instances"][0]
    subnet = ctx.client("ec2").describe_subnets(SubnetIds=[raw["SubnetId"]])["Subnets"][0]
    assert subnet["AvailabilityZone"] == other_zone and subnet["VpcId"] == raw["VpcId"]
    tags = {t["Key"]: t["Value"] for t in raw["Tags"]}
    assert (tags[ROLE_TAG], float(tags[PRICE_TAG])) == ("trainer", 0.3316)
    again = Cluster.open_running("c1")
    again.refresh()
    (kept,) = [n for n in again.nodes() if n.instance_id == added.instance_id]
    assert (kept.role, kept.usd_per_hour) == (Role.TRAINER, 0.3316)


def test_a_zone_up_found_no_subnet_in_is_refused_before_anything_is_bought(cluster):
    with pytest.raises(CloudError, match=r"the cluster's VPC has no subnet recorded in us-west-2a"):
        cluster.add_nodes(NodeGroup("g4dn.xlarge", Market.SPOT, 1, Role.TRAINER, 0.2), zone="us-west-2a")
    assert _bought(cluster, NodeGroup("g4dn.xlarge", Market.SPOT, 2, Role.TRAINER, 0.2)) == [
        f"launching 2 spot g4dn.xlarge (trainer) in {cluster.row.availability_zone}"
    ]
