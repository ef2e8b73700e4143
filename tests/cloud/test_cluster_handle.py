"""The cluster handle (provisioning/clusters/handle.py) against the moto server: opened once, it answers
for a running cluster (nodes, logins, cost, environment), records the nodes the head's controller bought,
terminates a node it is told to retire, and may be used from a second thread."""

from __future__ import annotations

import threading
from dataclasses import replace

import pytest

from provisioning.cloud.names import CLUSTER_TAG, cluster_tags
from provisioning.cloud.progress import Reporter
from provisioning.cloud.types import CloudKind
from provisioning.clusters import lifecycle
from provisioning.clusters.handle import Cluster, running_clusters
from provisioning.clusters.lifecycle import UpRequest
from provisioning.clusters.store import ClusterStatus
from provisioning.clusters.target import AwsTarget
from provisioning.core.errors import InputError, NotFoundError
from provisioning.planner.plan import Role
from tests.cloud.plans import REGION, make_plan


@pytest.fixture
def cluster(ctx, ami) -> Cluster:
    """c1 up on the moto server: one on-demand anchor and two spot trainers (no SSH to wait for)."""
    request = UpRequest(name="c1", plans=(make_plan(spot=2, on_demand=1),), ssh_cidr="198.51.100.7/32",
                        image_id=ami, wait_ssh=False)  # fmt: skip
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
        ImageId=ami, InstanceType="g4dn.xlarge", MinCount=1, MaxCount=1,
        TagSpecifications=[{"ResourceType": "instance", "Tags": cluster_tags(cluster.row.identity)}],
    )["Instances"][0]["InstanceId"]  # fmt: skip
    assert bought not in {n.instance_id for n in cluster.nodes()}
    assert cluster.refresh()
    (adopted,) = [n for n in cluster.nodes() if n.instance_id == bought]
    assert adopted.role is Role.ANCHOR and adopted.usd_per_hour == make_plan().nodes[0].usd_per_hour


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
        cluster.add_nodes(Role.TRAINER, 1, timeout_s=1.0)
    live = ctx.client("ec2").describe_instances(Filters=[
        {"Name": f"tag:{CLUSTER_TAG}", "Values": ["c1"]},
        {"Name": "instance-state-name", "Values": ["pending", "running"]},
    ])["Reservations"]  # fmt: skip
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
def _mix_plan():
    """A --mix plan: an on-demand g4dn anchor, two spot g4dn trainers and one spot g5 trainer."""
    g4dn, g5 = make_plan(spot=2, on_demand=1), make_plan(spot=1, on_demand=0, instance_type="g5.xlarge")
    return replace(g4dn, nodes=(*g4dn.nodes, *g5.nodes), price_per_hour=g4dn.price_per_hour + g5.price_per_hour)


def _bought(cluster, **options) -> list[str]:
    steps: list[str] = []
    with pytest.raises(Exception):  # noqa: B017 - moto's console shows no host key: what matters is what it bought
        cluster.add_nodes(Role.TRAINER, 1, Reporter(step=steps.append), timeout_s=1.0, **options)
    return [s for s in steps if s.startswith("launching")]


def test_a_replacement_in_a_mixed_plan_is_of_the_type_that_was_lost(ctx, ami):
    lifecycle.up(AwsTarget(), UpRequest(name="c1", plans=(_mix_plan(),), ssh_cidr="198.51.100.7/32", image_id=ami,
                                        wait_ssh=False))  # fmt: skip
    cluster = Cluster.open_running("c1")
    # told the lost node's type (a g5 got its notice and still runs): a g5, not the plan's first trainer type
    assert _bought(cluster, instance_type="g5.xlarge") == ["launching 1 replacement spot g5.xlarge (trainer)"]
    # not told: the type the cluster is short of, once the lost g5 is gone
    lost = next(n.instance_id for n in cluster.nodes() if n.instance_type == "g5.xlarge" and n.state == "running")
    cluster.retire([lost], "interrupted")
    assert _bought(cluster) == ["launching 1 replacement spot g5.xlarge (trainer)"]
    with pytest.raises(InputError, match=r"cluster c1.s plan has no p3\.2xlarge trainer nodes to replace"):
        cluster.add_nodes(Role.TRAINER, 1, instance_type="p3.2xlarge")
