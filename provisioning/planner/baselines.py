"""The paper's baseline policies, for comparison with DeepVM's decision.

Both build a Single Anchor cluster (one on-demand anchor plus spot nodes of the same GPU type) with as
many spot nodes as the price cap, the spot quota, the node limit and the type's scaling curve allow:
    cost-first         the GPU type that yields the most nodes (ties: the cheaper cluster);
    performance-first  the GPU type with the most FLOPS that fits at all.
"""

from __future__ import annotations

from provisioning.planner.candidates import Candidate, anchor_allowed, make_candidate, spot_node_cap
from provisioning.planner.options import PRICE_TOLERANCE, Limits, TrainerOption
from provisioning.planner.plan import Architecture


def _largest_anchor_cluster(option: TrainerOption, limits: Limits) -> Candidate | None:
    if not anchor_allowed(option, limits) or limits.max_price is None:
        return None
    assert option.on_demand_price is not None
    budget = limits.max_price + PRICE_TOLERANCE - option.on_demand_price
    spot_nodes = min(int(budget // option.spot_price), spot_node_cap(option, limits, beside_anchor=True))
    if spot_nodes < 1:
        return None
    return make_candidate(option, Architecture.SINGLE_ANCHOR, spot_nodes + 1)


def cost_first(options: list[TrainerOption], limits: Limits) -> Candidate | None:
    clusters = [c for c in (_largest_anchor_cluster(o, limits) for o in options) if c is not None]
    return min(clusters, key=lambda c: (-c.count, c.base_price), default=None)


def performance_first(options: list[TrainerOption], limits: Limits) -> Candidate | None:
    for option in sorted(options, key=lambda o: (-o.itype.flops, o.spot_price)):
        cluster = _largest_anchor_cluster(option, limits)
        if cluster is not None:
            return cluster
    return None
