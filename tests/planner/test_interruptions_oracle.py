"""The MILP counting interruptions against the brute-force enumerator: still exact on random catalogs."""

from __future__ import annotations

import math

from conftest import examples
from hypothesis import given, settings
from hypothesis import strategies as st
from test_planner_oracle import assert_milp_ranks_as, catalogs, oracle_ranking

from provisioning.planner import Objective, PlanRequest
from provisioning.planner.interruptions import Interruptions, RecoveryCosts, SpotPool


def counting(catalog, interruptions: Interruptions):
    """oracle_ranking's `counted`: a plan's goodput share and expected price from its key."""

    def counted(key: tuple, price: float) -> tuple[float, float]:
        architecture, region, name, n, _ = key
        spot = n - 1 if architecture == "sa" else n
        spot_price = min(catalog.spot_prices(name, region).values())  # the cheapest plan of a key is in this AZ
        return (interruptions.share(region, name, spot, n - spot),
                interruptions.expected_price(region, name, spot, spot_price, price))

    return counted


@settings(max_examples=examples(40))
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
    assert_milp_ranks_as(catalog, request, oracle_ranking(catalog, request, 6, counting(catalog, counted)))
