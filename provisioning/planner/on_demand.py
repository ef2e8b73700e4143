"""The on-demand-only cluster at a price cap: what the same budget buys without Spot.

The comparison `deepvm simulate` makes against paying for certainty. With no Spot node there is nothing
to tier: the cluster is a Single Anchor whose trainers are all on demand (the anchor keeps the
checkpoints, as in DeepVM's Single Anchor). It is ranked by DeepVM's objective with on-demand prices,

    Z_od(v, n) = FLOPP_on-demand(v) * n * K_v(n),

or, where the planner maximises throughput (plan --interruptions compares the two), by its effective
TFLOPS v.flops * n * K_v(n): the cheap slow type with the best Z is not the fastest cluster the cap buys.
Ties go to the lower price, as everywhere in the planner. Over every GPU type with an on-demand price and
every count the cap, the on-demand vCPU quota and the node limit allow. Exhaustive over (type, count), so
exact: one type per cluster, at most a few thousand pairs, no MILP needed.
"""

from __future__ import annotations

from provisioning.catalog.model import Catalog, Market
from provisioning.planner.options import PRICE_TOLERANCE, Limits, trainer_options
from provisioning.planner.plan import Architecture, NodeGroup, Objective, Plan, Role
from provisioning.planner.request import PlanRequest
from provisioning.scaling.model import effective_nodes


def on_demand_plan(catalog: Catalog, request: PlanRequest, objective: Objective = Objective.DEEPVM) -> Plan | None:
    """The best all-on-demand cluster within `request.max_price` by DeepVM's Z or by throughput (None when
    no GPU type fits)."""
    if objective not in (Objective.DEEPVM, Objective.THROUGHPUT):
        raise ValueError(f"an on-demand cluster is ranked by Z or throughput, not {objective.value}")
    if request.max_price is None:
        return None
    limits = Limits(
        max_price=request.max_price,
        checkpoint_gib=request.checkpoint_size_gib * request.buffer_slots,
        node_limit=request.node_limit,
        catalog=catalog,
    )
    regions = list(request.regions) if request.regions and request.regions != ("all",) else catalog.regions
    best: tuple[tuple[float, float], Plan] | None = None
    for option in trainer_options(catalog, regions):
        price = option.on_demand_price
        itype = option.itype
        if not price or (itype.memory_gib is not None and itype.memory_gib < limits.checkpoint_gib):
            continue
        cap = limits.nodes_within_quota(option.region, itype, Market.ON_DEMAND)
        cap = min(cap, int((request.max_price + PRICE_TOLERANCE) // price))
        if option.scaling.max_nodes is not None:  # a profiled curve is trusted only so far, as for Spot
            cap = min(cap, option.scaling.max_nodes)
        if cap < 1:
            continue
        gain, fewer = max((effective_nodes(option.scaling, n), -n) for n in range(1, cap + 1))  # ties: fewer nodes
        count = -fewer
        z = itype.flops / price * 3600.0 * gain
        value = z if objective is Objective.DEEPVM else itype.flops * gain
        rank = (value, -count * price)  # ties: the lower price
        if best is None or rank > best[0]:
            nodes = [NodeGroup.of(itype, Market.ON_DEMAND, 1, Role.ANCHOR, price)]
            if count > 1:
                nodes.append(NodeGroup.of(itype, Market.ON_DEMAND, count - 1, Role.TRAINER, price))
            best = (
                rank,
                Plan(
                    architecture=Architecture.SINGLE_ANCHOR,
                    region=option.region,
                    availability_zone=option.availability_zone,
                    nodes=tuple(nodes),
                    price_per_hour=count * price,
                    effective_flops=itype.flops * gain,
                    objective_value=value,
                    objective=objective,
                    catalog_source=catalog.source,
                    prices_as_of=catalog.as_of,
                    notes=(
                        "on demand only: Z with on-demand prices"
                        if objective is Objective.DEEPVM
                        else "on demand only: the most effective TFLOPS within the cap",
                    ),
                ),
            )
    return None if best is None else best[1]
