"""The vectorised engine and the per-event reference loop are one model: on the same draws, every run ends
at the same time, at the same cost, with the same interruptions and restarts (to the bit)."""

from __future__ import annotations

import math

import pytest

from provisioning.catalog.model import Market
from simulation.case import PolicyRules
from simulation.draws import Draws
from simulation.engine import simulate
from simulation.policies import spot_only_plan
from simulation.recovery import RecoveryModel
from simulation.reference import EventKind, run_one
from tests.simulation.sim_cases import (
    DAY,
    capacity,
    case,
    hazard,
    lifetimes,
    mixed_plan,
    paper_catalog,
    paper_plan,
    paper_result,
)

HALF_NOTICE = RecoveryModel(notice_share=0.5)
# relaunches as long as the time between events: losses and joins land while one is under way, before and
# after it launches its nodes
CROWDED = RecoveryModel(
    notice_share=0.5, relaunch_s=1800.0, restart_s=900.0, launch_s=1200.0, replacement_delay_s=1500.0
)
CASES = {
    "deepvm on a hazard": lambda: case(paper_plan(), hazard(0.05)),
    "deepvm, relaunches crowded with events": lambda: case(paper_plan(), hazard(0.1), recovery=CROWDED),
    "shrink-only, half the reclaims without notice": lambda: case(
        paper_plan(), hazard(0.08), PolicyRules(False), recovery=HALF_NOTICE
    ),
    "deepvm on a capacity series": lambda: case(paper_plan(), capacity(DAY), recovery=HALF_NOTICE),
    "restart-all on a capacity series": lambda: case(
        spot_only_plan(paper_plan(), paper_catalog()), capacity(DAY), PolicyRules(True, restart_all=True)
    ),
    "deadline fallback": lambda: case(
        paper_plan(), capacity(DAY), PolicyRules(True, deadline_fallback=True), deadline_h=21.0
    ),
    "single anchor (cost-first) on censored lifetimes": lambda: case(
        paper_result().baselines["cost_first"],
        lifetimes([3.0, 9.0, 24.0, 1.5], [False, False, True, False]),
        recovery=HALF_NOTICE,
    ),
    "two Spot pools, one by capacity, one by lifetimes": lambda: case(
        mixed_plan(), (capacity(DAY, request=8), hazard(0.1)), recovery=HALF_NOTICE
    ),
}


@pytest.mark.parametrize("name", CASES)
def test_engine_and_reference_agree_run_by_run(name):
    sim = CASES[name]()
    draws = sim.draws()
    outcomes = simulate(sim, draws)
    assert outcomes.interruptions.sum() > 0, "the case must interrupt something to test anything"
    for run in range(24):
        one = run_one(sim, draws, run)
        assert (one.makespan_h, one.cost_usd, one.interruptions, one.restarts) == (
            outcomes.makespan_h[run],
            outcomes.cost_usd[run],
            outcomes.interruptions[run],
            outcomes.restarts[run],
        ), f"run {run}"


def test_recorded_schedule_is_what_the_run_counted():
    """The schedule a sandbox run would replay: every loss with its node and notice, joins after losses."""
    sim = case(paper_plan(), hazard(0.05), recovery=HALF_NOTICE)
    draws = sim.draws()
    one = run_one(sim, draws, 3, record=True)
    lost = [e for e in one.events if e.kind is EventKind.LOST]
    assert len(lost) == one.interruptions > 0
    assert {e.notice for e in lost} == {True, False}  # half the reclaims come without notice
    assert all(e.instance_type == "g4dn.xlarge" and e.market is Market.SPOT and 0 <= e.slot < 17 for e in lost)
    times = [e.at_h for e in one.events]
    assert times == sorted(times) and times[-1] <= one.makespan_h
    for slot in {e.slot for e in lost}:  # in each slot, losses and joins alternate, starting with a loss
        kinds = [e.kind for e in one.events if e.slot == slot]
        assert kinds[::2] == [EventKind.LOST] * len(kinds[::2])
        assert all(k is EventKind.JOINED for k in kinds[1::2])
    plain = run_one(sim, draws, 3)  # recording changes nothing
    assert (plain.makespan_h, plain.cost_usd, plain.restarts) == (one.makespan_h, one.cost_usd, one.restarts)


def test_capacity_drop_preempts_the_nodes_above_it_at_once():
    """Half the capacity gone at 3 h: the 8 highest slots of 17 die together (one relaunch), and come back
    when capacity does, a replacement delay later."""
    shares = [1.0] * 6 + [0.5] * 2 + [1.0] * 40  # half-hour steps: down to half from 3 h to 4 h
    sim = case(paper_plan(), capacity(shares), hours=10.0, runs=4)
    one = run_one(sim, sim.draws(), 0, record=True)
    offset = sim.offsets(sim.draws())[0, 0]
    lost = [e for e in one.events if e.kind is EventKind.LOST]
    assert one.interruptions == 9 * len({e.at_h for e in lost}) and len(lost) == one.interruptions
    assert {e.slot for e in lost} == set(range(8, 17))  # floor(0.5 * 17) = 8 slots stay
    first = min(e.at_h for e in lost)
    assert math.isclose((first + offset) % 24.0, 3.0, abs_tol=1e-9)
    joins = [e.at_h for e in one.events if e.kind is EventKind.JOINED]
    assert math.isclose(min(joins) - first, 1.0 + RecoveryModel().replacement_delay_h, abs_tol=1e-9)


def test_lifetimes_drawn_in_many_small_blocks_agree_too():
    """Blocks of one node per slot: nearly every join needs a block no run needed before."""
    sim = case(paper_plan(), lifetimes([0.5, 2.0, 6.0], [False, False, True]), recovery=HALF_NOTICE)
    draws = Draws(sim.traces, (17,), sim.workload.runs, sim.workload.seed, 0.5, block=1)
    outcomes = simulate(sim, draws)
    assert outcomes.interruptions.mean() > 17  # every slot went through several nodes
    for run in range(8):
        one = run_one(sim, draws, run)
        assert (one.makespan_h, one.cost_usd, one.interruptions, one.restarts) == (
            outcomes.makespan_h[run],
            outcomes.cost_usd[run],
            outcomes.interruptions[run],
            outcomes.restarts[run],
        )
