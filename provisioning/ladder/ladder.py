"""decide(situation): the recovery ladder's rungs, tried in order; the first that applies answers.

1. STOP            the budget would be exceeded within the time a checkpoint and a clean stop take
2. MOVING          a move is under way: nothing else until its nodes have joined
3. FALLBACK        the deadline needs on-demand stand-ins (provisioning/ladder/deadline.py); Spot trainers
                   are retired to make room under the fallback cap when the stand-ins need it, but not
                   once the deadline cannot be kept for sure (the whole fill would finish late): then the
                   stand-ins are only what the cap has free, and the Spot trainers, faster per dollar,
                   stay
4. a role is short (what the plan has, less what the cluster holds in its zone):
   BUY_LIKE_PLAN   its pool in the cluster's zone, unless that pool refused lately (backoff.py)
   REPAIR          else the Spot type of the zone that trains fastest beside what the cluster has, within
                   the cap: the planner's rate model (throughput.py, mix.py's K_min) over every count, with
                   the cluster's nodes fixed; exhaustive, so exact for this question
   MOVE            else move the cluster, when the zone has refused long enough that it pays (moves.py)
   RETRY           else nothing: ask again when the first refusing pool's backoff runs out
5. RETURN_TO_SPOT  the deadline allows fewer stand-ins and the plan's Spot pool is not refusing: buy Spot
                   trainers, each retiring a stand-in as it joins; with the Spot trainers whole and ready
                   already (the fallback's cap had room for both), the spare stand-ins go at once
6. HOLD            nothing to do; ask again when the deadline's slack or the budget next calls for it, or,
                   with stand-ins held, when the plan's Spot pool stops cooling (RETURN_TO_SPOT may apply)

Every buy stays within the cap in force (the plan's, or the fallback's while stand-ins are held), except
the plan's own on-demand nodes (its holders keep the checkpoints) and a move's re-buy of them.
Repairs stay in the cluster's zone: a data-parallel cluster spread over two zones pays inter-zone transfer
on every gradient exchange ($0.01/GB each way, https://aws.amazon.com/ec2/pricing/on-demand/#Data_Transfer_within_the_same_AWS_Region;
ResNet-18's 47 MB of gradients at a step a second is ~$3/h per node, more than the node), and the planner
never plans one; other zones are reached by moving the whole cluster.
"""

from __future__ import annotations

import math

from provisioning.catalog.model import Market
from provisioning.ladder.backoff import cooling, cooling_until
from provisioning.ladder.deadline import DeadlineView, deadline_view, stand_in_types
from provisioning.ladder.decision import Decision, Order, Reason, Retire, Rung
from provisioning.ladder.moves import best_move
from provisioning.ladder.situation import HOUR_S, Offer, Pool, Situation, affordable
from provisioning.ladder.throughput import counts_of, pflop_per_hour
from provisioning.planner.plan import Role


def decide(s: Situation) -> Decision:
    """The next rung for this situation (module docstring); pure: the same situation, the same decision."""
    stop = _budget(s)
    if stop is not None:
        return stop
    if s.moving_to is not None:
        return Decision(
            Rung.MOVING, Reason(f"moving to {s.moving_to}: waiting for its nodes to join"), check_at_s=_wake(s, None)
        )
    view = deadline_view(s)
    for rung in (_fallback, _short_roles, _return_to_spot):
        decision = rung(s, view)
        if decision is not None:
            return decision
    return Decision(Rung.HOLD, _hold_reason(s, view), check_at_s=_wake(s, view, _spot_to_return_to(s)))


# --- 1. the budget ----------------------------------------------------------------------------------------
def _budget(s: Situation) -> Decision | None:
    budget = s.limits.budget_usd
    if budget is None:
        return None
    burn = s.usd_per_hour()
    if s.limits.spent_usd + burn * s.timing.stop_s / HOUR_S < budget:
        return None
    return Decision(
        Rung.STOP,
        Reason(
            f"spent ${s.limits.spent_usd:,.2f} of the ${budget:,.2f} budget: at ${burn:,.2f}/h a checkpoint and a "
            f"clean stop ({s.timing.stop_s:.0f} s) would reach it; stopping (resumable)"
        ),
    )


def _budget_wake(s: Situation) -> float | None:
    """When the budget rung will stop the job at the bill of now."""
    if s.limits.budget_usd is None:
        return None
    burn = s.usd_per_hour()
    if burn <= 0:
        return None
    return s.now_s + (s.limits.budget_usd - s.limits.spent_usd) / burn * HOUR_S - s.timing.stop_s


# --- 3. the deadline's stand-ins --------------------------------------------------------------------------
def _fallback(s: Situation, view: DeadlineView | None) -> Decision | None:
    if view is None:
        return None
    count = view.to_order(_rate_now(s, view))
    if count == 0:
        return None
    offer = view.fill.offer
    assert offer is not None, "a fill with stand-ins to order has an offer"
    room = s.limits.fallback_usd_per_hour - s.usd_per_hour()
    if view.broken:  # no guarantee left to buy: chase the deadline with what the cap has free, keep the Spot
        count = min(count, affordable(room, offer.usd_per_hour))
        if count == 0:
            return None
    orders = (Order(offer.pool, Role.TRAINER, count, stand_in=True),)
    over = count * offer.usd_per_hour - room
    retire = _make_room(s, over) if over > 1e-9 else ()
    lost = " (it cannot be kept for sure: even the whole fill may finish late)" if view.broken else ""
    text = (
        f"the deadline needs on-demand: slack {view.slack_s / 60:.1f} min against {view.fill.describe()} "
        f"({view.guaranteed:,.0f} PFLOP/h); buying {count} stand-in{'s' if count > 1 else ''}{lost}"
    )
    return Decision(
        Rung.FALLBACK,
        Reason(text, slack_s=view.slack_s, deadline_at_risk=view.broken),
        orders=orders,
        retire=retire,
        check_at_s=_wake(s, view),
    )


def _make_room(s: Situation, usd: float) -> tuple[Retire, ...]:
    """Spot trainers to let go so that `usd` per hour fits the fallback cap (those not joined go first, then
    the pools that cost the most per node)."""
    spot = [h for h in s.holdings if h.pool.market is Market.SPOT and h.held and h.role is Role.TRAINER]
    spot.sort(key=lambda h: (-h.coming, -s.offer_of[h.pool].usd_per_hour))
    out = []
    for h in spot:
        if usd <= 1e-9:
            break
        price = s.offer_of[h.pool].usd_per_hour
        count = min(h.held, math.ceil(usd / price - 1e-9))
        out.append(Retire(h.pool, h.role, count))
        usd -= count * price
    return tuple(out)


# --- 4. a role short ----------------------------------------------------------------------------------------
def _short_roles(s: Situation, view: DeadlineView | None) -> Decision | None:
    held = _held_here(s)
    for g in s.plan:  # the plan's on-demand nodes first: the holders keep the checkpoints
        if g.market is not Market.ON_DEMAND:
            continue
        pool = Pool(s.zone, g.instance_type, g.market)
        short = g.count - held.get((pool, g.role), 0)
        if short <= 0:
            continue
        if cooling(s, pool):
            return _retry(s, view, (pool,), short, f"{short} {g.role.value} short: {pool} refused lately")
        return Decision(
            Rung.BUY_LIKE_PLAN,
            Reason(f"{short} {g.role.value} short: buying like the plan", short=short),
            orders=(Order(pool, g.role, short),),
        )
    return _short_spot(s, view, held)


def _held_here(s: Situation) -> dict[tuple[Pool, Role], int]:
    """Nodes held in the cluster's zone per (pool, role), stand-ins aside."""
    out: dict[tuple[Pool, Role], int] = {}
    for h in s.holdings:
        if h.pool.zone == s.zone and not h.stand_in:
            out[(h.pool, h.role)] = out.get((h.pool, h.role), 0) + h.held
    return out


def _spot_trainers_short(s: Situation, ready_only: bool = False) -> int:
    """The plan's Spot nodes the cluster lacks in its zone, counting those on their way unless `ready_only`."""
    planned = sum(g.count for g in s.plan if g.market is Market.SPOT)
    held = sum(
        h.ready if ready_only else h.held for h in s.holdings if h.pool.market is Market.SPOT and h.pool.zone == s.zone
    )
    return max(0, planned - held)


def _room(s: Situation) -> float:
    """$/h the cap in force leaves (the fallback's while stand-ins are held)."""
    cap = s.limits.fallback_usd_per_hour if any(h.held for h in s.stand_ins) else s.limits.max_usd_per_hour
    return cap - s.usd_per_hour()


def _short_spot(s: Situation, view: DeadlineView | None, held: dict[tuple[Pool, Role], int]) -> Decision | None:
    short = _spot_trainers_short(s)
    if short == 0:
        return None
    room = _room(s)
    refused: list[Pool] = []
    for g in s.plan:
        if g.market is not Market.SPOT:
            continue
        pool = Pool(s.zone, g.instance_type, g.market)
        price = s.price(pool)
        group_short = g.count - held.get((pool, g.role), 0)
        if price is None or group_short <= 0:
            continue
        count = min(short, group_short, affordable(room, price))
        if count <= 0:
            continue
        if cooling(s, pool):
            refused.append(pool)
            continue
        return Decision(
            Rung.BUY_LIKE_PLAN,
            Reason(f"{short} Spot trainers short: buying like the plan", short=short),
            orders=(Order(pool, g.role, count),),
        )
    if not refused:
        return None  # the cap leaves no room: the stand-ins (or repairs) hold it
    repair = _repair(s, short, room, refused)
    if repair is not None:
        return repair
    move = best_move(s)
    if move is not None:
        text = (
            f"{move.zone} instead of {s.zone}: refused for {move.outage_s / 60:.1f} min, a move costs "
            f"~{move.cost_s:.0f} s and trains at {move.rate_after:,.0f} PFLOP/h against {move.rate_now:,.0f}"
        )
        return Decision(
            Rung.MOVE,
            Reason(text, short=short, outage_s=move.outage_s, refused=tuple(refused)),
            orders=move.orders,
            move_to=move.zone,
        )
    waiting = tuple(
        o.pool for o in s.offers if o.pool.zone == s.zone and o.pool.market is Market.SPOT and cooling(s, o.pool)
    )
    return _retry(
        s,
        view,
        waiting,
        short,
        f"{short} Spot trainers short: {', '.join(map(str, waiting))} refused "
        "lately, no other Spot type in the zone within the cap",
    )


def _repair(s: Situation, short: int, room: float, refused: list[Pool]) -> Decision | None:
    """The Spot offer of the zone, other than the refusing ones, whose nodes make the cluster train fastest
    (ties: cheaper), with every count up to the shortfall the room allows."""
    base = counts_of(s, s.holdings, ready_only=False)
    best: tuple[float, float, Offer, int] | None = None
    for offer in s.offers:
        pool = offer.pool
        if (
            pool.zone != s.zone
            or pool.market is not Market.SPOT
            or pool in refused
            or cooling(s, pool)
            or not s.facts[pool.instance_type].trains
            or offer.capacity_seen == 0
        ):
            continue
        most = min(short, affordable(room, offer.usd_per_hour))
        if offer.capacity_seen is not None:
            most = min(most, offer.capacity_seen)
        for n in range(1, most + 1):
            rate = pflop_per_hour([*base, (s.facts[pool.instance_type], n)])
            key = (rate, -n * offer.usd_per_hour)
            if best is None or key > best[:2]:
                best = (rate, -n * offer.usd_per_hour, offer, n)
    if best is None or best[0] <= pflop_per_hour(base):
        return None
    _, _, offer, n = best
    text = (
        f"{short} Spot trainers short and {', '.join(map(str, refused))} refused lately: repairing with {n} "
        f"{offer.pool.instance_type} at ${offer.usd_per_hour:.4f}/h"
    )
    return Decision(
        Rung.REPAIR, Reason(text, short=short, refused=tuple(refused)), orders=(Order(offer.pool, Role.TRAINER, n),)
    )


def _retry(s: Situation, view: DeadlineView | None, refused: tuple[Pool, ...], short: int, text: str) -> Decision:
    return Decision(Rung.RETRY, Reason(text, short=short, refused=refused), check_at_s=_wake(s, view, refused))


# --- 5. back to Spot ------------------------------------------------------------------------------------------
def _return_to_spot(s: Situation, view: DeadlineView | None) -> Decision | None:
    if view is None or view.fill.offer is None:
        return None
    spare = view.spare(stand_in_types(s.stand_ins))
    short = _spot_trainers_short(s)
    if spare == 0:
        return None
    stand_in_pool = view.fill.offer.pool
    if short == 0:
        if _spot_trainers_short(s, ready_only=True):
            return None  # the Spot trainers on their way join first: a stand-in goes only once they train
        text = (
            f"the Spot trainers are whole and the deadline allows {spare} fewer stand-in{'s' if spare > 1 else ''} "
            f"(slack {view.slack_s / 60:.1f} min): {'they go' if spare > 1 else 'it goes'}"
        )
        return Decision(
            Rung.RETURN_TO_SPOT,
            Reason(text, slack_s=view.slack_s),
            retire=(Retire(stand_in_pool, Role.TRAINER, spare, stand_in=True),),
        )
    room = _room(s) + spare * view.fill.offer.usd_per_hour
    for g in s.plan:
        if g.market is not Market.SPOT:
            continue
        pool = Pool(s.zone, g.instance_type, g.market)
        price = s.price(pool)
        if price is None or cooling(s, pool):
            continue
        count = min(short, affordable(room, price))
        if count <= 0:
            continue
        text = (
            f"the deadline allows {spare} fewer stand-in{'s' if spare > 1 else ''} (slack "
            f"{view.slack_s / 60:.1f} min): buying {count} Spot trainers; the stand-ins go as they join"
        )
        order = Order(pool, g.role, count, retires=Retire(stand_in_pool, Role.TRAINER, spare))
        return Decision(Rung.RETURN_TO_SPOT, Reason(text, short=short, slack_s=view.slack_s), orders=(order,))
    return None


def _spot_to_return_to(s: Situation) -> tuple[Pool, ...]:
    """While stand-ins are held, the plan's Spot pools of the zone that are cooling: RETURN_TO_SPOT waits for
    them, so the ladder asks again when their backoff runs out (nothing else may happen meanwhile: the
    stand-ins train on, and Spot's return would go unseen until the job's next event)."""
    if not any(h.held for h in s.stand_ins):
        return ()
    pools = (Pool(s.zone, g.instance_type, g.market) for g in s.plan if g.market is Market.SPOT)
    return tuple(pool for pool in pools if cooling(s, pool))


# --- 6. nothing to do -----------------------------------------------------------------------------------------
def _hold_reason(s: Situation, view: DeadlineView | None) -> Reason:
    short = _spot_trainers_short(s)
    if view is None:
        return Reason(
            "the cluster is as planned" if short == 0 else f"{short} Spot trainers short; the cap leaves no room",
            short=short,
        )
    return Reason(
        f"slack {view.slack_s / 60:.1f} min against {view.fill.describe()}; {view.stand_ins_held} "
        "stand-ins held" + ("" if short == 0 else f", {short} Spot trainers short"),
        short=short,
        slack_s=view.slack_s,
        deadline_at_risk=view.broken,
    )


def _wake(s: Situation, view: DeadlineView | None, refused: tuple[Pool, ...] = ()) -> float | None:
    """The earliest of: a refusing pool's backoff running out, the deadline's next threshold, the budget's end."""
    times = [cooling_until(s.timing, s.refusals_of.get(pool)) for pool in refused]
    times.append(_budget_wake(s))
    if view is not None:
        times.append(view.wake_s(s.now_s, _rate_now(s, view)))
    found = [t for t in times if t is not None and math.isfinite(t)]
    return max(s.now_s, min(found)) if found else None


def _rate_now(s: Situation, view: DeadlineView) -> float:
    """The cluster's rate now (measured, else the model's times the efficiency)."""
    if s.progress.pflop_per_hour > 0:
        return s.progress.pflop_per_hour
    return pflop_per_hour(counts_of(s, s.holdings, ready_only=True)) * view.efficiency
