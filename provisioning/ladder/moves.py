"""When moving the cluster to another zone pays, counting the move's own cost.

A move buys the plan again in the new zone (its on-demand nodes, its Spot trainers as far as the zone's
capacity seen and the cap allow, the stand-ins held), lets the old cluster train until they have joined,
then relaunches there once from the checkpoint (carried holder to holder, or from L3) and retires the old
zone's nodes. What it costs, in seconds of the new cluster's time:

    move_s = relaunch (nothing trains while the job switches; none when nothing trains now)
           + join x (the old on-demand nodes' $/h) / (the new cluster's $/h): the old holders, anchor and
             stand-ins bill beside their replacements while those boot

The live head, which runs the controller, stays where it is (training/control/move.py says why): a move
away from its zone bills it on beside the new cluster, so its price is counted in the new cluster's $/h and
taken from the cap's room for Spot trainers there.

Whether it pays is a ski-rental decision (rent: stay at rate r0 while the zone refuses; buy: move once, for
the rate r1 the new zone promises): move once the zone has refused for as long as the move costs in lost
progress, outage x (1 - r0 / r1) >= move_s, which never pays more than twice what the best decision in
hindsight would (the deterministic ski-rental bound), and only if the work left still gains from it:
R / r0 > move_s + R / r1. The zone "refuses" from the first refusal of a row that every Spot pool of the
plan in it has had, until one gives again.
"""

from __future__ import annotations

from dataclasses import dataclass

from provisioning.catalog.model import Market
from provisioning.ladder.backoff import cooling
from provisioning.ladder.decision import Order
from provisioning.ladder.situation import HOUR_S, Pool, Situation, TypeFacts, affordable
from provisioning.ladder.throughput import counts_of, efficiency, pflop_per_hour


@dataclass(frozen=True)
class Move:
    """A move the ladder may make, with what it rests on."""

    zone: str
    orders: tuple[Order, ...]
    rate_after: float  # r1, PFLOP/h
    rate_now: float  # r0
    cost_s: float  # move_s
    outage_s: float


def zone_outage_s(s: Situation) -> float | None:
    """How long every Spot pool of the plan in the cluster's zone has refused (None: one has not)."""
    firsts = []
    for g in s.plan:
        if g.market is not Market.SPOT:
            continue
        refused = s.refusals_of.get(Pool(s.zone, g.instance_type, Market.SPOT))
        if refused is None:
            return None
        firsts.append(refused.first_s)
    return s.now_s - max(firsts) if firsts else None


def best_move(s: Situation) -> Move | None:
    """The move that pays most now (module docstring), or None."""
    outage = zone_outage_s(s)
    if outage is None:
        return None
    e = efficiency(s)
    rate_now = pflop_per_hour(counts_of(s, s.holdings, ready_only=True)) * e
    old_ground_usd = sum(
        h.held * s.offer_of[h.pool].usd_per_hour for h in s.holdings if h.pool.market is Market.ON_DEMAND
    )
    best: Move | None = None
    for zone in s.zones:
        if zone == s.zone:
            continue
        plan = _plan_in(s, zone)
        if plan is None:
            continue
        orders, counts, usd = plan
        rate_after = pflop_per_hour(counts) * e
        if rate_after <= rate_now or usd <= 0:
            continue
        cost_s = (s.timing.relaunch_s if rate_now > 0 else 0.0) + s.timing.join_s * old_ground_usd / usd
        if outage * (1.0 - rate_now / rate_after) < cost_s:
            continue
        remaining = s.progress.remaining_pflop
        if rate_now > 0 and remaining / rate_now * HOUR_S <= cost_s + remaining / rate_after * HOUR_S:
            continue
        if best is None or rate_after > best.rate_after:
            best = Move(zone, orders, rate_after, rate_now, cost_s, outage)
    return best


def _plan_in(s: Situation, zone: str) -> tuple[tuple[Order, ...], list[tuple[TypeFacts, int]], float] | None:
    """The cluster bought again in `zone`: the orders, the trainers they give, their $/h (a head left behind
    included). None when the zone lacks one of the plan's offers, or one of its pools is refusing, or its Spot
    is seen empty."""
    orders: list[Order] = []
    usd = 0.0
    for g in s.plan:
        if g.market is not Market.ON_DEMAND:
            continue
        offer = s.offer_of.get(Pool(zone, g.instance_type, Market.ON_DEMAND))
        if offer is None or cooling(s, offer.pool):
            return None
        orders.append(Order(offer.pool, g.role, g.count))
        usd += g.count * offer.usd_per_hour
    for h in s.stand_ins:
        offer = s.offer_of.get(Pool(zone, h.pool.instance_type, Market.ON_DEMAND))
        if offer is None:
            return None
        orders.append(Order(offer.pool, h.role, h.held, stand_in=True))
        usd += h.held * offer.usd_per_hour
    usd += s.head_usd_per_hour(apart_in=zone)
    room = s.limits.fallback_usd_per_hour if s.stand_ins else s.limits.max_usd_per_hour
    for g in s.plan:
        if g.market is not Market.SPOT:
            continue
        offer = s.offer_of.get(Pool(zone, g.instance_type, Market.SPOT))
        if offer is None or cooling(s, offer.pool) or offer.capacity_seen == 0:
            return None
        seen = g.count if offer.capacity_seen is None else min(g.count, offer.capacity_seen)
        count = min(seen, affordable(room - usd, offer.usd_per_hour))
        if count > 0:
            orders.append(Order(offer.pool, g.role, count))
            usd += count * offer.usd_per_hour
    counts = [(s.facts[o.pool.instance_type], o.count) for o in orders]
    return tuple(orders), counts, usd
