"""Control of a moved cluster handed to a new head in the new zone (training/control/handover.py): the real
Controller on the scripted cluster (tests/training/controller_rig.py) moves the job, then hands it over
between the old zone's last attempt and the new zone's first; a second Controller, the new head's, takes the
job from its row. The executor of the copy, the profile and the start is a recording fake here."""

from __future__ import annotations

from dataclasses import replace

import pytest

from provisioning.catalog.model import Market
from provisioning.cloud.types import NodeRecord
from provisioning.clusters.head import head_node
from provisioning.planner.plan import Role
from tests.training.controller_rig import H0, T1, Rig
from tests.training.scripted_cluster import NoticeOn, tiering_plan
from training.control.handover import HandedOver, HandOverFailed, Successor, successor
from training.shared.jobstore import JobStatus
from training.shared.progress import RecoveryReason

pytestmark = pytest.mark.timeout(60)
OLD, NEW = "us-east-1a", "us-east-1c"


class RecordingHandOver:
    """Steps 2 to 4, as the controller calls them: what it was handed and what the job looked like then."""

    def __init__(self, rig: Rig, fail: str | None = None) -> None:
        self.rig, self.fail = rig, fail
        self.calls: list[Successor] = []
        self.seen: dict[str, object] = {}

    def __call__(self, to: Successor, note: object) -> None:
        self.calls.append(to)
        row = self.rig.row()
        self.seen = {
            "attempts": len(self.rig.nodes.attempts),
            "status": row.status,
            "message": row.message,
            "checkpoint": row.checkpoint_step,
            "running": set(self.rig.cluster.running()),
        }
        if self.fail:
            raise HandOverFailed(self.fail)


def _moving_rig(tmp_path) -> Rig:
    """As test_controller_market's move: us-east-1a has no Spot after a notice; the job moves to us-east-1c."""
    rig = Rig(tmp_path, plan=replace(tiering_plan(), price_cap=1.0)).with_l3()
    rig.cluster.zones = (OLD, NEW)
    rig.buyer.capacity[(OLD, "*", Market.SPOT)] = 0
    rig.world.total_steps, rig.work_s_per_step = 480, 12.0
    rig.world.faults = [NoticeOn(1, 6, node=T1)]
    return rig


def _zones(rig: Rig) -> dict[str, str]:
    return {r.instance_id: r.availability_zone for r in rig.cluster.records}


def test_after_the_switch_control_passes_to_the_new_zones_holder_and_its_controller_finishes_the_job(tmp_path):
    """The old zone's attempt stops cleanly at the switch; before any launch in us-east-1c the old controller
    hands the job to the holder the move bought there and ends, leaving the job RUNNING and nothing of the new
    zone retired. The new head's controller terminates the old head, resumes the job from its row (a controller
    restart, from the stop's checkpoint) and completes it there: no step lost, nothing left in us-east-1a, and
    head_node over the cluster now names the new head (how the user's side finds it)."""
    rig = _moving_rig(tmp_path)
    handover = RecordingHandOver(rig)
    controller = rig.build("steps", inside_cluster=True, job_id="fake-1")
    controller.handover = handover
    with pytest.raises(HandedOver) as ended:
        controller.run()

    (to,) = handover.calls
    assert ended.value.successor == to and to.old == H0 and to.zone == NEW
    assert (to.new.role, to.new.market, to.new.availability_zone) == (Role.HOLDER, Market.ON_DEMAND, NEW)
    assert handover.seen["attempts"] == 2  # the notice's and the old zone's last: none in the new zone yet
    assert handover.seen["status"] is JobStatus.RUNNING
    assert handover.seen["message"] == f"control passes to the new head {to.new.instance_id} in {NEW}"
    last = rig.nodes.attempts[-1]
    assert handover.seen["checkpoint"] == rig.world.checkpoint and last.returncode == 0  # a clean stop's
    zone = _zones(rig)
    assert {i for i in rig.cluster.running() if zone[i] == OLD} - {T1} == {H0}  # the head still runs: it hands over
    assert to.new.instance_id in handover.seen["running"]
    assert head_node(rig.cluster.nodes()).instance_id == H0  # until it is gone, the rule names the old head
    assert rig.row().status is JobStatus.RUNNING

    # the new head's controller, as its job_service starts it from the job.json the hand-over wrote
    rig.hook = None
    orders = len(rig.buyer.orders)
    result = rig.run("steps", inside_cluster=True, job_id="fake-1", head=to.new.instance_id, handed_from=H0)
    assert (H0,) in [ids for ids, _ in rig.cluster.retired]
    assert any(n == f"took control from the previous head {H0}, which is terminated" for n in rig.notes)
    assert result.recoveries[0].reason is RecoveryReason.CONTROLLER_RESTART
    first = result.attempts[0]
    assert first.first_step == handover.seen["checkpoint"]  # the stop's checkpoint: nothing trained twice
    assert all(zone.get(i, NEW) == NEW for a in result.attempts for i in a.nodes)
    assert all(o.zone == NEW for o in rig.buyer.orders[orders:])  # its ladder counts the cluster in its zone
    assert (result.steps, result.lost_steps) == (480, 0)
    assert not {i for i in rig.cluster.running() if _zones(rig)[i] == OLD} - {T1}
    assert head_node(rig.cluster.nodes()) == next(r for r in rig.cluster.nodes() if r.instance_id == to.new.instance_id)


def test_a_hand_over_that_fails_halfway_leaves_the_old_head_in_control_and_nothing_billing_twice(tmp_path):
    """The copy fails: the controller says so once, keeps control (the head stays as the control node, as
    before hand-overs), relaunches in the new zone on every node it bought there, the successor among them, and
    completes; it does not try again, and only the head is left running in the old zone."""
    rig = _moving_rig(tmp_path)
    handover = RecordingHandOver(rig, fail="copying the state to i-h0000001: connection refused")
    controller = rig.build("steps", inside_cluster=True)
    controller.handover = handover
    result = controller.run()

    (to,) = handover.calls
    said = [n for n in rig.notes if n.startswith("hand-over to ")]
    assert said == [
        f"hand-over to {to.describe()} failed (copying the state to i-h0000001: connection refused): "
        f"{H0} stays the control node"
    ]
    assert to.new.instance_id in result.attempts[-1].nodes
    zone = _zones(rig)
    assert {i for i in rig.cluster.running() if zone[i] == OLD} - {T1} == {H0}
    assert H0 not in {i for ids, _ in rig.cluster.retired for i in ids}
    assert (result.steps, result.lost_steps) == (480, 0)
    assert [kind for kind, _ in rig.cluster.events].count("handover") == 1  # in the cluster's event log


def _node(instance_id: str, role: Role, zone: str, minute: int, market: Market = Market.ON_DEMAND) -> NodeRecord:
    return NodeRecord(
        instance_id,
        "c5.xlarge",
        market,
        role,
        zone,
        "running",
        "10.0.0.9",
        None,
        0.17,
        launched_at=f"2026-11-25T10:{minute:02d}:00+00:00",
    )


def test_the_successor_is_head_nodes_choice_in_the_new_zone_so_the_whole_clusters_rule_names_it_once_the_old_is_gone():
    head = _node("i-old", Role.HOLDER, OLD, 0)
    nodes = [
        head,
        _node("i-h2", Role.HOLDER, NEW, 9),
        _node("i-h1", Role.HOLDER, NEW, 8),
        _node("i-t1", Role.TRAINER, NEW, 7),
        _node("i-sp", Role.HOLDER, NEW, 6, Market.SPOT),
    ]
    usable = {n.instance_id for n in nodes}
    found = successor(nodes, usable, "i-old", NEW)
    assert found is not None and (found.old, found.new.instance_id) == ("i-old", "i-h1")  # the earliest OD holder
    assert head_node([replace(head, state="terminated"), *nodes[1:]]) == found.new
    assert successor(nodes, usable - {"i-h1"}, "i-old", NEW).new.instance_id == "i-h2"  # an unusable one is skipped
    assert successor(nodes, usable, "i-old", OLD) is None  # the head is in the cluster's zone: nothing to hand over
    assert successor(nodes[:1] + nodes[3:], usable, "i-old", NEW) is None  # no on-demand holder there
    anchored = [*nodes, _node("i-a", Role.ANCHOR, NEW, 10)]
    assert successor(anchored, usable | {"i-a"}, "i-old", NEW).new.instance_id == "i-a"  # an anchor first
