"""The user's side after a hand-over (training/control/handover.py, step 1): it finds the new head with no record
of the hand-over, by reading the cluster's nodes from the cloud (training.client.managed.head_of) and applying
head_node's rule. The cloud's answer is played by Cluster.refresh here (its own tests read moto)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from provisioning.catalog.model import Market
from provisioning.cloud.progress import Reporter
from provisioning.cloud.types import CloudKind, CloudResources, NodeRecord
from provisioning.clusters import ended
from provisioning.clusters.handle import Cluster
from provisioning.clusters.store import ClusterRow, ClusterStatus, Store
from provisioning.planner.plan import Role
from tests.cloud.plans import make_tiering_plan
from training.client.managed import head_of


def _node(instance_id: str, role: Role, market: Market, zone: str, minute: int, address: str) -> NodeRecord:
    return NodeRecord(instance_id, "c5.xlarge", market, role, zone, "running", address, address, 0.17,
                      launched_at=f"2026-11-25T10:{minute:02d}:00+00:00")  # fmt: skip


OLD_HEAD = _node("i-h0000000", Role.HOLDER, Market.ON_DEMAND, "us-east-1a", 0, "127.0.0.2")
TRAINER = _node("i-t0000000", Role.TRAINER, Market.SPOT, "us-east-1a", 0, "127.0.0.3")
NEW_HEAD = _node("i-h0000001", Role.HOLDER, Market.ON_DEMAND, "us-east-1c", 9, "127.0.0.9")
NEW_TRAINER = _node("i-t0000001", Role.TRAINER, Market.SPOT, "us-east-1c", 8, "127.0.0.8")


def test_a_user_who_was_away_finds_the_new_head_once_the_cloud_says_the_old_one_is_gone(monkeypatch):
    store = Store()
    store.put_cluster(ClusterRow("c1", CloudKind.SANDBOX, ClusterStatus.UP, make_tiering_plan(), "tok",
                                 CloudResources("k"), "root", "2026-11-25T10:00:00+00:00"))  # fmt: skip
    store.put_nodes("c1", [OLD_HEAD, TRAINER])  # as this machine last saw the cluster, before the move
    asked = []

    def cloud_now(cluster: Cluster) -> bool:  # EC2 after the hand-over: the old zone gone, the new zone's adopted
        asked.append(cluster.name)
        store.put_nodes("c1", [replace(OLD_HEAD, state="terminated"), replace(TRAINER, state="terminated"),
                               NEW_TRAINER, NEW_HEAD])  # fmt: skip
        return True

    monkeypatch.setattr(Cluster, "refresh", cloud_now)
    assert head_of(Cluster.open_running("c1"), "python3", refreshed=True).instance_id == OLD_HEAD.instance_id
    assert asked == []  # a caller that just read the cloud is not asked twice
    head = head_of(Cluster.open_running("c1"), "python3")
    assert asked == ["c1"] and (head.instance_id, head.host.address) == ("i-h0000001", "127.0.0.9")


@pytest.mark.parametrize(("new_zone", "torn_down"), [("us-east-1c", False), ("us-east-1a", True)],
                         ids=["handed-over", "died"])  # fmt: skip
def test_a_head_that_handed_control_over_is_no_dead_head_and_its_cluster_is_not_torn_down(monkeypatch, new_zone,
                                                                                          torn_down):  # fmt: skip
    """A cluster whose head is to take it down, and whose recorded head no longer runs: with a running head in
    another zone (the move's new head) it is left alone; with one of its own zone (a holder that was never
    handed the job: the head died) it is torn down as before (provisioning/clusters/ended.py)."""
    store = Store()
    store.put_cluster(ClusterRow("c1", CloudKind.SANDBOX, ClusterStatus.UP, make_tiering_plan(), "tok",
                                 CloudResources("k", head_takes_down=True), "root", "2026-11-25T10:00:00+00:00"))
    store.put_nodes("c1", [OLD_HEAD, TRAINER])
    other = replace(NEW_HEAD, availability_zone=new_zone, launched_at="2026-11-25T10:09:00+00:00")

    def cloud_now(cluster: Cluster) -> bool:
        store.put_nodes("c1", [replace(OLD_HEAD, state="terminated"), replace(TRAINER, state="terminated"), other])
        return True

    downs = []
    monkeypatch.setattr(Cluster, "refresh", cloud_now)
    monkeypatch.setattr(ended, "_alive", lambda ctx, instance_id: instance_id != OLD_HEAD.instance_id)
    monkeypatch.setattr(ended, "finish_down", lambda row, *_: downs.append(row.name) or ["the rest"])
    found = ended._finish(object(), store, store.cluster("c1"), Reporter())
    assert (found is not None, downs) == (torn_down, ["c1"] if torn_down else [])
