"""The recovery ladder on the live job, rung by rung: the real Controller on the scripted cluster
(tests/training/controller_rig.py), whose buyer answers as EC2 answers a pool without capacity. The ladder's
clock is the job's own (the "steps" clock: time passes as its steps train) or the wall clock a thousand
times faster ("fast"), so that backoffs of minutes, deadlines and budgets pass in milliseconds.

The decisions themselves are the ladder's (tests/ladder); these show that the controller tells it the
situation and carries out what it says: which pool is bought, what is let go, when it asks again, and
what the job's log and row say."""

from __future__ import annotations

import itertools
import time
from dataclasses import replace

import pytest

from provisioning.catalog.model import Market
from provisioning.cloud.types import NodeRecord, SshEndpoint
from provisioning.ladder.throughput import pflop_per_hour
from provisioning.planner.plan import Role
from tests.training.controller_rig import T1, Rig, attempts_of
from tests.training.scripted_cluster import Call, Die, NoticeOn, tiering_plan
from training.control.market import LiveMarket, job_offers
from training.control.nodepool import NodeStatus, Slot
from training.control.stops import BudgetReached, TrainingFailed
from training.shared.jobstore import JobStatus
from training.shared.limits import JobLimits
from training.shared.progress import Outcome, RecoveryReason

pytestmark = pytest.mark.timeout(60)
SPOT_GONE = ("*", Market.SPOT)  # the buyer's capacity key for every Spot type


@pytest.fixture
def rig(tmp_path) -> Rig:
    return Rig(tmp_path)


def _spot_orders(rig: Rig) -> list[tuple[str, int]]:
    return [(o.group.instance_type, o.count) for o in rig.buyer.orders if o.group.market is Market.SPOT]


def _said(rig: Rig, rung: str) -> list[str]:
    return [n for n in rig.notes if n.startswith(f"ladder: {rung}: ")]


def test_an_empty_plan_pool_is_repaired_with_the_zones_fastest_spot_type_within_the_cap(tmp_path):
    """g4dn.xlarge Spot has no capacity: after its refusal the job gets a g6.xlarge (121 TFLOPS at $0.33/h,
    the fastest the $1/h cap leaves room for), trains on three trainers again and loses nothing."""
    rig = Rig(tmp_path, plan=replace(tiering_plan(), price_cap=1.0))
    rig.buyer.capacity[("g4dn.xlarge", Market.SPOT)] = 0
    rig.world.total_steps = 120
    rig.world.faults = [NoticeOn(1, 6, node=T1)]
    result = rig.run()
    assert _spot_orders(rig) == [("g4dn.xlarge", 1), ("g6.xlarge", 1)]
    (repair,) = _said(rig, "repair")
    assert repair.endswith("g4dn.xlarge spot in us-east-1a refused lately: repairing with 1 g6.xlarge at $0.3316/h")
    assert (
        "no replacement node: no replacement launched: InsufficientInstanceCapacity for 1 spot g4dn.xlarge "
        "trainer in us-east-1a" in rig.notes
    )
    g6 = next(r.instance_id for r in rig.cluster.records if r.instance_type == "g6.xlarge")
    assert g6 in result.attempts[-1].nodes and result.attempts[-1].world_size == 3
    assert (result.steps, result.lost_steps) == (120, 0)
    assert rig.row().ladder.startswith("hold: ")  # the row keeps the newest decision: the cluster is whole


def test_a_refusing_pool_is_asked_again_after_its_backoff_never_in_a_tight_loop_while_the_survivors_train(rig):
    """No Spot anywhere and no room for another type: the job trains on two trainers, and the pool is asked
    again at 15 s, 30 s, 1 min... (a thousand times faster here), never once per tick; it never moves."""
    rig.buyer.capacity[SPOT_GONE] = 0
    rig.world.total_steps = 150
    rig.world.faults = [NoticeOn(1, 6, node=T1)]
    started = time.monotonic()
    result = rig.run(clock="fast")
    ladder_s = (time.monotonic() - started) * 1000.0
    orders = _spot_orders(rig)
    assert set(orders) == {("g4dn.xlarge", 1)}  # like the plan each time: nothing else fits the plan's price
    # the backoff doubles from 15 s to 5 min: at most this many tries in the time the job took
    assert 2 <= len(orders) <= 6 + ladder_s / 300.0, (len(orders), ladder_s)
    retry = _said(rig, "retry")
    assert retry and "g4dn.xlarge spot in us-east-1a refused lately" in retry[0]
    assert not _said(rig, "move")  # the live controller is offered no other zone: it never asks for a move
    assert attempts_of(result)[1][0] == 2 and (result.steps, result.lost_steps) == (150, 0)


def test_with_no_trainer_left_the_job_waits_for_the_pools_backoff_and_trains_once_capacity_returns(rig):
    """Every trainer lost and Spot gone: the plan's pool and each repair's are tried, none again before its
    backoff (15 s at first, a thousand times faster here); the controller waits (one note) and relaunches from
    the checkpoint once a purchase succeeds."""
    rig.buyer.capacity[SPOT_GONE] = 0
    rig.world.faults = [Die(1, 9, nodes=("i-t0000000", "i-t0000001", "i-t0000002"))]

    def note(text: str) -> None:
        if text.startswith("no trainer left"):
            rig.buyer.capacity.pop(SPOT_GONE, None)  # capacity returns while the job waits

    rig.hook = note
    result = rig.run("fast")
    assert rig.notes.count("no trainer left: waiting for the replacement node") == 1
    assert _spot_orders(rig)[0] == ("g4dn.xlarge", 3)  # like the plan first
    by_pool: dict[tuple[str, Market], list[float]] = {}
    for order, at in zip(rig.buyer.orders, rig.buyer.ordered_at, strict=True):
        by_pool.setdefault((order.group.instance_type, order.group.market), []).append(at)
    for pool, times in by_pool.items():  # a refused pool is asked again only after its backoff
        assert all(b - a >= 14.0 for a, b in itertools.pairwise(times)), (pool, times)
    assert attempts_of(result)[1][1] == 5 and (result.steps, result.lost_steps) == (40, 4)


def test_no_trainer_left_and_nothing_the_ladder_may_buy_fails_with_its_reason(rig):
    rig.world.faults = [Die(1, 9, nodes=("i-t0000000", "i-t0000001", "i-t0000002"))]
    with pytest.raises(TrainingFailed, match=r"no trainer node is left and none is on its way: --no-replace"):
        rig.run(replace_nodes=False)


def test_a_tight_deadline_buys_on_demand_stand_ins_and_gives_them_back_once_spot_is_whole(rig):
    """Spot is gone after a notice, and at two trainers the deadline's slack falls below two joins: the ladder
    buys on-demand trainers (stand-ins), in one order, within the fallback's cap. Spot returns once they train;
    the Spot trainers are bought back and, whole and training, the stand-ins are let go: the attempt relaunches
    without them, they are terminated, and the job completes with no step lost and no stand-in billing."""
    rig.buyer.capacity[SPOT_GONE] = 0
    rig.world.total_steps = 300
    rig.world.faults = [NoticeOn(1, 6, node=T1)]

    def note(text: str) -> None:
        if text.startswith("replacement ") and text.endswith("ready: folding it in"):
            rig.buyer.capacity.pop(SPOT_GONE, None)  # Spot returns once the stand-ins train

    rig.hook = note
    result = rig.run("steps", limits=JobLimits(deadline_hours=820 / 3600, fallback_max_price=2.2))

    on_demand = [o for o in rig.buyer.orders if o.group.market is Market.ON_DEMAND]
    (fallback,) = _said(rig, "on-demand-fallback")
    bought = int(fallback.rsplit("buying ", 1)[1].split()[0])
    assert [(o.group.instance_type, o.role, o.count) for o in on_demand] == [("g4dn.xlarge", Role.TRAINER, bought)]
    assert sum(o.group.count * o.group.usd_per_hour for o in on_demand) <= 2.2
    stand_ins = [r.instance_id for r in rig.cluster.records if r.market is Market.ON_DEMAND and r.role is Role.TRAINER]
    assert len(stand_ins) == bought
    back = _said(rig, "return-to-spot")
    assert back and "the Spot trainers are whole" in back[-1]
    retired = {i for ids, _ in rig.cluster.retired for i in ids}
    assert set(stand_ins) <= retired and not set(stand_ins) & set(rig.cluster.running(Role.TRAINER))
    trained = any(set(stand_ins) & set(a.nodes) for a in result.attempts)  # or let go before the fold-in ran
    assert not trained or any(
        r.reason is RecoveryReason.LADDER and set(r.nodes) <= set(stand_ins) for r in result.recoveries
    )
    assert not set(stand_ins) & set(result.attempts[-1].nodes)
    assert (result.steps, result.lost_steps) == (300, 0)


def test_the_budget_stops_the_job_with_a_checkpoint_and_resume_continues_it_with_more(rig):
    """The nodes bill by the job's clock; before the next checkpoint and stop would pass $0.01, the trainers
    flush and leave, the job is STOPPED (resumable) with the ladder's reason, and `--resume` with a larger
    budget continues from that very step."""
    rig.world.total_steps = 400
    with pytest.raises(BudgetReached, match=r"before the budget: spent \$0\.0\d+ of the \$0\.01 budget.*--resume"):
        rig.run("steps", limits=JobLimits(budget_usd=0.01))
    row = rig.row()
    assert row.status is JobStatus.STOPPED and row.checkpoint_step == row.step and 0 < row.step < 400
    assert row.message.startswith("stopped before its budget: spent $")
    assert rig.nodes.attempts[-1].returncode == 0  # a clean stop, not a kill

    result = rig.run(resume=True, limits=JobLimits(budget_usd=1.0))
    assert result.recoveries[0].reason is RecoveryReason.USER_RESUME and result.restarts == 0
    assert result.attempts[0].first_step == row.step and result.steps == 400 and result.lost_steps == 0
    assert attempts_of(result)[-1][3] is Outcome.COMPLETED


@pytest.mark.parametrize("managed", [False, True], ids=["local-controller", "head-controller"])
def test_a_zone_without_spot_long_enough_moves_the_job_to_another_zone_with_one_relaunch_and_nothing_left(
    tmp_path, managed
):
    """us-east-1a has no Spot left after a notice; the cluster's VPC has a subnet in us-east-1c, and the job's
    checkpoints reach S3 (l3). Once the zone has refused long enough that moving pays, the ladder moves: the
    plan's holder and three Spot trainers are bought in us-east-1c while the two survivors train on, the job
    relaunches there once from the stop's checkpoint, and the old zone's nodes are retired: no step lost.
    The head that runs the controller (a managed job's) stays as the control node, and is not terminated: the
    ladder counts its bill in the new zone's, within the $1/h cap."""
    rig = Rig(tmp_path, plan=replace(tiering_plan(), price_cap=1.0)).with_l3()
    rig.cluster.zones = ("us-east-1a", "us-east-1c")
    rig.buyer.capacity[("us-east-1a", "*", Market.SPOT)] = 0
    rig.world.total_steps, rig.work_s_per_step = 480, 12.0  # a step is 6 s of the job's clock on two trainers
    rig.world.faults = [NoticeOn(1, 6, node=T1)]
    old = set(rig.cluster.running())
    result = rig.run("steps", inside_cluster=managed)

    zone = {r.instance_id: r.availability_zone for r in rig.cluster.records}
    (move,) = [n for n in _said(rig, "move") if " instead of " in n]
    assert move.startswith("ladder: move: us-east-1c instead of us-east-1a: refused for")
    moved = [(o.group.instance_type, o.group.market, o.count) for o in rig.buyer.orders if o.zone == "us-east-1c"]
    assert moved == [("c5.xlarge", Market.ON_DEMAND, 1), ("g4dn.xlarge", Market.SPOT, 3)]
    assert any(n.startswith("ladder: move: the cluster moves to us-east-1c") for n in rig.notes)
    _notice, before, after = result.attempts
    assert {zone[i] for i in after.nodes} == {"us-east-1c"} and after.world_size == 3
    assert after.first_step == before.last_step  # the stop's checkpoint: nothing trained twice
    (switch,) = [r for r in result.recoveries if r.reason is RecoveryReason.LADDER]
    assert set(switch.nodes) == set(before.nodes)
    assert (result.steps, result.lost_steps) == (480, 0)
    retired = {i for ids, _ in rig.cluster.retired for i in ids}
    head = "i-h0000000"
    assert retired == old - {T1} - ({head} if managed else set())
    left = {i for i in rig.cluster.running() if zone[i] == "us-east-1a"} - {T1}  # the notice's: the cloud takes it
    assert left == ({head} if managed else set())
    assert any("left the job: it runs on as the control node" in n for n in rig.notes) is managed


def test_a_job_whose_checkpoints_stay_on_the_holders_is_offered_no_other_zone(rig):
    """Without l3 the checkpoint could not travel with a move (training/control/move.py): one zone only."""
    rig.cluster.zones = ("us-east-1a", "us-east-1c")
    assert rig.build().market.zones == ("us-east-1a",)
    assert rig.with_l3().build().market.zones == ("us-east-1a", "us-east-1c")


def test_a_move_whose_zone_gives_no_holder_is_called_off_and_its_trainers_retired_unused(tmp_path):
    """us-east-1c gives the move its Spot trainers but no holder: the move is called off once its orders have
    ended, the trainers it bought there are retired without training, and the job goes on in us-east-1a. (The
    move is tried again after the holder pool's backoff, each time as one try of it.)"""
    rig = Rig(tmp_path, plan=replace(tiering_plan(), price_cap=1.0)).with_l3()
    rig.cluster.zones = ("us-east-1a", "us-east-1c")
    rig.buyer.capacity[("us-east-1a", "*", Market.SPOT)] = 0
    rig.buyer.capacity[("us-east-1c", "c5.xlarge", Market.ON_DEMAND)] = 0
    rig.world.total_steps, rig.work_s_per_step = 480, 12.0
    rig.world.faults = [NoticeOn(1, 6, node=T1)]
    result = rig.run("steps")

    assert any(n.startswith("ladder: move to us-east-1c called off") for n in rig.notes)
    zone = {r.instance_id: r.availability_zone for r in rig.cluster.records}
    bought_there = {i for i, z in zone.items() if z == "us-east-1c"}
    assert bought_there and len(bought_there) % 3 == 0  # each try: the move's three Spot trainers
    assert not any(bought_there & set(a.nodes) for a in result.attempts)
    assert bought_there <= {i for ids, _ in rig.cluster.retired for i in ids}
    assert (result.steps, result.lost_steps) == (480, 0)


def test_a_move_under_way_when_the_job_ends_is_called_off_and_what_it_bought_is_retired(tmp_path):
    """The job completes while a move's last try is still buying (the race the test above met under load): the
    nodes bought in the move's zone, in the pool or not yet, must not bill on past the job."""
    rig = Rig(tmp_path, plan=replace(tiering_plan(), price_cap=1.0)).with_l3()
    rig.cluster.zones = ("us-east-1a", "us-east-1c")
    controller = rig.build()
    rig.cluster.endpoints()  # the plan's nodes, in us-east-1a
    arrived = [
        replace(r, instance_id=f"i-m{n:07d}", availability_zone="us-east-1c")
        for n, r in enumerate(rig.cluster.records[:2])
    ]
    rig.cluster.records += arrived
    controller.market.moving_to = "us-east-1c"
    controller.nodes.call_off_move()
    assert controller.market.moving_to is None
    assert {i for ids, _ in rig.cluster.retired for i in ids} == {r.instance_id for r in arrived}
    assert "ladder: move to us-east-1c called off: the job is over; its 2 nodes go" in rig.notes
    controller.nodes.call_off_move()  # no move under way: nothing more
    assert len(rig.cluster.retired) == 1


def test_the_job_rate_is_fixed_over_a_whole_window_not_from_a_burst_of_first_lines():
    """An attempt's first step lines may arrive in one burst: PFLOP per step is fixed only once a whole window of
    steps was measured, so with no trainer left (the model's rate at the efficiency it was fixed at) the work left
    still takes as long as the job's own steps say, not a fraction of it."""
    plan = tiering_plan()
    now = [0.0]
    market = LiveMarket(plan, job_offers(plan, ()), JobLimits(), "2026-11-25T10:00:00+00:00", clock=lambda: now[0])
    records, slots = {}, []
    for k in range(3):
        iid = f"i-t{k}"
        records[iid] = NodeRecord(
            iid, "g4dn.xlarge", Market.SPOT, Role.TRAINER, "us-east-1a", "running", f"127.0.0.{k}", None, 0.2
        )
        slots.append(
            Slot(
                SshEndpoint(iid, f"127.0.0.{k}", f"127.0.0.{k}", 22, "root", Role.TRAINER, Market.SPOT, "key", "known"),
                NodeStatus.READY,
            )
        )
    market.situation(slots, records, 600, 0.0)  # asked as the attempt starts: these trainers train
    for step in range(1, 6):  # a burst: five steps within 5 ms
        now[0] = 100.0 + step / 1000
        market.stepped(step)
    market.situation(slots, records, 600, 0.0)
    assert market.rate.pflop_per_step is None  # not from the burst
    asks = []
    for step in range(6, 41):  # then a step every 0.5 s; the ladder is asked when the controller is told to
        now[0] = 100.0 + (step - 5) * 0.5
        if market.stepped(step):
            asks.append(step)
            market.situation(slots, records, 600, 0.0)
    assert 20 in asks and market.rate.pflop_per_step is not None  # asked as the window fills: fixed then
    seen = market.situation(slots, records, 560, 0.0)
    assert seen.progress.remaining_pflop / seen.progress.pflop_per_hour * 3600 == pytest.approx(560 * 0.5, rel=0.1)
    market.attempt_ended()  # no trainer trains: the model's rate of the 3 trainers, at the rate fixed
    gone = market.situation(slots, records, 560, 0.0)
    rate = pflop_per_hour([(gone.facts["g4dn.xlarge"], 3)])
    assert gone.progress.remaining_pflop / rate * 3600 == pytest.approx(560 * 0.5, rel=0.25)


def test_a_wait_for_nodes_is_no_relaunch_the_deadlines_reserve_counts():
    """With no trainer left the controller waits for nodes (minutes, for Spot to come back or stand-ins to
    boot); the relaunch it measures for the deadline's reserve (six of them) starts when the wait ends."""
    plan = tiering_plan()
    now = [0.0]
    market = LiveMarket(plan, job_offers(plan, ()), JobLimits(), "2026-11-25T10:00:00+00:00", clock=lambda: now[0])
    market.attempt_ended()
    now[0] = 111.5
    market.waited()  # nodes came
    now[0] = 120.0
    market.stepped(55)  # the next attempt's first step
    assert market.relaunch_s == pytest.approx(8.5)
    market.attempt_ended()  # a relaunch without a wait counts whole
    now[0] = 130.0
    market.stepped(56)
    assert market.relaunch_s == pytest.approx(10.0)


def test_an_api_outage_is_no_pools_refusal_and_orders_wait_for_it(tmp_path):
    """Issue 40: with the EC2 API failing ("Unable to locate credentials"), every failed order counted as the
    pool's refusal, and the ladder bought dearer types. Now the same pool is asked again, after a backoff, and
    once the API is back the job is whole at the plan's type, never ordering in a tight loop meanwhile."""
    rig = Rig(tmp_path, plan=replace(tiering_plan(), price_cap=1.0))
    rig.buyer.fail = "reading instances: Unable to locate credentials"
    rig.world.total_steps = 160
    rig.world.faults = [NoticeOn(1, 6, node=T1), Call(2, 40, action=lambda: setattr(rig.buyer, "fail", None))]
    result = rig.run(clock="fast")  # the backoff's 15 s, 30 s, ... a thousand times faster
    assert {t for t, _ in _spot_orders(rig)} == {"g4dn.xlarge"}, _spot_orders(rig)
    assert not _said(rig, "repair") and any("ordering again in" in n for n in rig.notes), rig.notes
    assert result.attempts[-1].world_size == 3 and result.steps == 160
    assert all(b - a >= 14.0 for a, b in itertools.pairwise(rig.buyer.ordered_at[:3])), rig.buyer.ordered_at
