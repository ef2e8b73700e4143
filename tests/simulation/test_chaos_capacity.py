"""`deepvm chaos --trace` with a capacity series, without a cluster: the samples are the series the simulator's
`deepvm` policy meets, in compressed time from the same start; live Spot nodes take capacity levels as the
simulator's do, and a drop reclaims the nodes above it."""

from __future__ import annotations

from itertools import pairwise

import pytest

from provisioning.clusters.plan_choice import catalog_of
from simulation.chaos import ChaosQuestion, LiveNode, recovery_here
from simulation.chaos_capacity import Levels, capacity_steps
from simulation.market_run import run_market, run_offset_h
from simulation.recovery import SECONDS_PER_HOUR
from simulation.traces import resolve_trace
from tests.cloud.plans import make_tiering_plan

PLAN = make_tiering_plan(spot=3, holders=1)
SCALE = 10.0  # a trace step of 5 minutes in 30 s


def question(seed: int = 0, trace: str = "aws-v100-16-us-west-2a") -> ChaosQuestion:
    return ChaosQuestion(
        PLAN,
        catalog_of(PLAN),
        resolve_trace(trace),
        seed,
        steps=300,
        step_time_s=0.6,
        time_scale=SCALE,
        recovery=recovery_here(SCALE, 1.0, replacement_delay_s=8.0),
    )


def test_the_samples_are_the_series_the_simulated_ladder_meets_from_the_same_start():
    case = question().market_case()
    draws = case.draws()
    offset = run_offset_h(case, draws)
    assert offset == pytest.approx(float(case.draws().start_share[0]) * case.horizon_h)
    steps = capacity_steps(case, offset, SCALE, until_h=2.0)
    zone = case.zones[0]
    step_h = zone.windows.step_h
    assert steps[0].at_s == 0.0 and len(steps) == pytest.approx(2.0 / step_h, abs=1)
    for step in steps:
        assert step.at_s == pytest.approx(step.trace_at_h * SECONDS_PER_HOUR / SCALE)
        assert step.nodes == zone.capacity(offset, step.trace_at_h, case.levels)
        assert 0 <= step.nodes <= 3
    assert [round((b.trace_at_h - a.trace_at_h) / step_h, 9) for a, b in pairwise(steps[1:])] == [1.0] * (
        len(steps) - 2
    )  # a sample every step of the series after the first (the start is mid-step)
    # this seed's stretch: full, empty for ten minutes, full again; the simulated run loses all three nodes
    assert [s.nodes for s in steps[:5]] == [3, 0, 0, 3, 3]
    run = run_market(case, draws, 0)
    assert run.interruptions == 3 and run.restarts >= 1


def test_the_ladders_backoff_is_the_heads_in_trace_time():
    plain, case = question().market_case(), question().market_case()
    assert case.timing.backoff_s == 15.0 * SCALE and case.timing.backoff_cap_s == 300.0 * SCALE
    assert case.timing.join_s == pytest.approx(8.0 * SCALE) and plain.measured_rates is None


def test_measured_step_times_set_the_simulated_rate():
    q = question(seed=10, trace="aws-v100-16-us-east-2b")  # one node of three lost for a while
    measured = ChaosQuestion(
        q.plan,
        q.catalog,
        q.trace,
        q.seed,
        q.steps,
        q.step_time_s,
        q.time_scale,
        q.recovery,
        seconds_per_step=(0.6, 0.6, 0.6),
    )  # fewer trainers: no slower (shared cores)
    case = measured.market_case()
    assert case.measured_rates == pytest.approx((case.full_rate,) * 3)
    slower = run_market(q.market_case(), q.market_case().draws(), 0)
    same_speed = run_market(case, case.draws(), 0)
    assert same_speed.makespan_h < slower.makespan_h  # with one node down it trains at full speed


def test_live_nodes_take_the_lowest_free_level_and_a_drop_reclaims_those_above():
    draws = question().market_case().draws()
    levels = Levels(3)
    nodes = [
        LiveNode("i-c", "g4dn.xlarge", "2026-11-25T10:00:02"),
        LiveNode("i-a", "g4dn.xlarge", "2026-11-25T10:00:00"),
        LiveNode("i-b", "g5.xlarge", "2026-11-25T10:00:01"),
    ]  # a repair of another type counts alike
    levels.update(nodes)
    assert levels.holder == {0: ("i-a", 0), 1: ("i-b", 0), 2: ("i-c", 0)}
    gone = levels.above(1, draws)
    assert [(r.instance_id, r.level, r.notice) for r in gone] == [("i-c", 2, True), ("i-b", 1, True)]
    levels.update(nodes)  # reclaimed nodes run out their notice: they take no level again
    assert levels.held == 1 and levels.above(1, draws) == []
    back = LiveNode("i-d", "g4dn.xlarge", "2026-11-25T10:05:00")
    levels.update([nodes[1], back])
    assert levels.holder == {0: ("i-a", 0), 1: ("i-d", 1)}  # level 1's second node: its draws' occupant 1
    extra = [LiveNode(f"i-{k}", "g4dn.xlarge", f"2026-11-25T10:06:0{k}") for k in range(2)]
    levels.update([nodes[1], back, *extra])
    assert sorted(levels.holder) == [0, 1, 2, 3]  # more than M: above every capacity, the next drop takes it
    assert [r.level for r in levels.above(3, draws)] == [3]
