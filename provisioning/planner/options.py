"""What can be bought where, and the limits a plan must respect: the planner's inputs after the catalog."""

from __future__ import annotations

import math
from dataclasses import dataclass

from provisioning.catalog.model import Catalog, InstanceType, Market, ScalingParams
from provisioning.scaling.model import scaling_of

# Budget comparisons allow this much float noise ($/h), so a plan costing exactly the cap is kept.
PRICE_TOLERANCE = 1e-9
# Upper bound on nodes of one type when neither quota, node limit nor price cap bounds it.
MAX_NODES = 4096


@dataclass(frozen=True)
class TrainerOption:
    """A GPU type offered as spot in one AZ (and maybe on demand in its region)."""

    region: str
    availability_zone: str
    itype: InstanceType
    spot_price: float
    on_demand_price: float | None
    scaling: ScalingParams

    @property
    def flopp_spot(self) -> float:
        return self.itype.flops / self.spot_price * 3600.0


@dataclass(frozen=True)
class HolderOption:
    """An on-demand CPU type that can hold checkpoints (Tiering's remote tier) in one region."""

    region: str
    itype: InstanceType
    on_demand_price: float


@dataclass(frozen=True)
class Limits:
    """The request's constraints, in the form presolve and the MILP both check."""

    max_price: float | None  # None: no price cap (used to find the cheapest possible plan)
    checkpoint_gib: float  # checkpoint size x buffer slots the holders must keep in RAM
    node_limit: int | None  # nodes per type and market; replaces the quotas when set
    catalog: Catalog

    def quota(self, region: str, group: str, market: Market) -> float:
        """The vCPU quota in force: none when a node limit replaces quotas or the source has none."""
        q = None if self.node_limit is not None else self.catalog.quota(region, group, market)
        return math.inf if q is None else q

    def nodes_within_quota(self, region: str, itype: InstanceType, market: Market) -> int:
        """How many nodes of a type one market admits: the vCPU quota of its group (MAX_NODES when unknown),
        or the node limit where one replaces the quotas. Every cap on a type's count starts here."""
        quota = self.quota(region, itype.quota_group_in(market), market)
        cap = MAX_NODES if math.isinf(quota) else min(MAX_NODES, int(quota // itype.vcpus))
        return cap if self.node_limit is None else min(cap, self.node_limit)

    def fits_price(self, price: float) -> bool:
        return self.max_price is None or price <= self.max_price + PRICE_TOLERANCE


def trainer_offers(catalog: Catalog, regions: list[str]) -> list[TrainerOption]:
    """Every GPU type in every AZ where it has a spot price."""
    return [
        TrainerOption(region, az, itype, spot, catalog.on_demand_price(itype.name, region), scaling_of(itype))
        for region in regions
        for itype in catalog.gpu_types()
        for az, spot in sorted(catalog.spot_prices(itype.name, region).items())
    ]


def trainer_options(catalog: Catalog, regions: list[str]) -> list[TrainerOption]:
    """Each GPU type in the AZ of its region where spot is cheapest (rule R1; ties: first AZ by name)."""
    cheapest: dict[tuple[str, str], TrainerOption] = {}
    for offer in trainer_offers(catalog, regions):
        key = (offer.region, offer.itype.name)
        if key not in cheapest or offer.spot_price < cheapest[key].spot_price:
            cheapest[key] = offer
    return list(cheapest.values())


def holder_options(catalog: Catalog, regions: list[str]) -> list[HolderOption]:
    options = []
    for region in regions:
        for itype in catalog.cpu_types():
            price = catalog.on_demand_price(itype.name, region)
            if price is not None:
                options.append(HolderOption(region, itype, price))
    return options
