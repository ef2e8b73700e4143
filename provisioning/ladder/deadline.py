"""Can't Be Late's safety net for a cluster under an hourly cap: on-demand stand-ins, as many as the deadline
needs and no more.

Can't Be Late (Wu et al., NSDI'24) keeps one job on Spot while its slack allows and moves it to on-demand
once the work left would otherwise not finish, counting the time an on-demand node needs to start. Its rule
is for one instance. A deepvm cluster has many nodes, an hourly cap, and Spot survivors that keep training
while some are lost, so the rule is kept but asks for on-demand rate in proportion to the danger.

Notation (times in seconds, rates in PFLOP per hour):
    R      work left;  T = deadline - reserve - now: the time left, less a reserve for what the rate model
           does not see (relaunch pauses; work a reclaim without notice takes back)
    ground the plan's own on-demand nodes (the anchor, the holders) in the cluster's zone
    fill   the most on-demand trainers the fallback cap buys beside the ground (the plan's trainer type, so
           the cluster keeps the scaling curve it was planned with; another type only when it has none)
    g      the guaranteed rate: ground trainers + the whole fill, times the measured efficiency
    s      slack = T - R / g: how long the job may make no progress and still finish on g
    j      the time an on-demand node needs to join (order -> training)
    Q(n)   the rate of the ground trainers and n stand-ins; n_p stand-ins train now, n_h are held

(I) If every Spot node vanished now, buying the whole fill now would still finish in time:
        Q(n_p) j + g (T - j) >= R   <=>   s >= j (1 - Q(n_p) / g)
Orders take j to join, so (I) must still hold a join from now in the worst case (Spot gives nothing
meanwhile: s falls at 1 - Q(n_p)/g per second). That asks of the stand-ins held
        Q(n_h) >= g (2 - s / j) - Q(n_p)                                    (the FALLBACK rule)
With s >= 2 j nothing is needed and the job stays on Spot (Can't Be Late's "stay"); at s <= j the whole fill
is held (its "switch to on-demand"); between them the stand-ins grow with the danger. Spot progress raises s
(ds/dt = rate/g - 1), and stand-ins go back for Spot (RETURN_TO_SPOT) when the rule holds with fewer at the
slack one join lower: the hysteresis keeps a release from being undone by the next event.
Throughout, the cluster bills at most the fallback cap while it holds stand-ins (Spot nodes are retired to
make room when the stand-ins need it), where deepvm simulate's older deadline-fallback bought every missing
node on demand and billed $16.6/h on a $12 cap.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property, lru_cache

from provisioning.catalog.model import Market
from provisioning.ladder.backoff import cooling
from provisioning.ladder.situation import HOUR_S, Holding, Offer, Pool, Situation, TypeFacts, affordable
from provisioning.ladder.throughput import counts_of, efficiency, pflop_per_hour
from provisioning.planner.plan import Role

TRAINING_ROLES = (Role.TRAINER, Role.ANCHOR)
_PAST_S = 1.0  # a wake-up lands this far (seconds of slack) past the level it waits for, so the rule sees it crossed


@dataclass(frozen=True)
class Fill:
    """The stand-ins the fallback cap allows beside the plan's on-demand nodes."""

    offer: Offer | None  # their pool and price (None: not one fits the cap)
    count: int  # the whole fill
    ground: tuple[tuple[TypeFacts, int], ...]  # the plan's on-demand trainers
    facts: TypeFacts | None  # the stand-ins' type

    def rate(self, stand_ins: int) -> float:
        """The model's Q(n) for n stand-ins of the fill's type beside the ground."""
        extra = ((self.facts, stand_ins),) if self.facts is not None else ()
        return pflop_per_hour(self.ground + extra)

    @cached_property
    def full_rate(self) -> float:
        return self.rate(self.count)

    def describe(self) -> str:
        """e.g. "21 g4dn.xlarge on-demand beside the plan's 1 g4dn.xlarge anchor"."""
        if self.offer is None:
            return "no on-demand trainer within the fallback cap"
        return f"{self.count} {self.offer.pool.instance_type} on-demand"


def ground_groups(s: Situation) -> list[tuple[Pool, Role, int]]:
    """The plan's on-demand groups, in the cluster's zone."""
    return [
        (Pool(s.zone, g.instance_type, Market.ON_DEMAND), g.role, g.count)
        for g in s.plan
        if g.market is Market.ON_DEMAND
    ]


def fallback_fill(s: Situation) -> Fill:
    """The whole fill for the cluster's zone, within the fallback cap (see the module docstring)."""
    ground = ground_groups(s)
    ground_usd = sum(count * (s.price(pool) or 0.0) for pool, _, count in ground)
    ground_trainers = tuple(
        (s.facts[pool.instance_type], count) for pool, role, count in ground if role in TRAINING_ROLES
    )
    planned = {g.instance_type for g in s.plan if g.role in TRAINING_ROLES}
    usable = [
        o
        for o in s.offers
        if o.pool.zone == s.zone
        and o.pool.market is Market.ON_DEMAND
        and s.facts[o.pool.instance_type].trains
        and not cooling(s, o.pool)
    ]
    same = [o for o in usable if o.pool.instance_type in planned]
    candidates = tuple((o, s.facts[o.pool.instance_type]) for o in (same or usable))
    return _best_fill(ground_trainers, candidates, s.limits.fallback_usd_per_hour - ground_usd)


@lru_cache(maxsize=4096)
def _best_fill(
    ground: tuple[tuple[TypeFacts, int], ...], candidates: tuple[tuple[Offer, TypeFacts], ...], room_usd: float
) -> Fill:
    """The fill of the highest rate (ties: cheaper) among the candidates, every count the room allows."""
    best: tuple[float, float] | None = None
    chosen = Fill(None, 0, ground, None)
    for offer, facts in candidates:
        most = affordable(room_usd, offer.usd_per_hour)
        for n in range(1, most + 1):
            key = (pflop_per_hour((*ground, (facts, n))), -n * offer.usd_per_hour)
            if best is None or key > best:
                best, chosen = key, Fill(offer, n, ground, facts)
    return chosen


@dataclass(frozen=True)
class DeadlineView:
    """The deadline's numbers now (module docstring): what FALLBACK and RETURN_TO_SPOT act on."""

    fill: Fill
    efficiency: float  # measured / modelled: every rate below is the model's times this
    slack_s: float
    join_s: float
    present: tuple[tuple[TypeFacts, int], ...]  # ground trainers and stand-ins training now
    held: tuple[tuple[TypeFacts, int], ...]  # ground trainers (as planned) and stand-ins held
    stand_ins_held: int
    remaining_pflop: float

    @cached_property
    def guaranteed(self) -> float:
        return self.fill.full_rate * self.efficiency

    def _rate(self, counts: tuple[tuple[TypeFacts, int], ...], extra: int) -> float:
        more = ((self.fill.facts, extra),) if self.fill.facts is not None and extra else ()
        return pflop_per_hour(counts + more) * self.efficiency

    def _needs(self, slack_s: float, present: float, held: float) -> bool:
        """Whether the FALLBACK rule asks for more than `held` at this slack."""
        return held + present < self.guaranteed * (2.0 - slack_s / self.join_s) - 1e-9

    def to_order(self, rate: float) -> int:
        """Stand-ins to buy now (0: the rule holds), at most what the fill has left. When the rule asks for
        some, it is asked at the slack a join from now at the cluster's `rate` (PFLOP/h): the stand-ins a
        falling slack will want meanwhile come in one order, one relaunch, not one order per threshold."""
        if self.guaranteed <= 0:
            return 0
        present = self._rate(self.present, 0)
        room = max(0, self.fill.count - self.stand_ins_held)
        if not self._needs(self.slack_s, present, self._rate(self.held, 0)):
            return 0
        ahead = self.slack_s + min(0.0, rate / self.guaranteed - 1.0) * self.join_s
        for extra in range(1, room + 1):
            if not self._needs(ahead, present, self._rate(self.held, extra)):
                return extra
        return room

    def spare(self, by_type: dict[str, int]) -> int:
        """Stand-ins that may go back for Spot: the rule holds without them at the slack one join lower.
        Those of the fill's type go (`by_type`: the stand-ins held per type, all training)."""
        facts = self.fill.facts
        if facts is None or self.guaranteed <= 0:
            return 0
        can_go = by_type.get(facts.instance_type, 0)
        spare = 0
        for k in range(1, can_go + 1):
            fewer_present, fewer_held = _less(self.present, facts, k), _less(self.held, facts, k)
            if self._needs(self.slack_s - self.join_s, self._rate(fewer_present, 0), self._rate(fewer_held, 0)):
                break
            spare = k
        return spare

    @property
    def broken(self) -> bool:
        """Invariant (I) fails: even the whole fill bought now may finish late."""
        if self.guaranteed <= 0:
            return True
        return self.slack_s < self.join_s * (1.0 - self._rate(self.present, 0) / self.guaranteed)

    def wake_s(self, now_s: float, rate: float) -> float | None:
        """When, at the cluster's rate now, the slack reaches the level where the rule asks for more
        stand-ins, or where some could go (None: neither ever, at this rate)."""
        g = self.guaranteed
        if g <= 0:
            return None
        present, held = self._rate(self.present, 0), self._rate(self.held, 0)
        drift = rate / g - 1.0  # ds/dt
        need_at = self.join_s * (2.0 - (present + held) / g) - _PAST_S  # just below it, more are needed
        if drift < 0 and self.slack_s > need_at:
            return now_s + (self.slack_s - need_at) / -drift
        facts = self.fill.facts
        if drift <= 0 or facts is None or not self.stand_ins_held:
            return None
        fewer = self._rate(_less(self.present, facts, 1), 0) + self._rate(_less(self.held, facts, 1), 0)
        release_at = self.join_s * (3.0 - fewer / g) + _PAST_S  # just above it, one may go (spare())
        return now_s + (release_at - self.slack_s) / drift if self.slack_s < release_at else None


def _less(counts: tuple[tuple[TypeFacts, int], ...], facts: TypeFacts, k: int) -> tuple[tuple[TypeFacts, int], ...]:
    """`counts` with k fewer nodes of `facts`' type, taken from its last entry (the stand-ins)."""
    out = list(counts)
    for i in range(len(out) - 1, -1, -1):
        if out[i][0] == facts and out[i][1] > 0:
            taken = min(k, out[i][1])
            out[i] = (facts, out[i][1] - taken)
            k -= taken
            if k == 0:
                break
    return tuple(out)


def deadline_view(s: Situation) -> DeadlineView | None:
    """The deadline's numbers for this situation (None without a deadline)."""
    if s.limits.deadline_s is None:
        return None
    fill = fallback_fill(s)
    e = efficiency(s)
    guaranteed = fill.full_rate * e
    remaining = max(0.0, s.progress.remaining_pflop)
    left_s = s.limits.deadline_s - s.timing.reserve_s - s.now_s
    slack = left_s - remaining / guaranteed * HOUR_S if guaranteed > 0 else -math.inf
    ground = [
        h
        for h in s.holdings
        if h.pool.market is Market.ON_DEMAND and not h.stand_in and h.pool.zone == s.zone and h.role in TRAINING_ROLES
    ]
    stand_ins = [h for h in s.stand_ins if h.pool.zone == s.zone]
    present = tuple(counts_of(s, ground + stand_ins, ready_only=True))
    held = fill.ground + tuple(counts_of(s, stand_ins, ready_only=False))
    return DeadlineView(fill, e, slack, s.timing.join_s, present, held, sum(h.held for h in stand_ins), remaining)


def earliest_finish_s(s: Situation) -> float:
    """The soonest the job can end for sure: the whole fill from now, plus the reserve (math.inf when no
    on-demand trainer fits the fallback cap). What `deepvm simulate` checks a --deadline against."""
    guaranteed = fallback_fill(s).full_rate * efficiency(s)
    if guaranteed <= 0:
        return math.inf
    return s.now_s + max(0.0, s.progress.remaining_pflop) / guaranteed * HOUR_S + s.timing.reserve_s


def stand_in_types(holdings: tuple[Holding, ...]) -> dict[str, int]:
    """Stand-ins that train now, per instance type (those on their way cannot be given back yet)."""
    out: dict[str, int] = {}
    for h in holdings:
        if h.stand_in:
            out[h.pool.instance_type] = out.get(h.pool.instance_type, 0) + h.ready
    return out
