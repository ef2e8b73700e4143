"""The node pool (training/control/nodepool.py): its transition table walked edge by edge, and what it asks
the controller to do after what it was told. Pure: no SSH, no cloud."""

from __future__ import annotations

import itertools

import pytest

from provisioning.catalog.model import Market
from provisioning.cloud.types import SshEndpoint
from provisioning.planner.plan import Role
from training.control.nodepool import (
    TRANSITIONS,
    InvalidTransition,
    NodePool,
    NodeStatus,
    Retire,
    check_move,
)
from training.shared.events import NoticeKind

EDGES = [(a, b) for a, b in itertools.product(NodeStatus, NodeStatus)]


def _endpoint(instance_id: str, role: Role = Role.TRAINER) -> SshEndpoint:
    market = Market.SPOT if role is Role.TRAINER else Market.ON_DEMAND
    return SshEndpoint(instance_id, "127.0.0.1", "10.0.0.1", 22, "root", role, market, "/k", "/kh")


def _pool(trainers: int = 3, holders: int = 1, planned_trainers: int = 3) -> NodePool:
    nodes = [_endpoint(f"i-t{n}") for n in range(trainers)]
    nodes += [_endpoint(f"i-h{n}", Role.HOLDER) for n in range(holders)]
    pool = NodePool({Role.TRAINER: planned_trainers, Role.HOLDER: 1}, nodes)
    for e in nodes:
        pool.prepared(e.instance_id, "/root", None, at=1.0)
    return pool


@pytest.mark.parametrize(("start", "to"), EDGES, ids=[f"{a}->{b}" for a, b in EDGES])
def test_every_edge_of_the_table_is_allowed_and_every_other_move_raises(start, to):
    if to in TRANSITIONS[start]:
        check_move(start, to)
    else:
        with pytest.raises(InvalidTransition, match=f"{start} -> {to} is not a move"):
            check_move(start, to)


def test_every_state_is_in_the_table_and_only_retired_and_gone_are_final():
    assert set(TRANSITIONS) == set(NodeStatus)
    assert {s for s, moves in TRANSITIONS.items() if not moves} == {NodeStatus.RETIRED, NodeStatus.GONE}
    for state in set(NodeStatus) - {NodeStatus.RETIRED, NodeStatus.GONE}:  # nothing is stuck billing
        assert NodeStatus.GONE in TRANSITIONS[state] and TRANSITIONS[state] - {state}


def test_a_move_the_table_lacks_raises_through_an_observation():
    pool = _pool()
    pool.noticed("i-t0", "instance-action")
    with pytest.raises(InvalidTransition):
        pool.at_risk("i-t0", "a stand-in: Spot is back")  # a noticed node is leaving already


def test_new_nodes_become_ready_once_prepared_and_a_notice_found_there_keeps_them_out():
    pool = NodePool({Role.TRAINER: 2}, [_endpoint("i-1"), _endpoint("i-2")])
    assert [s.status for s in pool.slots.values()] == [NodeStatus.NEW, NodeStatus.NEW] and pool.usable() == []
    pool.prepared("i-1", "/root", None, at=1.0)
    pool.prepared("i-2", "/root", "instance-action", at=1.0)
    assert [s.instance_id for s in pool.usable()] == ["i-1"] and pool.slots["i-1"].home == "/root"
    assert pool.excluded() == {"i-2": "interruption notice (instance-action)"}
    assert pool.step() == []  # a noticed node is the cloud's to take: nothing to retire


def test_a_notice_excludes_a_node_once():
    pool = _pool()
    assert pool.noticed("i-t1", "instance-action") and not pool.noticed("i-t1", "instance-action")
    assert pool.step() == []  # the cloud takes it; what to buy is the recovery ladder's (training.control.market)
    assert [s.instance_id for s in pool.usable()] == ["i-t0", "i-t2", "i-h0"]


def test_a_lost_node_is_retired_once():
    pool = _pool()
    pool.lost("i-t2", "unreachable over SSH after the job failed")
    assert pool.step() == [Retire(("i-t2",), "unreachable over SSH after the job failed")]
    pool.retired(["i-t2"])
    assert pool.slots["i-t2"].status is NodeStatus.RETIRED and pool.step() == []
    pool.lost("i-t2", "again")  # what is gone stays gone
    assert pool.slots["i-t2"].status is NodeStatus.RETIRED


def test_bought_nodes_join_once_prepared_or_are_retired_when_their_preparing_failed():
    pool = _pool(trainers=1)
    pool.bought([_endpoint("i-new1"), _endpoint("i-new2")])
    assert pool.slots["i-new1"].status is NodeStatus.BOUGHT
    assert "i-new1" not in [s.instance_id for s in pool.joinable() + pool.usable()]
    pool.prepared("i-new1", "/root", None, at=5.0)
    pool.lost("i-new2", "replacement failed: setup failed")
    assert [s.instance_id for s in pool.joinable()] == ["i-t0", "i-h0", "i-new1"]  # no attempt runs
    assert pool.step() == [Retire(("i-new2",), "replacement failed: setup failed")]


def test_only_nodes_that_have_not_answered_since_the_last_launch_are_asked_again():
    pool = _pool()
    assert pool.stale() == []  # before any attempt: preparing is the check
    pool.launched(["i-t0", "i-t1", "i-h0"], at=5.0)
    assert [s.instance_id for s in pool.joinable()] == ["i-t2"]
    pool.attempt_ended(clean=True, at=10.0)
    assert [s.instance_id for s in pool.stale()] == ["i-t2"]  # it ran nothing: it may have died meanwhile
    pool.launched(["i-t0", "i-t1", "i-t2", "i-h0"], at=15.0)
    pool.bought([_endpoint("i-t3")])
    pool.prepared("i-t3", "/root", None, at=16.0)  # a replacement prepared while the attempt ran
    pool.attempt_ended(clean=False, at=20.0)  # failed: nobody of it answered for sure
    assert [s.instance_id for s in pool.stale()] == ["i-t0", "i-t1", "i-t2", "i-h0"]
    pool.answered(["i-t0", "i-h0"], at=21.0)  # the probe after the failure
    assert [s.instance_id for s in pool.stale()] == ["i-t1", "i-t2"]


def test_the_running_nodes_of_the_cluster_are_synced_and_a_node_no_longer_running_is_gone():
    pool = _pool()
    moved = SshEndpoint("i-t0", "127.0.0.9", "10.0.0.9", 22, "root", Role.TRAINER, Market.SPOT, "/k", "/kh")
    pool.sync([moved, _endpoint("i-t1"), _endpoint("i-h0"), _endpoint("i-someone-elses")])
    assert pool.slots["i-t0"].endpoint.address == "127.0.0.9" and "i-someone-elses" not in pool.slots
    assert pool.slots["i-t2"].status is NodeStatus.GONE and pool.step() == []


def test_a_rebalance_recommendation_moves_no_node_and_buys_nothing():
    """Issue 21 item 3: the node stays usable and firm, during an attempt and when found before a launch."""
    pool = _pool(trainers=2)
    assert pool.noticed("i-t1", NoticeKind.REBALANCE) is False
    assert pool.slots["i-t1"].status is NodeStatus.READY and pool.slots["i-t1"].recommended
    assert pool.step() == [] and pool.slots["i-t1"] in pool.usable()  # held: the ladder buys nothing for it
    pool.bought([_endpoint("i-t3")])
    assert pool.prepared("i-t3", "/root", NoticeKind.REBALANCE, at=2.0) is False
    assert pool.slots["i-t3"].status is NodeStatus.READY and pool.excluded() == {}
    assert pool.noticed("i-t3", NoticeKind.INTERRUPTION) is True and set(pool.excluded()) == {"i-t3"}


def test_a_node_at_risk_trains_until_its_replacement_is_ready_and_is_then_retired():
    """Room for an on-demand stand-in once Spot is back (and a zone move): the node keeps training, does not
    count as firm (so it is replaced), drains once its role is whole without it, and is retired once no
    attempt runs on it. Nothing it bought is left billing."""
    pool = _pool()
    pool.launched(["i-t0", "i-t1", "i-t2", "i-h0"], at=2.0)
    pool.at_risk("i-t1", "a stand-in: Spot is back")
    assert "i-t1" in [s.instance_id for s in pool.usable()]  # still trains
    assert pool.step() == []  # not drained: its role is not whole without it
    assert pool.slots["i-t1"].status is NodeStatus.AT_RISK
    pool.bought([_endpoint("i-t3")])  # its replacement (the ladder counts an at-risk node as not held)
    pool.prepared("i-t3", "/root", None, at=3.0)
    assert pool.step() == []  # drained, but the running attempt still has it
    assert pool.slots["i-t1"].status is NodeStatus.DRAINING
    assert "i-t1" not in [s.instance_id for s in pool.usable()]  # the next launch leaves it out
    pool.attempt_ended(clean=True, at=4.0)
    assert pool.step() == [Retire(("i-t1",), "a stand-in: Spot is back")]
    pool.retired(["i-t1"])
    assert pool.slots["i-t1"].status is NodeStatus.RETIRED


def test_a_node_at_risk_whose_interruption_comes_first_is_left_to_the_cloud():
    pool = _pool()
    pool.at_risk("i-t1", "a stand-in: Spot is back")
    pool.noticed("i-t1", "instance-action")
    assert pool.slots["i-t1"].status is NodeStatus.NOTICED and pool.step() == []


@pytest.mark.parametrize("status", [NodeStatus.READY, NodeStatus.AT_RISK])
def test_a_node_the_ladder_lets_go_drains_at_once_and_is_retired_once_no_attempt_runs_on_it(status):
    """A stand-in once its Spot replacement trains, or a Spot trainer making room under the fallback's cap."""
    pool = _pool()
    pool.launched(["i-t0", "i-t1", "i-t2", "i-h0"], at=2.0)
    if status is NodeStatus.AT_RISK:
        pool.at_risk("i-t1", "rebalance recommendation")
    pool.let_go("i-t1", "return-to-spot: the Spot trainers are whole")
    assert pool.slots["i-t1"].status is NodeStatus.DRAINING
    assert "i-t1" not in [s.instance_id for s in pool.usable()] and pool.step() == []  # the attempt has it
    pool.attempt_ended(clean=True, at=4.0)
    assert pool.step() == [Retire(("i-t1",), "return-to-spot: the Spot trainers are whole")]
