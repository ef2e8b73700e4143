"""The head's autodown against a moto server (training/head/autodown.py), in this process on a real state store:
what EC2 refuses is said and tried one by one, the end is recorded whatever happens, and the head ends itself
last, by its OS when its own TerminateInstances is refused (issue 37: before, any refusal of a batch raised out
of take_down before the record and the head's end, and the whole cluster kept billing)."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from provisioning.catalog.model import Market
from provisioning.cloud.names import ClusterIdentity, tag_spec
from provisioning.cloud.types import CloudKind, CloudResources, NodeRecord
from provisioning.clusters.ended import END_KEY, ClusterEnd, Finished
from provisioning.clusters.store import ClusterRow, ClusterStatus, Store
from provisioning.planner.plan import Role
from tests.cloud.plans import REGION, make_plan
from training.head.autodown import Autodown, take_down
from training.head.notify import Notifier
from training.shared.guard import NotifyTarget

BUCKET = "c1-outputs"
IDENTITY = ClusterIdentity("c1", "0badcafe")


class Head:
    """One cluster's head store and instances in moto: a head, two trainers, and what take_down said and did."""

    def __init__(self, ctx, ami: str) -> None:
        self.ec2 = ctx.client("ec2")
        ctx.client("s3").create_bucket(Bucket=BUCKET)
        self.s3 = ctx.client("s3")
        self.ami = ami
        self.head, self.a, self.b = self._launch(3)
        self.said: list[str] = []
        self.powered_off: list[bool] = []
        store = Store()
        plan = make_plan()
        store.put_cluster(
            ClusterRow(
                "c1",
                CloudKind.AWS,
                ClusterStatus.UP,
                plan,
                "tok",
                CloudResources("k", outputs_bucket=BUCKET),
                "root",
                datetime.now(timezone.utc).isoformat(),
                cluster_id=IDENTITY.cluster_id,
            )
        )
        store.put_nodes("c1", [self._node(self.head, Role.ANCHOR), self._node(self.a), self._node(self.b)])

    def _launch(self, count: int, tagged: bool = True) -> list[str]:
        tags = {"TagSpecifications": [tag_spec("instance", IDENTITY)]} if tagged else {}
        ran = self.ec2.run_instances(ImageId=self.ami, MinCount=count, MaxCount=count, **tags)
        return [i["InstanceId"] for i in ran["Instances"]]

    def _node(self, instance_id: str, role: Role = Role.TRAINER) -> NodeRecord:
        market = Market.ON_DEMAND if role is Role.ANCHOR else Market.SPOT
        at = datetime.now(timezone.utc).isoformat()
        return NodeRecord(instance_id, "g4dn.xlarge", market, role, f"{REGION}a", "running", "10.0.0.1", None, 0.2, at)

    def take_down(self) -> None:
        notifier = Notifier(NotifyTarget(), b"", "job-1", "c1", self.said.append)
        take_down(
            Autodown("c1", "job job-1 completed", "job-1", BUCKET),
            self.said.append,
            notifier,
            settle_s=0.0,
            shut_down=lambda emulated, say: self.powered_off.append(emulated),
        )

    def state(self, instance_id: str) -> str:
        answer = self.ec2.describe_instances(InstanceIds=[instance_id])
        return answer["Reservations"][0]["Instances"][0]["State"]["Name"]

    def end(self) -> ClusterEnd:
        return ClusterEnd.from_json(self.s3.get_object(Bucket=BUCKET, Key=END_KEY)["Body"].read().decode())


@pytest.fixture
def head(moto, ctx, tmp_path, monkeypatch, ami):
    monkeypatch.setenv("DEEPVM_HOME", str(tmp_path / "home"))
    return Head(ctx, ami)


def test_only_the_recorded_instances_ec2_shows_live_and_the_clusters_are_terminated(head):
    stranger = head._launch(1, tagged=False)[0]  # an id the store lists that is not the cluster's (a mix-up)
    gone = head._launch(1)[0]
    head.ec2.terminate_instances(InstanceIds=[gone])
    store = Store()
    store.put_nodes("c1", [head._node(stranger), head._node(gone)])

    head.take_down()

    assert {head.state(i) for i in (head.a, head.b, head.head)} == {"terminated"}
    assert head.state(stranger) == "running"  # the head's role could not terminate it: never asked
    said = "\n".join(head.said)
    assert stranger not in said and gone not in said, said
    assert head.end().left_running == () and head.powered_off == []
    assert store.cluster("c1").status is ClusterStatus.TERMINATED


def test_a_refused_termination_is_tried_one_by_one_recorded_and_the_head_powers_itself_off(head, realism):
    realism.change(refused_actions=("ec2:TerminateInstances",))

    head.take_down()  # returns: nothing raised out of it

    said = "\n".join(head.said)
    assert "one by one" in said and f"could not terminate {head.a}" in said and f"could not terminate {head.b}" in said
    end = head.end()  # written although every termination was refused
    assert end.left_running == tuple(sorted((head.a, head.b))) and end.reason == "job job-1 completed"
    assert f"could not terminate the head {head.head}" in said
    assert head.powered_off == [True]  # the emulated endpoint: the sandbox host's init, never this machine's
    assert Store().cluster("c1").status is ClusterStatus.TERMINATED
    line = Finished("c1", end, ("fleets",), BUCKET).lines()[0]
    assert f"its head could not terminate {', '.join(sorted((head.a, head.b)))}: terminated here" in line
