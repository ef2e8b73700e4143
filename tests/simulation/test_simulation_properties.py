"""What must hold of any simulation, whatever the trace: the issue's four properties."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from provisioning.planner import PlanRequest
from provisioning.planner.on_demand import on_demand_plan
from simulation.case import PolicyRules
from simulation.engine import simulate
from simulation.errors import SimulationError
from simulation.policies import spot_only_plan
from simulation.recovery import RecoveryModel
from tests.conftest import examples
from tests.simulation.sim_cases import PAPER_CAP, capacity, case, hazard, paper_catalog, paper_plan, paper_result

FAST = settings(max_examples=examples(15))
shares = st.lists(st.sampled_from([0.0, 0.25, 0.5, 0.75, 1.0]), min_size=1, max_size=60).filter(any)  # some capacity
traces = st.one_of(st.floats(0.0, 0.5).map(hazard), shares.map(capacity))


@FAST
@given(trace=traces, seed=st.integers(0, 2**31), hours=st.floats(0.5, 60.0))
def test_on_demand_only_is_unaffected_by_any_trace(trace, seed, hours):
    plan = on_demand_plan(paper_catalog(), PlanRequest(max_price=PAPER_CAP))
    out = simulate(case(plan, trace, hours=hours, runs=20, seed=seed))
    assert np.all(out.interruptions == 0) and np.all(out.restarts == 0)
    assert np.allclose(out.makespan_h, hours, rtol=1e-12)
    assert np.allclose(out.cost_usd, hours * plan.price_per_hour, rtol=1e-12)


@FAST
@given(
    seed=st.integers(0, 2**31),
    hours=st.floats(0.1, 500.0),
    plan=st.sampled_from(["deepvm", "cost_first", "performance_first"]),
    trace=st.sampled_from([hazard(0.0), capacity([1.0])]),
)
def test_no_interruptions_reproduce_the_planners_makespan(seed, hours, plan, trace):
    chosen = paper_plan() if plan == "deepvm" else paper_result().baselines[plan]
    sim = case(chosen, trace, hours=hours, runs=10, seed=seed)
    out = simulate(sim)
    predicted = sim.workload.work_pflop / (chosen.effective_flops * 3.6)  # the planner's effective FLOPS
    assert np.allclose(out.makespan_h, predicted, rtol=1e-12)
    assert np.allclose(out.cost_usd, predicted * chosen.price_per_hour, rtol=1e-12)
    assert np.all(out.interruptions == 0) and np.all(out.restarts == 0)


@FAST
@given(
    seed=st.integers(0, 2**31),
    rate=st.floats(0.002, 0.05),
    factor=st.floats(2.0, 5.0),
    notice=st.sampled_from([1.0, 0.5, 0.0]),
    rules=st.sampled_from(["deepvm", "shrink-only", "spot-restart"]),
)
def test_expected_cost_rises_with_the_interruption_rate(seed, rate, factor, notice, rules):
    """On the same seed, a higher hazard shortens every node's life (common random numbers): more
    interruptions, and a higher mean cost."""
    plan = spot_only_plan(paper_plan(), paper_catalog()) if rules == "spot-restart" else paper_plan()
    policy = {
        "deepvm": PolicyRules(True),
        "shrink-only": PolicyRules(False),
        "spot-restart": PolicyRules(True, restart_all=True),
    }[rules]
    recovery = RecoveryModel(notice_share=notice)
    low, high = (
        simulate(case(plan, hazard(h), policy, hours=20.0, runs=100, seed=seed, recovery=recovery))
        for h in (rate, rate * factor)
    )
    assert high.interruptions.mean() > low.interruptions.mean()
    assert high.cost_usd.mean() > low.cost_usd.mean()
    assert high.makespan_h.mean() > low.makespan_h.mean()


@FAST
@given(seed=st.integers(0, 2**31), trace=traces)
def test_the_same_seed_gives_the_same_result(seed, trace):
    sim = case(paper_plan(), trace, hours=12.0, runs=30, seed=seed, recovery=RecoveryModel(notice_share=0.5))
    first, again = (
        simulate(sim),
        simulate(case(paper_plan(), trace, hours=12.0, runs=30, seed=seed, recovery=RecoveryModel(notice_share=0.5))),
    )
    for field in ("makespan_h", "cost_usd", "interruptions", "restarts"):
        assert np.array_equal(getattr(first, field), getattr(again, field))


def test_a_trace_without_capacity_is_one_clear_error():
    with pytest.raises(SimulationError, match="can never finish on this trace"):
        simulate(case(paper_plan(), capacity([0.0, 0.0]), runs=5))


def test_another_seed_gives_other_runs():
    runs = [simulate(case(paper_plan(), hazard(0.05), runs=50, seed=seed)).makespan_h for seed in (1, 2)]
    assert not np.array_equal(*runs)
