"""The model relaunches as `deepvm train` does (training/control/attempts.py): a relaunch for every loss and one
for every fold-in, one at a time. A replacement ready before the relaunch on the survivors launches its
nodes is in that launch; one ready during the launch is folded in after it; one ready later is folded in
while the job trains. Engine and reference agree on each."""

from __future__ import annotations

import math

import pytest

from simulation.engine import simulate
from simulation.recovery import RecoveryModel
from simulation.reference import EventKind, run_one
from tests.simulation.sim_cases import case, hazard, lifetimes, mixed_plan

RELAUNCH_H, LAUNCH_H, WORK_H = 0.2, 0.1, 1.6  # relaunch 12 min, its last 6 min on chosen nodes


def one_loss(delay_h: float):
    """The 8 g4dn nodes of `mixed_plan` all die after 1 h (one event); the 4 g5 nodes never do."""
    recovery = RecoveryModel(relaunch_s=RELAUNCH_H * 3600, launch_s=LAUNCH_H * 3600, replacement_delay_s=delay_h * 3600)
    sim = case(mixed_plan(), (lifetimes([1.0], [False]), hazard(0.0)), hours=WORK_H, runs=4, recovery=recovery)
    draws = sim.draws()
    one = run_one(sim, draws, 0, record=True)
    out = simulate(sim, draws)
    assert (one.makespan_h, one.cost_usd, one.interruptions, one.restarts) == (
        out.makespan_h[0],
        out.cost_usd[0],
        out.interruptions[0],
        out.restarts[0],
    )
    return sim, one


@pytest.mark.parametrize(
    ("delay_h", "restarts", "back_at_h"),
    [
        (0.05, 1, 1.0 + RELAUNCH_H),  # ready before the launch: the relaunch on the survivors takes it in
        (0.15, 2, 1.0 + 2 * RELAUNCH_H),  # ready during the launch: folded in at a relaunch right after it
    ],
)
def test_a_replacement_ready_during_the_relaunch(delay_h, restarts, back_at_h):
    _, one = one_loss(delay_h)
    assert one.interruptions == 8 and one.restarts == restarts
    joins = {e.at_h for e in one.events if e.kind is EventKind.JOINED}
    assert joins == {1.0 + delay_h}
    # training stopped from the loss until back_at_h, then the full cluster did the 0.6 h left
    assert math.isclose(one.makespan_h, back_at_h + (WORK_H - 1.0), rel_tol=1e-12)


def test_a_replacement_ready_while_the_survivors_train_is_folded_in_at_its_own_relaunch():
    delay_h = 0.3
    sim, one = one_loss(delay_h)
    assert one.restarts == 2
    cluster = sim.cluster
    g5 = next(g for g in cluster.spot_groups if g.instance_type == "g5.xlarge")
    survivors = cluster.pflop_per_hour(g5.count, g5.count * g5.flops) / cluster.full_pflop_per_hour  # share of F
    left = (WORK_H - 1.0) - survivors * (delay_h - RELAUNCH_H)  # hours of full-speed work after the fold-in
    assert math.isclose(one.makespan_h, 1.0 + delay_h + RELAUNCH_H + left, rel_tol=1e-12)
