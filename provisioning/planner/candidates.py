"""Presolve: turn a catalog and a request into the few trainer candidates the MILP has to choose from.

A candidate is (architecture, region, AZ, GPU type v, trainer count n). The reductions below are exact
(they never remove a plan that could be among the `top` best), which the brute-force tests check:

R1  AZ choice. Within a region on-demand prices and quotas are the same in every AZ, so for one GPU
    type only the AZ with its cheapest spot price can be optimal (ties: the first AZ by name).
R2  Count bounds. n is at most what quotas, the node limit and the type's scaling curve allow (a
    profile's curve is trusted only so far: ScalingParams.max_nodes), and it is feasible only if its
    cheapest completion (anchor, or the cheapest holder type and count that satisfy saturation, memory,
    quotas and node limit) fits the price cap on its own. That completion cost grows with n, so the
    feasible counts are a prefix 1..n_max.
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
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

from provisioning.catalog.model import Market, ScalingParams
from provisioning.planner.holders import HolderCosts
from provisioning.planner.options import PRICE_TOLERANCE, Limits, TrainerOption
from provisioning.planner.plan import Architecture
from provisioning.scaling.model import effective_nodes


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


def spot_node_cap(option: TrainerOption, limits: Limits, beside_anchor: bool = False) -> int:
    """Most spot nodes of one type the spot quota, the node limit and the scaling curve's node bound
    allow (an anchor of the type counts towards the curve's bound)."""
    itype = option.itype
    cap = limits.nodes_within_quota(option.region, itype, Market.SPOT)
    if option.scaling.max_nodes is not None:
        cap = min(cap, option.scaling.max_nodes - (1 if beside_anchor else 0))
    return cap


def _count_cap(option: TrainerOption, architecture: Architecture, limits: Limits) -> int:
    """Largest trainer count allowed by node limit, spot quota, the curve's bound and (ignoring holders)
    the price cap."""
    anchor = 1 if architecture is Architecture.SINGLE_ANCHOR else 0  # the anchor is not a spot node
    cap = spot_node_cap(option, limits, beside_anchor=bool(anchor)) + anchor
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
    shortlist = heapq.nsmallest(
        keep, selected, key=lambda t: (-t[0], t[1], t[2].trainer.itype.name, t[2].trainer.availability_zone)
    )
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


def _feasible_prefix_end(first: int, cap: int, price_of: Callable[[int], float | None], limits: Limits) -> int:
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
