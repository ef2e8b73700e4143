"""Presolve: turn a catalog and a request into the few trainer candidates the MILP has to choose from.

A candidate is (architecture, region, AZ, GPU type v, trainer count n). The reductions below are exact
(they never remove a plan that could be among the `top` best), which the brute-force tests check:

R1  AZ choice. Within a region on-demand prices and quotas are the same in every AZ, so for one GPU
    type only the AZ with its cheapest spot price can be optimal (ties: the first AZ by name).
R2  Count bounds. n is feasible only if its cheapest completion (anchor, or the cheapest holder type
    and count that satisfy saturation, memory, quotas and node limit) fits the price cap on its own.
    That completion cost grows with n, so the feasible counts are a prefix 1..n_max.
R3  Dominance. Within one (architecture, region, v), a count whose score is not among the `top` best
    of that prefix cannot be in the overall top `top`: each better count gives a distinct plan that is
    at least as good. Ties in score go to the smaller (cheaper) count.
R4  Shortlist. With one GPU type and one holder type per plan, no two node groups of a plan share a
    quota group and market, so a candidate's cheapest completion is exactly its best plan. Hence only
    the `top` best candidates by (score, cheapest price) can be in the answer, and for each of them only
    its `top` cheapest holder types (HolderCosts.cheapest_types).

The score is the objective's value for maximising objectives, and the price per unit of value of the
cheapest completion for ratio objectives.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

from provisioning.catalog import Catalog, InstanceType, Market, ScalingParams
from provisioning.planner.plan import Architecture
from provisioning.scaling import effective_nodes, saturation_point, scaling_of

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
class Candidate:
    """One architecture + GPU type + trainer count, with everything the MILP needs about it."""

    architecture: Architecture
    trainer: TrainerOption
    count: int  # trainers, the anchor included
    effective_nodes: float  # n K(n)
    base_price: float  # $/h of the GPU nodes (anchor on-demand, the rest spot)
    spot_vcpus: int  # vCPUs of the GPU type's group in the spot market
    on_demand_vcpus: int  # vCPUs of the GPU type's group in the on-demand market (the anchor)

    @property
    def effective_flops(self) -> float:
        return self.trainer.itype.flops * self.effective_nodes

    @property
    def z(self) -> float:
        """DeepVM's objective Z = FLOPP_spot(v) n K(n)."""
        return self.trainer.flopp_spot * self.effective_nodes


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
        """How many nodes of a type the vCPU quota of its group admits (MAX_NODES when unknown)."""
        quota = self.quota(region, itype.quota_group, market)
        return MAX_NODES if math.isinf(quota) else min(MAX_NODES, int(quota // itype.vcpus))

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


@dataclass(frozen=True)
class _HolderTerms:
    """For one trainer type and one holder type: holders needed for n trainers is
    max(n // saturation + 1, for_memory), valid up to `cap` holders."""

    holder: HolderOption
    saturation: int
    for_memory: int
    cap: int

    def needed(self, trainers: int) -> int | None:
        m = max(trainers // self.saturation + 1, self.for_memory)
        return m if m <= self.cap else None

    def dominates(self, other: _HolderTerms) -> bool:
        return (
            self.holder.on_demand_price <= other.holder.on_demand_price
            and self.saturation >= other.saturation
            and self.for_memory <= other.for_memory
            and self.cap >= other.cap
        )


class HolderCosts:
    """Price of the cheapest valid holder group per (trainer option, trainer count), memoised.

    It does not depend on the price cap, so one instance serves every cap of a price sweep. Holder
    types that another type beats on price, saturation, memory and quota at once are never cheapest.
    """

    def __init__(self, holders: list[HolderOption], limits: Limits):
        self._by_region: dict[str, list[HolderOption]] = {}
        for holder in holders:
            self._by_region.setdefault(holder.region, []).append(holder)
        self._limits = limits
        self._terms: dict[TrainerOption, list[_HolderTerms]] = {}
        self._useful: dict[TrainerOption, list[_HolderTerms]] = {}
        self._memo: dict[tuple[TrainerOption, int], float | None] = {}

    def in_region(self, region: str) -> list[HolderOption]:
        return self._by_region.get(region, [])

    def _all_terms(self, trainer: TrainerOption) -> list[_HolderTerms]:
        if trainer not in self._terms:
            terms = [t for h in self.in_region(trainer.region) if (t := _holder_terms(trainer, h, self._limits))]
            self._terms[trainer] = terms
        return self._terms[trainer]

    def cheapest(self, trainer: TrainerOption, trainers: int) -> float | None:
        key = (trainer, trainers)
        if key not in self._memo:
            useful = self._pareto(trainer)
            prices = [m * t.holder.on_demand_price for t in useful if (m := t.needed(trainers)) is not None]
            self._memo[key] = min(prices, default=None)
        return self._memo[key]

    def _pareto(self, trainer: TrainerOption) -> list[_HolderTerms]:
        """The holder types no other type dominates (sorted so that a dominator always comes first)."""
        if trainer not in self._useful:
            ordered = sorted(self._all_terms(trainer), key=lambda t: (
                t.holder.on_demand_price, -t.saturation, t.for_memory, -t.cap, t.holder.itype.name))
            kept: list[_HolderTerms] = []
            for terms in ordered:
                if not any(k.dominates(terms) for k in kept):
                    kept.append(terms)
            self._useful[trainer] = kept
        return self._useful[trainer]

    def cheapest_types(self, trainer: TrainerOption, trainers: int, keep: int) -> list[tuple[HolderOption, int]]:
        """The `keep` cheapest holder groups (type, count), ties by type name."""
        groups = [(m * t.holder.on_demand_price, t.holder.itype.name, t.holder, m)
                  for t in self._all_terms(trainer) if (m := t.needed(trainers)) is not None]
        return [(holder, m) for _, _, holder, m in sorted(groups, key=lambda g: g[:2])[:keep]]


def _holder_terms(trainer: TrainerOption, holder: HolderOption, limits: Limits) -> _HolderTerms | None:
    """How one holder type serves one trainer type (None: never, e.g. no memory for the checkpoints)."""
    saturation = saturation_point(min(trainer.itype.network_gbps, holder.itype.network_gbps))
    for_memory = 1
    if limits.checkpoint_gib > 0:
        memory = holder.itype.memory_gib or 0.0
        if memory <= 0:
            return None
        for_memory = max(1, math.ceil(limits.checkpoint_gib / memory - 1e-12))
    cap = limits.nodes_within_quota(holder.region, holder.itype, Market.ON_DEMAND)
    if limits.node_limit is not None:
        cap = min(cap, limits.node_limit)
    return _HolderTerms(holder, saturation, for_memory, cap) if cap >= 1 else None


def holders_needed(trainers: int, trainer: TrainerOption, holder: HolderOption, limits: Limits) -> int | None:
    """The fewest holders of one type for `trainers` spot trainers, or None if no count works.

    Saturation: n / m < n_sat(min bandwidth)  <=>  m >= floor(n / n_sat) + 1.
    Memory: together the holders keep the buffered checkpoint shards, m * memory >= size * slots.
    """
    terms = _holder_terms(trainer, holder, limits)
    return None if terms is None else terms.needed(trainers)


def spot_node_cap(option: TrainerOption, limits: Limits) -> int:
    """Most spot nodes of one type the spot quota and the node limit allow."""
    itype = option.itype
    cap = limits.nodes_within_quota(option.region, itype, Market.SPOT)
    return cap if limits.node_limit is None else min(cap, limits.node_limit)


def _count_cap(option: TrainerOption, architecture: Architecture, limits: Limits) -> int:
    """Largest trainer count allowed by node limit, spot quota and (ignoring holders) the price cap."""
    anchor = 1 if architecture is Architecture.SINGLE_ANCHOR else 0  # the anchor is not a spot node
    cap = spot_node_cap(option, limits) + anchor
    if limits.max_price is not None:
        fixed = option.on_demand_price - option.spot_price if anchor else 0.0
        cap = min(cap, int((limits.max_price + PRICE_TOLERANCE - fixed) // option.spot_price))
    return cap


def anchor_allowed(option: TrainerOption, limits: Limits) -> bool:
    itype = option.itype
    if option.on_demand_price is None:
        return False
    if limits.nodes_within_quota(option.region, itype, Market.ON_DEMAND) < 1:
        return False
    if limits.node_limit is not None and limits.node_limit < 1:
        return False
    return itype.memory_gib is None or itype.memory_gib >= limits.checkpoint_gib


def make_candidate(option: TrainerOption, architecture: Architecture, n: int) -> Candidate:
    itype = option.itype
    if architecture is Architecture.SINGLE_ANCHOR:
        assert option.on_demand_price is not None
        base = option.on_demand_price + (n - 1) * option.spot_price
        spot_vcpus, od_vcpus = (n - 1) * itype.vcpus, itype.vcpus
    else:
        base = n * option.spot_price
        spot_vcpus, od_vcpus = n * itype.vcpus, 0
    return Candidate(
        architecture=architecture,
        trainer=option,
        count=n,
        effective_nodes=_effective_nodes(option.scaling, n),
        base_price=base,
        spot_vcpus=spot_vcpus,
        on_demand_vcpus=od_vcpus,
    )


@lru_cache(maxsize=65536)
def _effective_nodes(scaling: ScalingParams, n: int) -> float:
    """n K(n), cached: a price sweep asks for the same curves a hundred times."""
    return effective_nodes(scaling, n)


def cheapest_completion(candidate: Candidate, holder_costs: HolderCosts) -> float | None:
    """The lowest total $/h of any plan built on this candidate (None: no valid plan)."""
    if candidate.architecture is Architecture.SINGLE_ANCHOR:
        return candidate.base_price
    extra = holder_costs.cheapest(candidate.trainer, candidate.count)
    return None if extra is None else candidate.base_price + extra


def select_candidates(
    options: list[TrainerOption],
    holder_costs: HolderCosts,
    limits: Limits,
    architectures: tuple[Architecture, ...],
    score: Callable[[Candidate, Callable[[], float]], float | None],
    keep: int,
    node_gain: Callable[[ScalingParams, int], float] | None = None,
) -> list[Candidate]:
    """Rules R2 and R3: per (architecture, option) the `keep` best-scoring feasible counts.

    `score(candidate, cheapest_price)` is maximised, None drops the candidate; `cheapest_price()` is
    only computed when a score asks for it. Counts tie-break towards fewer nodes. When the score is a
    positive constant of the option times `node_gain(scaling, n)`, the counts are ranked by the gain
    alone, from a cache shared by every question about the same scaling curve.
    """
    selected: list[tuple[float, float, Candidate]] = []  # (score, cheapest price, candidate)
    for architecture in architectures:
        first = 2 if architecture is Architecture.SINGLE_ANCHOR else 1
        for option in options:
            if architecture is Architecture.SINGLE_ANCHOR and not anchor_allowed(option, limits):
                continue
            if architecture is Architecture.TIERING and not holder_costs.in_region(option.region):
                continue

            def price_of(
                n: int, option: TrainerOption = option, architecture: Architecture = architecture
            ) -> float | None:
                return cheapest_completion(make_candidate(option, architecture, n), holder_costs)

            top = _feasible_prefix_end(first, _count_cap(option, architecture, limits), price_of, limits)
            if top < first:
                continue
            if node_gain is not None:
                counts = _best_counts(node_gain, option.scaling, first, top, keep)
                for n in counts:
                    candidate = make_candidate(option, architecture, n)
                    value = score(candidate, lambda n=n: price_of(n))
                    if value is not None:
                        selected.append((value, _price(price_of(n)), candidate))
                continue
            scored = []
            for n in range(first, top + 1):
                candidate = make_candidate(option, architecture, n)
                value = score(candidate, lambda n=n: price_of(n))
                if value is not None:
                    scored.append((value, -n, candidate))
            for value, minus_n, candidate in heapq.nlargest(keep, scored, key=lambda t: (t[0], t[1])):
                selected.append((value, _price(price_of(-minus_n)), candidate))
    shortlist = heapq.nsmallest(keep, selected, key=lambda t: (-t[0], t[1], t[2].trainer.itype.name))
    return [candidate for _, _, candidate in shortlist]


def _price(price: float | None) -> float:
    assert price is not None, "presolve keeps only counts with a valid completion"
    return price


@lru_cache(maxsize=65536)
def _best_counts(
    node_gain: Callable[[ScalingParams, int], float], scaling: ScalingParams, first: int, top: int, keep: int
) -> tuple[int, ...]:
    """The `keep` counts in [first, top] with the highest gain, ties to fewer nodes."""
    return tuple(heapq.nsmallest(keep, range(first, top + 1), key=lambda n: (-node_gain(scaling, n), n)))


def _feasible_prefix_end(
    first: int, cap: int, price_of: Callable[[int], float | None], limits: Limits
) -> int:
    """Largest n in [first, cap] whose cheapest plan is valid and fits the cap (binary search, R2)."""

    def ok(n: int) -> bool:
        price = price_of(n)
        return price is not None and limits.fits_price(price)

    if cap < first or not ok(first):
        return first - 1
    lo, hi = first, cap
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if ok(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo
