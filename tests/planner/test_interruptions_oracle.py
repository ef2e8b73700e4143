"""The MILP counting interruptions against the brute-force enumerator: still exact on random catalogs."""

from __future__ import annotations

import math
import os

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_planner_oracle import catalogs, close, enumerate_plans

from provisioning.errors import InfeasibleError
from provisioning.planner import Objective, PlanRequest, plan_cluster
from provisioning.planner.interruptions import Interruptions, RecoveryCosts, SpotPool

EXAMPLES = int(os.environ.get("DEEPVM_ORACLE_EXAMPLES", "40"))


def oracle_ranking(catalog, request: PlanRequest, max_nodes: int) -> list[tuple[float, float]]:
    """(objective value with interruptions, price) of the distinct plans, best first, ties to the lower price."""
    counted = request.interruptions
    best: dict[tuple, tuple[float, float]] = {}
    for z, flops, price, key in enumerate_plans(catalog, request, max_nodes):
        architecture, region, name, n, _ = key
        spot = n - 1 if architecture == "sa" else n
        share = counted.share(region, name, spot, n - spot)
        spot_price = min(catalog.spot_prices(name, region).values())  # the cheapest plan of a key is in this AZ
        paid = counted.expected_price(region, name, spot, spot_price, price)
        goodput = flops * share
        if goodput <= 0:
            continue  # stopped for relaunches all the time: never a plan
        if request.objective is Objective.DEEPVM:
            value = z * share
        elif request.objective is Objective.THROUGHPUT:
            value = goodput
        elif request.deadline_hours is None:
            value = paid / (goodput * 3.6)
        elif goodput * 3.6 * request.deadline_hours >= request.work_pflop * (1 - 1e-12):
            value = paid * request.work_pflop / (goodput * 3.6)
        else:
            continue
        if key not in best or price < best[key][1]:
            best[key] = (value, price)
    maximise = request.objective in (Objective.DEEPVM, Objective.THROUGHPUT)
    return sorted(best.values(), key=lambda vp: (-vp[0] if maximise else vp[0], vp[1]))


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    catalog=catalogs(),
    max_price=st.floats(0.2, 8.0),
    objective=st.sampled_from([Objective.DEEPVM, Objective.THROUGHPUT, Objective.COST, Objective.DEADLINE]),
    node_limit=st.one_of(st.none(), st.integers(1, 6)),
    mttf=st.sampled_from([0.5, 3.0, 50.0, math.inf]),
    other_mttf=st.sampled_from([0.2, 8.0]),
    relaunch=st.floats(0.0, 600.0),
    delay=st.floats(0.0, 3600.0),
    work=st.floats(100.0, 5000.0),
)
def test_milp_with_interruptions_equals_brute_force(
    catalog, max_price, objective, node_limit, mttf, other_mttf, relaunch, delay, work
):
    recovery = RecoveryCosts(relaunch_s=relaunch, replacement_delay_s=delay)

    def pool(m: float) -> SpotPool:
        return SpotPool(m, 1.0 if math.isinf(m) else m / (m + delay / 3600), f"mttf {m}")

    # the first GPU type of each region has its own pool: counting must work per type, not only globally
    per_type = {(region, "g0.x"): pool(other_mttf) for region in catalog.regions}
    counted = Interruptions("test", "test", pool(mttf), recovery, per_type)
    deadline = {"deadline_hours": 1.0, "work_pflop": work} if objective is Objective.DEADLINE else {}
    request = PlanRequest(max_price=max_price, objective=objective, node_limit=node_limit, checkpoint_size_gib=1.0,
                          buffer_slots=2, top=3, interruptions=counted, **deadline)
    expected = oracle_ranking(catalog, request, max_nodes=6)
    try:
        result = plan_cluster(catalog, request, with_baselines=False, with_architectures=False)
    except InfeasibleError:
        assert expected == []
        return
    got = [(p.objective_value, p.price_per_hour) for p in result.plans]
    assert len(got) == min(3, len(expected))
    for (gv, gp), (ev, ep) in zip(got, expected):
        assert close(gv, ev) and close(gp, ep), (got, expected[:3])
