"""`--mix` against a brute-force enumerator of every mixed cluster on tiny random catalogs."""

from __future__ import annotations

import itertools
import math
from dataclasses import replace

from conftest import examples
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from provisioning.catalog.model import Catalog, InstanceType, Market, Price, Quota, ScalingModel, ScalingParams
from provisioning.core.errors import InfeasibleError
from provisioning.planner import Objective, Plan, PlanRequest, Role, plan_cluster
from provisioning.planner.mix import NodeBound, heaviest, plan_mix
from provisioning.planner.options import Limits, holder_options
from provisioning.scaling.model import saturation_point, scaling_factor

QUOTA = 12.0  # vCPUs per quota group and market: three 4-vCPU nodes
GPU_GROUPS = ("G and VT", "P", "G and VT")  # the third GPU type shares its quota with the first


@st.composite
def catalogs(draw) -> Catalog:
    """Two or three GPU types with their own scaling curves, spot in one or two AZs; one or two CPU types."""
    types, prices = {}, []
    azs = ["ra", "rb"][: draw(st.integers(1, 2))]
    for i in range(draw(st.integers(2, 3))):
        name = f"g{i}.x"
        types[name] = InstanceType(
            name,
            GPU_GROUPS[i],
            4,
            draw(st.sampled_from([None, 16.0])),
            draw(st.sampled_from([0.3, 5.0, 25.0])),
            "T",
            1,
            draw(st.floats(10, 500)),
            ScalingParams(
                draw(st.floats(0.1, 0.9)),
                draw(st.floats(1.0, 3.0)),
                draw(st.floats(1.0, 4.0)),
                max_nodes=draw(st.one_of(st.none(), st.integers(1, 4))),
                model=draw(st.sampled_from(list(ScalingModel))),
            ),
        )
        offered = [az for az in azs if draw(st.booleans())] or azs[:1]
        prices += [Price(name, "r", az, Market.SPOT, draw(st.floats(0.05, 1.0))) for az in offered]
        if draw(st.booleans()):
            prices.append(Price(name, "r", None, Market.ON_DEMAND, draw(st.floats(0.2, 2.0))))
    for i in range(draw(st.integers(1, 2))):
        name = f"c{i}.x"
        types[name] = InstanceType(
            name, "Standard", 4, draw(st.sampled_from([2.0, 8.0])), draw(st.sampled_from([0.3, 5.0, 25.0]))
        )
        prices.append(Price(name, "r", None, Market.ON_DEMAND, draw(st.floats(0.05, 1.0))))
    quotas = [Quota("r", g, m, QUOTA) for g in ("G and VT", "P", "Standard") for m in Market]
    return Catalog(types, prices, quotas, source="random")


def best_mixed(catalog: Catalog, request: PlanRequest) -> tuple[float, float] | None:
    """(value, price) of the best mixed cluster by enumeration: every AZ, count per type, anchor, holders."""
    gpus, cpus = catalog.gpu_types(), catalog.cpu_types()
    need = request.checkpoint_size_gib * request.buffer_slots
    best = None

    def within_quota(spot: dict[str, int], on_demand: dict[str, int]) -> bool:
        use: dict[tuple[str, Market], float] = {}
        for counts, market in ((spot, Market.SPOT), (on_demand, Market.ON_DEMAND)):
            for name, count in counts.items():
                key = (catalog.types[name].quota_group_in(market), market)
                use[key] = use.get(key, 0.0) + count * catalog.types[name].vcpus
        return all(v <= QUOTA for v in use.values())

    def consider(az: str, counts: dict[str, int], price: float) -> None:
        nonlocal best
        used = [t for t in gpus if counts.get(t.name)]
        total = sum(counts.values())
        if not used or price > request.max_price + 1e-9:
            return
        if any(t.scaling.max_nodes is not None and counts[t.name] > t.scaling.max_nodes for t in used):
            return  # beyond a profiled curve's node bound (the anchor counts)
        k = min(scaling_factor(t.scaling, total) for t in used)
        spot = {t.name: catalog.spot_prices(t.name, "r")[az] for t in used}
        weight = {
            t.name: t.flops / spot[t.name] * 3600 if request.objective is Objective.DEEPVM else t.flops for t in used
        }
        value = k * sum(weight[t.name] * counts[t.name] for t in used)
        if (
            best is None
            or value > best[0] * (1 + 1e-9)
            or (math.isclose(value, best[0], rel_tol=1e-9) and price < best[1])
        ):
            best = (value, price)

    for az in ("ra", "rb"):
        offered = [t for t in gpus if az in catalog.spot_prices(t.name, "r")]
        for spot_counts in itertools.product(range(4), repeat=len(offered)):
            trainers = dict(zip([t.name for t in offered], spot_counts))
            spot_price = sum(catalog.spot_prices(t.name, "r")[az] * n for t, n in zip(offered, spot_counts))
            if not any(spot_counts) or not within_quota(trainers, {}):
                continue
            for anchor in offered:  # Single Anchor: one more node of `anchor`, on demand, and at least one spot node
                od = catalog.on_demand_price(anchor.name, "r")
                if (
                    od is not None
                    and (anchor.memory_gib is None or anchor.memory_gib >= need)
                    and within_quota(trainers, {anchor.name: 1})
                ):
                    counts = dict(trainers)
                    counts[anchor.name] = counts.get(anchor.name, 0) + 1
                    consider(az, counts, spot_price + od)
            n = sum(spot_counts)
            for w in cpus:  # Tiering
                for m in range(1, 4):
                    ok = m * w.memory_gib >= need and all(
                        n < saturation_point(min(t.network_gbps, w.network_gbps)) * m
                        for t, c in zip(offered, spot_counts)
                        if c
                    )
                    if ok and within_quota(trainers, {w.name: m}):
                        consider(az, trainers, spot_price + m * catalog.on_demand_price(w.name, "r"))
    return best


@settings(max_examples=examples(40))
@given(
    catalog=catalogs(),
    max_price=st.floats(0.3, 5.0),
    objective=st.sampled_from([Objective.DEEPVM, Objective.THROUGHPUT]),
    checkpoint=st.sampled_from([0.0, 5.0]),
)
def test_mix_equals_brute_force(catalog, max_price, objective, checkpoint):
    request = PlanRequest(
        max_price=max_price, objective=objective, mix=True, top=1, checkpoint_size_gib=checkpoint, buffer_slots=2
    )
    expected = best_mixed(catalog, request)
    try:
        plan = plan_cluster(catalog, request, with_baselines=False, with_architectures=False).plans[0]
    except InfeasibleError:
        assert expected is None
        return
    assert expected is not None
    assert math.isclose(plan.objective_value, expected[0], rel_tol=1e-6), (plan.summary(), expected)
    assert math.isclose(plan.price_per_hour, expected[1], rel_tol=1e-6, abs_tol=1e-9), (plan, expected)


@settings(max_examples=examples(15))
@given(catalog=catalogs(), max_price=st.floats(0.3, 5.0), extra=st.integers(1, 3))
def test_a_floor_no_mixed_plan_reaches_changes_nothing(catalog, max_price, extra):
    """A known plan above the optimum (the optimum with `extra` more nodes, beyond the budget or quota) prunes
    shapes the optimum needs: the mix is solved again without the floor and stays exact."""
    limits = Limits(max_price=max_price, checkpoint_gib=1.0, node_limit=None, catalog=catalog)
    holders = holder_options(catalog, ["r"])
    exact = plan_mix(catalog, ["r"], holders, limits, Objective.DEEPVM)
    assume(exact is not None)
    first = exact.nodes[0]
    bigger = (replace(first, count=first.count + extra), *exact.nodes[1:])
    above = replace(exact, nodes=bigger)
    assume(_value(catalog, above) > exact.objective_value * (1 + 1e-5))
    floored = plan_mix(catalog, ["r"], holders, limits, Objective.DEEPVM, known=[above])
    assert floored is not None
    assert math.isclose(floored.objective_value, exact.objective_value, rel_tol=1e-9)
    assert math.isclose(floored.price_per_hour, exact.price_per_hour, rel_tol=1e-9)


def _value(catalog: Catalog, plan: Plan) -> float:
    """DeepVM's Z of a (mixed) plan: the smallest K(N) of its GPU types times FLOPP_spot x nodes."""
    trainers = [g for g in plan.nodes if g.role is not Role.HOLDER]
    total = sum(g.count for g in trainers)
    k = min(scaling_factor(catalog.types[g.instance_type].scaling, total) for g in trainers)
    spot = {g.instance_type: catalog.spot_prices(g.instance_type, "r")[plan.availability_zone] for g in trainers}
    return k * sum(catalog.types[g.instance_type].flops / spot[g.instance_type] * 3600 * g.count for g in trainers)


def test_saturation_point_never_decreases_with_bandwidth():
    """The mix's saturation rows take n_sat(min(bw_v, bw_w)) as min(n_sat(bw_v), n_sat(bw_w)): n_sat is monotone."""
    bandwidths = [0.0, 0.1, 0.3, 1.0, 1.7, 3.0, 5.0, 7.5, 10.0, 12.5, 15.0, 20.0, 25.0, 30.0, 50.0, 100.0, 400.0]
    points = [saturation_point(bw) for bw in bandwidths]
    assert points == sorted(points)


@settings(max_examples=examples(100))
@given(
    nodes=st.lists(
        st.builds(NodeBound, st.floats(0.01, 1.0), st.floats(0.05, 2.0), st.integers(0, 3)), min_size=1, max_size=3
    ),
    budget=st.floats(0.1, 6.0),
)
def test_weight_bound_is_never_below_the_heaviest_affordable_nodes(nodes, budget):
    """W(k) bounds the weight of any k nodes within the budget, equals it without a budget, -inf past the caps."""
    most = 10
    bound, free = heaviest(nodes, budget, most), heaviest(nodes, None, most)
    best: dict[int, float] = {}
    unbounded: dict[int, float] = {}
    for counts in itertools.product(*(range(n.cap + 1) for n in nodes)):
        k = sum(counts)
        weight = sum(c * n.weight for c, n in zip(counts, nodes))
        unbounded[k] = max(unbounded.get(k, 0.0), weight)
        if sum(c * n.price for c, n in zip(counts, nodes)) <= budget:
            best[k] = max(best.get(k, 0.0), weight)
    for k in range(1, most + 1):
        assert bound[k] >= best.get(k, -math.inf) - 1e-12
        if k in unbounded:
            assert math.isclose(free[k], unbounded[k], rel_tol=1e-12)
        else:
            assert bound[k] == free[k] == -math.inf
