"""The on-demand-only cluster at a price cap (what `deepvm simulate` compares Spot against): the best
DeepVM objective with on-demand prices, checked against brute force over every type and count."""

from __future__ import annotations

import pytest

from provisioning.catalog.files import load_catalog_file
from provisioning.catalog.model import Market
from provisioning.planner import Architecture, Objective, PlanRequest, Role
from provisioning.planner.on_demand import on_demand_plan
from provisioning.scaling.model import effective_nodes, scaling_of
from tests.conftest import DATA


@pytest.fixture(scope="module")
def catalog():
    return load_catalog_file(DATA / "deepvm_data.json")


def z_od(itype, price, gain):
    return itype.flops / price * 3600 * gain


def brute_force(catalog, cap, value=z_od):
    best = None
    for itype in catalog.gpu_types():
        for region in catalog.regions:
            price = catalog.on_demand_price(itype.name, region)
            if not price:
                continue
            quota = catalog.quota(region, itype.quota_group, Market.ON_DEMAND)
            most = int((cap + 1e-9) // price)
            most = min(most, int(quota // itype.vcpus))
            for n in range(1, most + 1):
                z = value(itype, price, effective_nodes(scaling_of(itype), n))
                if best is None or z > best[0] + 1e-9:
                    best = (z, itype.name, n)
    return best


@pytest.mark.parametrize("cap", [0.6, 1.0, 3.0, 7.5, 20.0])
def test_best_on_demand_cluster_matches_brute_force(catalog, cap):
    plan = on_demand_plan(catalog, PlanRequest(max_price=cap))
    z, name, count = brute_force(catalog, cap)
    assert plan is not None
    assert plan.objective_value == pytest.approx(z)
    assert {g.instance_type for g in plan.nodes} == {name}
    assert sum(g.count for g in plan.nodes) == count
    assert all(g.market is Market.ON_DEMAND for g in plan.nodes)
    assert plan.nodes[0].role is Role.ANCHOR and plan.architecture is Architecture.SINGLE_ANCHOR
    assert plan.price_per_hour <= cap + 1e-9
    itype = catalog.types[name]
    assert plan.effective_flops == pytest.approx(itype.flops * effective_nodes(scaling_of(itype), count))


@pytest.mark.parametrize("cap", [1.0, 3.0, 7.5, 20.0])
def test_by_throughput_the_fastest_cluster_the_cap_buys_not_the_best_z(catalog, cap):
    """What plan --interruptions --objective throughput compares the best Spot plan with: from $7.5/h g5
    clusters are faster, though g4dn's Z stays the best (3,016 TFLOPS by Z, 4,872 by throughput)."""
    plan = on_demand_plan(catalog, PlanRequest(max_price=cap), Objective.THROUGHPUT)
    flops, name, count = brute_force(catalog, cap, lambda itype, price, gain: itype.flops * gain)
    assert (plan.objective, plan.objective_value, plan.effective_flops) == (
        Objective.THROUGHPUT,
        pytest.approx(flops),
        pytest.approx(flops),
    )
    assert {g.instance_type for g in plan.nodes} == {name} and sum(g.count for g in plan.nodes) == count
    assert plan.price_per_hour <= cap + 1e-9
    by_z = on_demand_plan(catalog, PlanRequest(max_price=cap))
    assert (by_z.effective_flops < plan.effective_flops) == (cap >= 7.5)


def test_on_demand_quota_bounds_the_cluster(catalog):
    plan = on_demand_plan(catalog, PlanRequest(max_price=20.0))
    assert sum(g.count * catalog.types[g.instance_type].vcpus for g in plan.nodes) <= 32  # the G on-demand quota


def test_node_limit_and_a_cap_below_every_type(catalog):
    limited = on_demand_plan(catalog, PlanRequest(max_price=20.0, node_limit=3))
    assert sum(g.count for g in limited.nodes) <= 3
    assert on_demand_plan(catalog, PlanRequest(max_price=0.1)) is None


def test_a_profiled_curve_bounds_the_on_demand_cluster_and_groups_state_their_gpus(catalog):
    """As for Spot: a curve fitted up to n nodes is trusted up to its bound, and the plan's groups say
    their GPUs and TFLOPS (what `deepvm up` and training read)."""
    import dataclasses

    best = on_demand_plan(catalog, PlanRequest(max_price=20.0))
    name = best.nodes[0].instance_type
    itype = catalog.types[name]
    bounded = dataclasses.replace(scaling_of(itype), max_nodes=2)
    profiled = dataclasses.replace(catalog, types={**catalog.types, name: dataclasses.replace(itype, scaling=bounded)})
    plan = on_demand_plan(profiled, PlanRequest(max_price=20.0))
    assert sum(g.count for g in plan.nodes if g.instance_type == name) <= 2
    assert all(g.gpus == catalog.types[g.instance_type].gpu_count for g in best.nodes)
    assert all(g.tflops == catalog.types[g.instance_type].flops for g in best.nodes)
