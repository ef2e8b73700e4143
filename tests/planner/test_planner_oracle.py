"""The MILP against a brute-force enumerator of every cluster on random small catalogs."""

from __future__ import annotations

import math
from collections.abc import Callable

from conftest import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from provisioning.catalog.model import Catalog, InstanceType, Market, Price, Quota, ScalingModel, ScalingParams
from provisioning.core.errors import InfeasibleError
from provisioning.planner import Objective, PlanRequest, plan_cluster
from provisioning.scaling.model import effective_nodes, saturation_point

GROUPS = ("G and VT", "Standard")


@st.composite
def catalogs(draw) -> Catalog:
    """Small random catalogs whose quotas (<= 24 vCPUs of >= 4-vCPU types) bound every type to 6 nodes."""
    regions = draw(st.lists(st.sampled_from(["r1", "r2"]), min_size=1, max_size=2, unique=True))
    types: dict[str, InstanceType] = {}
    prices: list[Price] = []
    for i in range(draw(st.integers(1, 3))):
        name = f"g{i}.x"
        types[name] = InstanceType(
            name,
            "G and VT",
            draw(st.sampled_from([4, 8])),
            draw(st.one_of(st.none(), st.sampled_from([8.0, 16.0]))),
            draw(st.sampled_from([1.7, 5.0, 10.0, 25.0])),
            "T",
            1,
            draw(st.floats(10, 500)),
            ScalingParams(
                draw(st.floats(0.05, 0.5)),
                draw(st.floats(1.0, 6.0)),
                draw(st.floats(1.0, 8.0)),
                max_nodes=draw(st.one_of(st.none(), st.integers(1, 6))),  # a profiled curve's bound
                model=draw(st.sampled_from(list(ScalingModel))),
            ),  # DeepVM's K or a speed-up
        )
    for i in range(draw(st.integers(0, 3))):
        name = f"c{i}.x"
        types[name] = InstanceType(
            name, "Standard", 4, draw(st.sampled_from([2.0, 8.0, 32.0])), draw(st.sampled_from([0.3, 5.0, 12.5, 30.0]))
        )
    for region in regions:
        for name, t in types.items():
            if draw(st.booleans()) or not t.is_gpu:
                prices.append(Price(name, region, None, Market.ON_DEMAND, draw(st.floats(0.1, 2.0))))
            if t.is_gpu:
                for az in draw(st.lists(st.sampled_from(["a", "b"]), min_size=1, max_size=2, unique=True)):
                    prices.append(Price(name, region, region + az, Market.SPOT, draw(st.floats(0.05, 1.0))))
    quotas = [
        Quota(region, group, market, float(draw(st.sampled_from([4, 8, 16, 24]))))
        for region in regions
        for group in GROUPS
        for market in Market
    ]
    return Catalog(types, prices, quotas, source="random")


def enumerate_plans(catalog: Catalog, request: PlanRequest, max_nodes: int):
    """Every valid cluster as (Z, E, price, key); key identifies it up to the AZ and holder count."""
    limit = request.node_limit or max_nodes

    def within_curve(v: InstanceType, n: int) -> bool:  # every node of the type, the anchor too
        return v.scaling.max_nodes is None or n <= v.scaling.max_nodes

    need_memory = request.checkpoint_size_gib * request.buffer_slots
    cpu = catalog.cpu_types()

    def quota_ok(region: str, use: dict[tuple[str, Market], int]) -> bool:
        if request.node_limit is not None:  # a node limit replaces the quotas
            return True
        for (group, market), vcpus in use.items():
            q = catalog.quota(region, group, market)
            if q is not None and vcpus > q:
                return False
        return True

    for region in catalog.regions:
        for v in catalog.gpu_types():
            od_v = catalog.on_demand_price(v.name, region)
            for spot in catalog.spot_prices(v.name, region).values():

                def value(n: int, v: InstanceType = v, spot: float = spot) -> tuple[float, float]:
                    gain = effective_nodes(v.scaling, n)
                    return v.flops / spot * 3600 * gain, v.flops * gain

                for n in range(2, limit + 2):  # Single Anchor: 1 on-demand + (n - 1) spot
                    too_small = v.memory_gib is not None and v.memory_gib < need_memory
                    if od_v is None or n - 1 > limit or too_small or not within_curve(v, n):
                        continue
                    price = od_v + (n - 1) * spot
                    use = {("G and VT", Market.SPOT): (n - 1) * v.vcpus, ("G and VT", Market.ON_DEMAND): v.vcpus}
                    if price <= request.max_price + 1e-9 and quota_ok(region, use):
                        yield (*value(n), price, ("sa", region, v.name, n, None))
                for n in range(1, limit + 1):  # Tiering
                    if not within_curve(v, n):
                        continue
                    for w in cpu:
                        od_w = catalog.on_demand_price(w.name, region)
                        sat = saturation_point(min(v.network_gbps, w.network_gbps))
                        for m in range(1, limit + 1):
                            price = n * spot + m * od_w
                            use = {("G and VT", Market.SPOT): n * v.vcpus, ("Standard", Market.ON_DEMAND): m * w.vcpus}
                            if (
                                n / m < sat
                                and m * w.memory_gib >= need_memory
                                and price <= request.max_price + 1e-9
                                and quota_ok(region, use)
                            ):
                                yield (*value(n), price, ("tier", region, v.name, n, w.name))


def oracle_ranking(
    catalog: Catalog,
    request: PlanRequest,
    max_nodes: int,
    counted: Callable[[tuple, float], tuple[float, float]] | None = None,
) -> list[tuple[float, float]]:
    """(objective value, price) of the distinct plans, best first, ties to the lower price.

    `counted(key, price)` -> (goodput share, expected price) counts interruptions (test_interruptions_oracle).
    """
    best: dict[tuple, tuple[float, float]] = {}
    for z, flops, price, key in enumerate_plans(catalog, request, max_nodes):
        share, paid = (1.0, price) if counted is None else counted(key, price)
        z, flops = z * share, flops * share
        if flops <= 0:
            continue  # interruptions stop it all the time: never a plan
        if request.objective is Objective.DEEPVM:
            value = z
        elif request.objective is Objective.THROUGHPUT:
            value = flops
        elif request.deadline_hours is None:
            value = paid / (flops * 3.6)
        elif flops * 3.6 * request.deadline_hours >= request.work_pflop * (1 - 1e-12):
            value = paid * request.work_pflop / (flops * 3.6)
        else:
            continue
        if key not in best or price < best[key][1]:
            best[key] = (value, price)
    maximise = request.objective in (Objective.DEEPVM, Objective.THROUGHPUT)
    return sorted(best.values(), key=lambda vp: (-vp[0] if maximise else vp[0], vp[1]))


def close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-7, abs_tol=1e-9)


@settings(max_examples=examples(80))
@given(
    catalog=catalogs(),
    max_price=st.floats(0.2, 8.0),
    objective=st.sampled_from([Objective.DEEPVM, Objective.THROUGHPUT, Objective.COST, Objective.DEADLINE]),
    node_limit=st.one_of(st.none(), st.integers(1, 6)),
    checkpoint=st.sampled_from([0.0, 1.0, 6.0]),
    work=st.floats(100.0, 5000.0),
)
def test_milp_ranking_equals_brute_force(catalog, max_price, objective, node_limit, checkpoint, work):
    deadline = {"deadline_hours": 1.0, "work_pflop": work} if objective is Objective.DEADLINE else {}
    request = PlanRequest(
        max_price=max_price,
        objective=objective,
        node_limit=node_limit,
        checkpoint_size_gib=checkpoint,
        buffer_slots=2,
        top=3,
        **deadline,
    )
    assert_milp_ranks_as(catalog, request, oracle_ranking(catalog, request, max_nodes=6))


def assert_milp_ranks_as(catalog: Catalog, request: PlanRequest, expected: list[tuple[float, float]]) -> None:
    """The MILP's top 3 have the oracle's values and prices (ties broken to the same prices), within the cap."""
    try:
        result = plan_cluster(catalog, request, with_baselines=False, with_architectures=False)
    except InfeasibleError:
        assert expected == []
        return
    got = [(p.objective_value, p.price_per_hour) for p in result.plans]
    assert len(got) == min(3, len(expected))
    for (gv, gp), (ev, ep) in zip(got, expected):  # same values, and ties broken to the same prices
        assert close(gv, ev) and close(gp, ep), (got, expected[:3])
    for plan in result.plans:
        assert plan.price_per_hour <= request.max_price + 1e-9
