"""The user's side after a hand-over (training/control/handover.py, step 1): it finds the new head with no record
of the hand-over, by reading the cluster's nodes from the cloud (training.client.managed.head_of) and applying
head_node's rule. The cloud's answer is played by Cluster.refresh here (its own tests read moto)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from provisioning.catalog.model import Market
from provisioning.cloud.progress import Reporter
from provisioning.cloud.ssh import TransportError
from provisioning.cloud.types import CloudKind, CloudResources, HostSpec, NodeRecord
from provisioning.clusters import ended
from provisioning.clusters.handle import Cluster
from provisioning.clusters.store import ClusterRow, ClusterStatus, Store
from provisioning.planner.plan import Role
from tests.cloud.plans import make_tiering_plan
from training.client import managed
from training.client.managed import head_of
from training.control.handover import HANDING_OVER
from training.shared.jobstore import JobStatus
from training.shared.records import LogKind, LogRecord


def _node(instance_id: str, role: Role, market: Market, zone: str, minute: int, address: str) -> NodeRecord:
    return NodeRecord(
        instance_id,
        "c5.xlarge",
        market,
        role,
        zone,
        "running",
        address,
        address,
        0.17,
        launched_at=f"2026-11-25T10:{minute:02d}:00+00:00",
    )


OLD_HEAD = _node("i-h0000000", Role.HOLDER, Market.ON_DEMAND, "us-east-1a", 0, "127.0.0.2")
TRAINER = _node("i-t0000000", Role.TRAINER, Market.SPOT, "us-east-1a", 0, "127.0.0.3")
NEW_HEAD = _node("i-h0000001", Role.HOLDER, Market.ON_DEMAND, "us-east-1c", 9, "127.0.0.9")
NEW_TRAINER = _node("i-t0000001", Role.TRAINER, Market.SPOT, "us-east-1c", 8, "127.0.0.8")


def test_a_user_who_was_away_finds_the_new_head_once_the_cloud_says_the_old_one_is_gone(monkeypatch):
    store = Store()
    store.put_cluster(
        ClusterRow(
            "c1",
            CloudKind.SANDBOX,
            ClusterStatus.UP,
            make_tiering_plan(),
            "tok",
            CloudResources("k"),
            "root",
            "2026-11-25T10:00:00+00:00",
        )
    )
    store.put_nodes("c1", [OLD_HEAD, TRAINER])  # as this machine last saw the cluster, before the move
    asked = []

    def cloud_now(cluster: Cluster) -> bool:  # EC2 after the hand-over: the old zone gone, the new zone's adopted
        asked.append(cluster.name)
        store.put_nodes(
            "c1", [replace(OLD_HEAD, state="terminated"), replace(TRAINER, state="terminated"), NEW_TRAINER, NEW_HEAD]
        )
        return True

    monkeypatch.setattr(Cluster, "refresh", cloud_now)
    assert head_of(Cluster.open_running("c1"), "python3", refreshed=True).instance_id == OLD_HEAD.instance_id
    assert asked == []  # a caller that just read the cloud is not asked twice
    head = head_of(Cluster.open_running("c1"), "python3")
    assert asked == ["c1"] and (head.instance_id, head.host.address) == ("i-h0000001", "127.0.0.9")


@pytest.mark.parametrize(
    ("new_zone", "torn_down"), [("us-east-1c", False), ("us-east-1a", True)], ids=["handed-over", "died"]
)
def test_a_head_that_handed_control_over_is_no_dead_head_and_its_cluster_is_not_torn_down(
    monkeypatch, new_zone, torn_down
):
    """A cluster whose head is to take it down, and whose recorded head no longer runs: with a running head in
    another zone (the move's new head) it is left alone; with one of its own zone (a holder that was never
    handed the job: the head died) it is torn down as before (provisioning/clusters/ended.py)."""
    store = Store()
    store.put_cluster(
        ClusterRow(
            "c1",
            CloudKind.SANDBOX,
            ClusterStatus.UP,
            make_tiering_plan(),
            "tok",
            CloudResources("k", head_takes_down=True),
            "root",
            "2026-11-25T10:00:00+00:00",
        )
    )
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


def _head(instance_id: str) -> managed.Head:
    return managed.Head("c1", instance_id, HostSpec(instance_id, "127.0.0.9", Path("k"), Path("kh")), "python3")


def _note(text: str) -> LogRecord:
    return LogRecord(LogKind.NOTE, 1.0, text=text)


def test_a_follower_goes_on_on_the_new_head_from_the_last_line_the_two_logs_share(monkeypatch):
    """The old head's log: 2 lines, the hand-over's note, then its own last words; it stops answering. The
    follower finds the new head (the cloud names it on the second look) and reads on from line 3 there."""
    old, new = _head("i-h0000000"), _head("i-h0000001")
    shared = [_note("attempt 2: 3 trainers"), _note("ladder: move: ..."), _note(f"{HANDING_OVER} i-h0000001 in c")]
    logs = {
        old.instance_id: [*shared, _note("control passed to i-h0000001")],  # its own last words, then silence
        new.instance_id: [*shared, _note("took control from the previous head i-h0000000")],
    }  # the copy, on
    asked: list[tuple[str, int]] = []

    def follow(head, job_id, on_record, start=0, tail=None, keep_following=True):
        asked.append((head.instance_id, start))
        for record in logs[head.instance_id][start:]:
            on_record(record)
        if head is old:
            raise TransportError("i-h0000000: reading the job's log failed: exit 255")
        return managed.FollowEnd(JobStatus.COMPLETED, "completed", start + 1)

    heads = iter([old, new])
    monkeypatch.setattr(managed, "follow", follow)
    monkeypatch.setattr(managed, "find_head", lambda cluster, python: next(heads))
    monkeypatch.setattr(managed, "_NEW_HEAD_POLL_S", 0.0)
    shown: list[str] = []
    end, head = managed.follow_across(old, "job-1", lambda r: shown.append(r.text))
    assert asked == [("i-h0000000", 0), ("i-h0000001", 3)] and head is new and end.status is JobStatus.COMPLETED
    assert shown[-1].startswith("took control") and len(shown) == 5  # nothing twice, nothing skipped


def test_a_head_that_stops_answering_without_a_hand_over_is_a_failure_as_before(monkeypatch):
    def follow(head, job_id, on_record, start=0, tail=None, keep_following=True):
        on_record(_note("attempt 1: 3 trainers"))
        raise TransportError("i-h0000000: reading the job's log failed: exit 255")

    monkeypatch.setattr(managed, "follow", follow)
    with pytest.raises(TransportError, match="exit 255"):
        managed.follow_across(_head("i-h0000000"), "job-1", lambda r: None)


def test_a_follower_begun_at_the_logs_tail_goes_on_on_the_new_head_after_the_shared_note(monkeypatch):
    """`deepvm logs JOB -f --tail 1`: the old head's log is read from its last line, so the note's line number is
    not known here; the new head's log is read from its first line and shown from the line after the same note."""
    old, new = _head("i-h0000000"), _head("i-h0000001")
    shared = [_note("attempt 2: 3 trainers"), _note("ladder: move: ..."), _note(f"{HANDING_OVER} i-h0000001 in c")]
    logs = {
        old.instance_id: [*shared, _note("control passed to i-h0000001")],
        new.instance_id: [*shared, _note("took control from the previous head i-h0000000")],
    }
    asked: list[tuple[str, int, int | None]] = []

    def follow(head, job_id, on_record, start=0, tail=None, keep_following=True):
        asked.append((head.instance_id, start, tail))
        lines = logs[head.instance_id]
        for record in lines[len(lines) - tail if tail is not None else start :][: 2 if head is old else None]:
            on_record(record)
        if head is old:  # the tail's line, the note; then it stops answering
            raise TransportError("i-h0000000: reading the job's log failed: exit -1")
        return managed.FollowEnd(JobStatus.COMPLETED, "completed", len(lines))

    heads = iter([old, new])
    monkeypatch.setattr(managed, "follow", follow)
    monkeypatch.setattr(managed, "find_head", lambda cluster, python: next(heads))
    monkeypatch.setattr(managed, "_NEW_HEAD_POLL_S", 0.0)
    shown: list[str] = []
    end, head = managed.follow_across(old, "job-1", lambda r: shown.append(r.text), tail=3)
    assert asked == [("i-h0000000", 0, 3), ("i-h0000001", 0, None)]
    assert head is new and end.status is JobStatus.COMPLETED
    assert shown == [
        "ladder: move: ...",
        f"{HANDING_OVER} i-h0000001 in c",
        "took control from the previous head i-h0000000",
    ]  # nothing twice, nothing skipped
