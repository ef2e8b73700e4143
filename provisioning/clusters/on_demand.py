"""What each instance type of a cluster costs on demand: what a run's summary prices its nodes at to say what
on-demand would have cost (provisioning.clusters.cost.run_cost).

A plan keeps the price each node was planned at (a spot node's spot price), not its on-demand price, so a
spot type's comes from the catalog deepvm ships (provisioning/catalog/snapshot.py) for the plan's region;
an on-demand group's is its own planned price. A type the snapshot lacks is left out: the summary then says
the on-demand figure is not known rather than guessing it.
"""

from __future__ import annotations

from provisioning.catalog.model import Market
from provisioning.planner.plan import Plan


def on_demand_prices(plan: Plan) -> dict[str, float]:
    """USD per hour on demand, by instance type of the plan (see the module docstring)."""
    from provisioning.catalog.snapshot import load_snapshot

    catalog = load_snapshot()
    prices: dict[str, float] = {}
    for group in plan.nodes:
        price = (
            group.usd_per_hour
            if group.market is Market.ON_DEMAND
            else catalog.on_demand_price(group.instance_type, plan.region)
        )
        if price is not None:
            prices.setdefault(group.instance_type, price)
    return prices
