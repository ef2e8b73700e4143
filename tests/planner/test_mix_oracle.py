"""`--mix` against a brute-force enumerator of every mixed cluster on tiny random catalogs."""

from __future__ import annotations

import itertools
import math

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from provisioning.catalog import Catalog, InstanceType, Market, Price, Quota, ScalingParams
from provisioning.errors import InfeasibleError
from provisioning.planner import Objective, PlanRequest, plan_cluster
from provisioning.scaling import saturation_point, scaling_factor

CAP = 3  # spot nodes per GPU type (quota 12 vCPUs of 4-vCPU types)


@st.composite
def catalogs(draw) -> Catalog:
    types, prices = {}, []
    for i in range(2):
        name = f"g{i}.x"
        types[name] = InstanceType(name, "G and VT" if i == 0 else "P", 4, draw(st.sampled_from([None, 16.0])),
                                   draw(st.sampled_from([5.0, 25.0])), "T", 1, draw(st.floats(10, 500)),
                                   ScalingParams(draw(st.floats(0.1, 0.9)), draw(st.floats(1.0, 3.0)),
                                                 draw(st.floats(1.0, 4.0)),
                                                 max_nodes=draw(st.one_of(st.none(), st.integers(1, 4)))))
        prices.append(Price(name, "r", "ra", Market.SPOT, draw(st.floats(0.05, 1.0))))
        if draw(st.booleans()):
            prices.append(Price(name, "r", None, Market.ON_DEMAND, draw(st.floats(0.2, 2.0))))
    for i in range(draw(st.integers(1, 2))):
        name = f"c{i}.x"
        types[name] = InstanceType(name, "Standard", 4, draw(st.sampled_from([2.0, 8.0])),
                                   draw(st.sampled_from([0.3, 5.0, 25.0])))
        prices.append(Price(name, "r", None, Market.ON_DEMAND, draw(st.floats(0.05, 1.0))))
    quotas = [Quota("r", g, m, 12.0) for g in ("G and VT", "P", "Standard") for m in Market]
    return Catalog(types, prices, quotas, source="random")


def best_mixed(catalog: Catalog, request: PlanRequest) -> tuple[float, float] | None:
    gpus, cpus = catalog.gpu_types(), catalog.cpu_types()
    need = request.checkpoint_size_gib * request.buffer_slots
    best = None

    def consider(counts: dict[str, int], price: float) -> None:
        nonlocal best
        used = [t for t in gpus if counts.get(t.name)]
        total = sum(counts.values())
        if not used or price > request.max_price + 1e-9:
            return
        if any(t.scaling.max_nodes is not None and counts[t.name] > t.scaling.max_nodes for t in used):
            return  # beyond a profiled curve's node bound (the anchor counts)
        k = min(scaling_factor(t.scaling, total) for t in used)
        spot = {t.name: catalog.spot_prices(t.name, "r")["ra"] for t in gpus}
        weight = {t.name: t.flops / spot[t.name] * 3600 if request.objective is Objective.DEEPVM else t.flops
                  for t in gpus}
        value = k * sum(weight[t.name] * counts[t.name] for t in used)
        if best is None or value > best[0] * (1 + 1e-9) or (
                math.isclose(value, best[0], rel_tol=1e-9) and price < best[1]):
            best = (value, price)

    for spot_counts in itertools.product(range(CAP + 1), repeat=len(gpus)):
        trainers = dict(zip([t.name for t in gpus], spot_counts))
        spot_price = sum(catalog.spot_prices(t.name, "r")["ra"] * n for t, n in zip(gpus, spot_counts))
        for anchor in gpus:  # Single Anchor: one more node of `anchor`, on demand, and at least one spot node
            od = catalog.on_demand_price(anchor.name, "r")
            if od is not None and (anchor.memory_gib is None or anchor.memory_gib >= need) and any(spot_counts):
                counts = dict(trainers)
                counts[anchor.name] += 1
                consider(counts, spot_price + od)
        n = sum(spot_counts)
        for w in cpus:  # Tiering
            for m in range(1, 4):
                ok = m * w.memory_gib >= need and all(
                    n < saturation_point(min(t.network_gbps, w.network_gbps)) * m
                    for t, c in zip(gpus, spot_counts) if c)
                if ok and n:
                    consider(trainers, spot_price + m * catalog.on_demand_price(w.name, "r"))
    return best


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(catalog=catalogs(), max_price=st.floats(0.3, 5.0),
       objective=st.sampled_from([Objective.DEEPVM, Objective.THROUGHPUT]), checkpoint=st.sampled_from([0.0, 5.0]))
def test_mix_equals_brute_force(catalog, max_price, objective, checkpoint):
    request = PlanRequest(max_price=max_price, objective=objective, mix=True, top=1,
                          checkpoint_size_gib=checkpoint, buffer_slots=2)
    expected = best_mixed(catalog, request)
    try:
        plan = plan_cluster(catalog, request, with_baselines=False, with_architectures=False).plans[0]
    except InfeasibleError:
        assert expected is None
        return
    assert expected is not None
    assert math.isclose(plan.objective_value, expected[0], rel_tol=1e-6), (plan.summary(), expected)
    assert math.isclose(plan.price_per_hour, expected[1], rel_tol=1e-6, abs_tol=1e-9), (plan, expected)
