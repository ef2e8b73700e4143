"""How many checkpoint holders a Tiering plan needs, and what the cheapest holder group costs.

For one trainer type and one holder type, n trainers need max(n // n_sat + 1, memory share) holders:
n / m < n_sat(min bandwidth) keeps the holders' links below saturation, and together they keep the
buffered checkpoint shards in RAM.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from provisioning.catalog.model import Market
from provisioning.planner.options import HolderOption, Limits, TrainerOption
from provisioning.scaling.model import saturation_point


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
            ordered = sorted(
                self._all_terms(trainer),
                key=lambda t: (t.holder.on_demand_price, -t.saturation, t.for_memory, -t.cap, t.holder.itype.name),
            )
            kept: list[_HolderTerms] = []
            for terms in ordered:
                if not any(k.dominates(terms) for k in kept):
                    kept.append(terms)
            self._useful[trainer] = kept
        return self._useful[trainer]

    def cheapest_types(self, trainer: TrainerOption, trainers: int, keep: int) -> list[tuple[HolderOption, int]]:
        """The `keep` cheapest holder groups (type, count), ties by type name."""
        groups = [
            (m * t.holder.on_demand_price, t.holder.itype.name, t.holder, m)
            for t in self._all_terms(trainer)
            if (m := t.needed(trainers)) is not None
        ]
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
    return _HolderTerms(holder, saturation, for_memory, cap) if cap >= 1 else None
