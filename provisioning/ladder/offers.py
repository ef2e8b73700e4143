"""What the market offers a cluster's recovery ladder: a price per pool (zone, type, market) and the facts of
every type named, from the catalog the plan was made with. One function for `deepvm simulate` and for the
live controller, so that both ladders choose among the same pools at the same prices.

Per zone given:
- Spot: the plan's Spot types at the zone's Spot price; with `repairs`, every GPU type with a Spot price in
  the zone too (what the REPAIR rung may buy when the plan's pool refuses). The simulator leaves them out:
  its capacity traces measure one type per zone, so another type would find capacity the trace never showed
  (simulation/market.py);
- on demand: the plan's own types (its holders, its anchor, its trainers as stand-ins), and every GPU type
  with an on-demand price when none of the plan's trainer types has one.
The prices are the catalog's (the plan's own for its pools are the same numbers: the plan was priced from
it); InputError when the catalog lacks one of the plan's pools (a plan file made from another catalog).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from provisioning.catalog.model import Catalog, Market, ScalingModel, ScalingParams
from provisioning.core.errors import InputError
from provisioning.ladder.situation import Offer, Pool, TypeFacts
from provisioning.planner.plan import Plan, Role
from provisioning.scaling.model import scaling_of


@dataclass(frozen=True)
class MarketOffers:
    """The offers the ladder may buy from, and the facts of every type they, or the plan, name. A managed
    job's are computed where the catalog is (the user's machine) and travel to the head as JSON."""

    offers: tuple[Offer, ...]
    types: tuple[TypeFacts, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "offers": [[o.pool.zone, o.pool.instance_type, o.pool.market.value, o.usd_per_hour] for o in self.offers],
            "types": [
                {
                    "instance_type": t.instance_type,
                    "tflops": t.tflops,
                    "gpus": t.gpus,
                    "scaling": None if t.scaling is None else _curve(t.scaling),
                }
                for t in self.types
            ],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> MarketOffers:
        """The offers from their JSON form (written by to_dict: a malformed one is a bug, not user input)."""
        offers = tuple(
            Offer(Pool(zone, name, Market(market)), float(usd)) for zone, name, market, usd in data["offers"]
        )
        types = tuple(
            TypeFacts(
                t["instance_type"],
                float(t["tflops"]),
                None if t["scaling"] is None else _curve_of(t["scaling"]),
                int(t["gpus"]),
            )
            for t in data["types"]
        )
        return cls(offers, types)


def _curve(curve: ScalingParams) -> dict[str, Any]:
    return {**asdict(curve), "model": curve.model.value}


def _curve_of(data: dict[str, Any]) -> ScalingParams:
    return ScalingParams(**{**data, "model": ScalingModel(data["model"])})


def market_offers(plan: Plan, catalog: Catalog, zones: Sequence[str], repairs: bool) -> MarketOffers:
    """The offers for `plan` in `zones` (module docstring)."""
    region = plan.region
    trainer_types = {g.instance_type for g in plan.nodes if g.role is not Role.HOLDER}
    on_demand = {g.instance_type for g in plan.nodes}
    if not any(catalog.on_demand_price(name, region) for name in trainer_types):
        on_demand |= {t.name for t in catalog.gpu_types()}
    spot = {g.instance_type for g in plan.nodes if g.market is Market.SPOT}
    if repairs:
        spot |= {t.name for t in catalog.gpu_types()}
    offers: list[Offer] = []
    for zone in zones:
        for name in sorted(spot):
            price = catalog.spot_prices(name, region).get(zone)
            if price is not None:
                offers.append(Offer(Pool(zone, name, Market.SPOT), price))
        for name in sorted(on_demand):
            price = catalog.on_demand_price(name, region)
            if price is not None:
                offers.append(Offer(Pool(zone, name, Market.ON_DEMAND), price))
    plan_pools = {Pool(plan.availability_zone, g.instance_type, g.market) for g in plan.nodes}
    missing = plan_pools - {o.pool for o in offers}
    if missing:
        raise InputError(
            f"the catalog {catalog.source} has no price for the plan's {', '.join(sorted(map(str, missing)))}"
        )
    named = {o.pool.instance_type for o in offers} | {g.instance_type for g in plan.nodes}
    return MarketOffers(tuple(offers), tuple(type_facts(catalog, name) for name in sorted(named)))


def type_facts(catalog: Catalog, name: str) -> TypeFacts:
    """The catalog's facts of one type (InputError when it does not list it)."""
    itype = catalog.types.get(name)
    if itype is None:
        raise InputError(f"plan node type {name} is not in catalog {catalog.source}")
    if not itype.is_gpu:
        return TypeFacts(name, 0.0, None, 0)
    return TypeFacts(name, itype.flops, scaling_of(itype), itype.gpu_count)
