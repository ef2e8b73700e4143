"""The recovery ladder on the live job: what the controller tells it, and what it keeps between two decisions.

provisioning/ladder decides, as one pure function; `deepvm simulate` asks it about a simulated market
(simulation/market_run.py), the controller about the cluster it runs, through this module. What it is told
(provisioning/ladder/__init__.py lists it):
- now_s: the controller's wall clock; the deadline counts from the job's start (its row's started_at), so a
  controller restarted or resumed counts from the same moment;
- zone, zones: the cluster's zone (the plan's, until a move), and, when the job's checkpoints can travel
  (level l3: training.control.move says why), every other zone of the region where `up` found a subnet of
  the cluster's VPC (Cluster.zones), so the ladder may answer MOVE; moving_to: a move under way;
- head, head_apart: the node the controller runs on (the managed job's head; none for --controller local),
  and whether a move left it behind (its slot retired from the job): it bills on as the control node;
- plan, types, offers: the plan's groups; its zone's pools at the catalog's prices, the repairs' other GPU
  types among them (provisioning/ladder/offers.py), computed where the catalog is and handed over with the
  job (TrainRequest.market); a pool the job holds that they lack is priced as its nodes were bought;
- holdings: the node pool's nodes by (pool, role, stand-in): NEW and READY ready, BOUGHT and the orders not
  bought yet coming; an AT_RISK node (a rebalance recommendation) not at all, so that its replacement is
  bought. A stand-in is an on-demand trainer beyond the plan's own on-demand trainers of its type: a fact
  of the nodes, which a restarted controller finds again;
- refusals: per pool, the purchases in a row that gave less than asked (CreateFleet's Errors[], read by
  Cluster.add_nodes; a purchase whose nodes could not be staged counts too, or a broken setup would be
  bought again in a loop), with the first's and the newest's time; a pool that gave all drops out;
- progress: steps left x PFLOP per step, and the rate over the running attempt's recent steps (0 between
  attempts). PFLOP per step is the model's rate of the trainers held when a rate is first measured over a
  whole window (_RATE_STEPS steps: an attempt's first lines may come in a burst, and two steps milliseconds
  apart once set it at a fraction of the truth, which made a job with no trainer left look minutes ahead of
  its deadline), over that rate; fixed from then on, it lets the ladder's efficiency (measured / modelled)
  say how fast this job runs on any other cluster;
- limits: the plan's price cap (the --max-price it was planned under, else its price), the job's deadline,
  budget and fallback cap (TrainRequest.limits), its cost so far;
- timing: the replacement delay (an order to its nodes ready) and the relaunch (an attempt's end to the
  next one's first step) as this job measured them on the same clock, the simulator's defaults until then.
Nothing here acts: training.control.nodes carries the decisions out.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from provisioning.catalog.model import Market
from provisioning.cloud.types import NodeRecord
from provisioning.ladder.backoff import backoff_s
from provisioning.ladder.decision import Decision, Order
from provisioning.ladder.offers import MarketOffers, market_offers
from provisioning.ladder.situation import (
    HOUR_S,
    Holding,
    Limits,
    Offer,
    PlannedGroup,
    Pool,
    Progress,
    Refusals,
    Situation,
    Timing,
    TypeFacts,
)
from provisioning.ladder.throughput import pflop_per_hour
from provisioning.planner.interruptions import MEASURED_RELAUNCH_S, REPLACEMENT_DELAY_S
from provisioning.planner.plan import NodeGroup, Plan, Role
from training.control.nodepool import NodeStatus, Slot
from training.control.replacements import NodeOrder
from training.shared.limits import JobLimits

_RATE_STEPS = 20  # the measured rate: over the running attempt's newest steps
_RATE_MOVED = 0.2  # a rate this much off the one the last decision saw asks again (the deadline's slack moves)
_READY = (NodeStatus.NEW, NodeStatus.READY)
_CAP_SLACK = 1e-6  # $/h: a plan's price is rounded to 6 digits in its file; its own pools must fit its cap
_MIN_WAKE_S = 1.0  # a timer set in the past (a threshold just crossed) asks again this much later, not at every tick
_MIN_JOIN_S = 1.0  # a join measured shorter counts this long (the deadline's rule divides by it)


@dataclass
class _Pending:
    """An order placed and not settled yet."""

    order: Order  # the ladder's (its pool, role, stand-in, the stand-ins it lets go)
    bought: NodeOrder  # what its thread buys
    placed_at: float  # on the market's clock
    unbought: int  # its nodes not bought yet (0 once its thread said what it bought)
    moving: bool = False  # bought for the move under way


@dataclass
class _Swap:
    """Stand-ins of `pool` that go as the nodes of a Spot order join (RETURN_TO_SPOT)."""

    pool: Pool
    left: int


@dataclass
class _Rate:
    """Steps per hour over the running attempt's newest steps, and PFLOP per step once fixed."""

    steps: deque[tuple[int, float]] = field(default_factory=lambda: deque(maxlen=_RATE_STEPS))
    pflop_per_step: float | None = None
    seen_by_decision: float = 0.0  # the steps per hour the newest decision was told
    trainers: tuple[tuple[Pool, int], ...] = ()  # the trainers ready when the newest decision was asked

    def per_hour(self) -> float:
        if len(self.steps) < 2:
            return 0.0
        (first, t0), (last, t1) = self.steps[0], self.steps[-1]
        return (last - first) / (t1 - t0) * HOUR_S if t1 > t0 and last > first else 0.0


@dataclass(frozen=True)
class Outage:
    """Orders failed in a row for a reason that was no pool's (LiveMarket.outage), and until when no other goes."""

    in_row: int
    until_s: float  # on the market's clock


class LiveMarket:
    """What the live job's ladder is told, and the orders, refusals and times it keeps (module docstring)."""

    def __init__(
        self,
        plan: Plan,
        offers: MarketOffers,
        limits: JobLimits,
        started_at: str,
        clock: Callable[[], float] = time.time,
        movable: bool = False,
        head: str | None = None,
        zone: str | None = None,
    ) -> None:
        self.plan_zone = plan.availability_zone  # where the plan put the cluster
        self.zone = zone or self.plan_zone  # where it is (`zone`: a job handed over to a head that moved with it)
        others = sorted({o.pool.zone for o in offers.offers} - {self.zone})
        self.zones = (self.zone, *others) if movable else (self.zone,)  # the zones the ladder is offered
        self.moving_to: str | None = None  # a move under way (its orders are `_Pending.moving`)
        self.head = head  # the instance the controller runs on (None: it does not run on the cluster)
        self.plan = tuple(PlannedGroup(g.instance_type, g.market, g.role, g.count) for g in plan.nodes)
        self.offers, self.types = offers.offers, offers.types
        self.facts = {t.instance_type: t for t in offers.types}
        price = {o.pool: o.usd_per_hour for o in offers.offers}
        at_offers = sum(
            g.count * price.get(Pool(self.zone, g.instance_type, g.market), g.usd_per_hour) for g in plan.nodes
        )
        cap = max(plan.price_cap or 0.0, plan.price_per_hour, at_offers) + _CAP_SLACK
        self.limits = Limits(
            max_usd_per_hour=cap,
            fallback_usd_per_hour=cap if limits.fallback_max_price is None else limits.fallback_max_price,
            deadline_s=None if limits.deadline_hours is None else _epoch(started_at) + limits.deadline_hours * HOUR_S,
            budget_usd=limits.budget_usd,
        )
        self.clock = clock
        self.pending: list[_Pending] = []
        self.swaps: list[_Swap] = []
        self.refusals: dict[Pool, Refusals] = {}
        # orders in a row that failed for no pool's want of capacity (the API away, credentials, a right): not
        # the pool's refusals, so the ladder climbs to no dearer type for them; no order goes out until backoff
        self.outage: Outage | None = None
        self.rate = _Rate()
        self.join_s, self.relaunch_s = REPLACEMENT_DELAY_S, MEASURED_RELAUNCH_S
        self.ended_at: float | None = None  # when the newest attempt ended, until the next one's first step
        self.check_at_s: float | None = None  # the newest decision's timer

    # --- what happened -----------------------------------------------------------------------------------
    def ordered(self, order: Order, bought: NodeOrder, move_to: str | None = None) -> None:
        """The order is being bought (`move_to`: for the move to that zone)."""
        if move_to is not None:
            self.moving_to = move_to
        self.pending.append(_Pending(order, bought, self.clock(), order.count, moving=move_to is not None))
        if order.retires is not None and order.retires.count:
            self.swaps.append(_Swap(order.retires.pool, order.retires.count))

    def bought(self, order: NodeOrder) -> None:
        """The order's thread bought what it could: those nodes are the pool's now (BOUGHT)."""
        found = self._pending(order)
        if found is not None:
            found.unbought = 0

    def settled(self, order: NodeOrder, ready: int, failed: bool, refused: bool) -> tuple[Pool, int]:
        """The order ended with `ready` nodes ready (`failed`: fewer than asked, or none staged; `refused`:
        because the pool had no capacity). Only a refusal counts against the pool (an API outage, a node that
        would not prepare, say nothing of its capacity); returns the stand-ins' pool and how many of them go
        now (RETURN_TO_SPOT's swap, one per node of a Spot order joined; (pool, 0) when none)."""
        found = self._pending(order)
        now = self.clock()
        pool = Pool(order.zone, order.group.instance_type, order.group.market)
        if found is not None:
            self.pending.remove(found)
            if not failed:
                self.join_s = max(now - found.placed_at, _MIN_JOIN_S)
        if failed and not refused and ready == 0:
            in_row = 1 if self.outage is None else self.outage.in_row + 1
            self.outage = Outage(in_row, now + backoff_s(Timing.of(self.join_s, self.relaunch_s), in_row))
        elif ready:
            self.outage = None
        seen = self.refusals.get(pool)
        if refused:
            self.refusals[pool] = (
                Refusals(pool, 1, now, now) if seen is None else Refusals(pool, seen.in_row + 1, seen.first_s, now)
            )
        elif not failed:
            self.refusals.pop(pool, None)
        if found is None or found.order.retires is None or not ready:
            return pool, 0
        swap = next((s for s in self.swaps if s.pool == found.order.retires.pool and s.left), None)
        if swap is None:
            return pool, 0
        going = min(ready, swap.left)
        swap.left -= going
        self.swaps = [s for s in self.swaps if s.left]
        return swap.pool, going

    def move_settled(self) -> bool:
        """Whether a move is under way and every order bought for it has ended."""
        return self.moving_to is not None and not any(p.moving for p in self.pending)

    def move_ended(self, moved: bool) -> None:
        """The move under way switched to its zone (`moved`), or was called off."""
        if moved and self.moving_to is not None:
            self.zone = self.moving_to
            self.zones = (self.zone, *sorted(set(self.zones) - {self.zone}))
        self.moving_to = None

    def stepped(self, step: int) -> bool:
        """Trainer 0's step, now; whether the rate moved enough since the newest decision that the ladder
        should be asked again (also when the window first fills: PFLOP per step is fixed then). The first
        step after an attempt ended measures the relaunch."""
        now = self.clock()
        if self.ended_at is not None:
            self.relaunch_s, self.ended_at = max(now - self.ended_at, 0.0), None
        self.rate.steps.append((step, now))
        per_hour = self.rate.per_hour()
        seen = self.rate.seen_by_decision
        if self.rate.pflop_per_step is None and len(self.rate.steps) == _RATE_STEPS and per_hour > 0:
            return True
        return len(self.rate.steps) >= 5 and per_hour > 0 and (seen == 0 or abs(per_hour - seen) > _RATE_MOVED * seen)

    def waited(self) -> None:
        """The controller waited for nodes (no trainer or no holder left): the relaunch it measures counts from
        now, or the deadline's reserve (six relaunches) would count the wait six times over."""
        if self.ended_at is not None:
            self.ended_at = self.clock()

    def attempt_ended(self) -> None:
        """An attempt ended: nothing trains until the next one's first step (the relaunch it measures)."""
        self.rate.steps.clear()
        self.ended_at = self.clock()

    def decided(self, decision: Decision) -> None:
        at = decision.check_at_s
        self.check_at_s = None if at is None else max(at, self.clock() + _MIN_WAKE_S)

    # --- asking ------------------------------------------------------------------------------------------
    def cloud_cooling_s(self) -> float | None:
        """Seconds until an order may go out again after failures that were no pool's (None: it may now)."""
        if self.outage is None or self.clock() >= self.outage.until_s:
            return None
        return self.outage.until_s - self.clock()

    def wake_in(self, seconds: float) -> None:
        """Look again in `seconds` (or sooner, when the newest decision's timer says so)."""
        at = self.clock() + max(seconds, _MIN_WAKE_S)
        self.check_at_s = at if self.check_at_s is None else min(self.check_at_s, at)

    def due(self) -> bool:
        """Whether the newest decision's timer has run out."""
        return self.check_at_s is not None and self.clock() >= self.check_at_s

    def wait_s(self) -> float | None:
        """Seconds until the newest decision's timer (None: it set none)."""
        return None if self.check_at_s is None else max(0.0, self.check_at_s - self.clock())

    def on_their_way(self) -> int:
        """Nodes ordered and not settled yet."""
        return sum(p.bought.count for p in self.pending)

    def situation(
        self, slots: Iterable[Slot], records: Mapping[str, NodeRecord], steps_left: int, spent_usd: float
    ) -> Situation:
        """The situation now (module docstring)."""
        holdings = self._holdings(slots, records)
        offers, types = self._priced(holdings, records)
        trainers = tuple(
            sorted(((h.pool, h.ready) for h in holdings if h.ready and h.role is not Role.HOLDER), key=str)
        )
        if trainers != self.rate.trainers:  # a node left or joined: the steps measured were another cluster's
            self.rate.steps.clear()
            self.rate.trainers = trainers
        per_hour = self.rate.per_hour()
        self.rate.seen_by_decision = per_hour
        facts = {t.instance_type: t for t in types}
        if self.rate.pflop_per_step is None and per_hour > 0 and len(self.rate.steps) == _RATE_STEPS:
            modelled = pflop_per_hour((facts[h.pool.instance_type], h.ready) for h in holdings)
            self.rate.pflop_per_step = modelled / per_hour if modelled > 0 else None
        per_step = self.rate.pflop_per_step or 0.0
        progress = Progress(remaining_pflop=max(steps_left, 0) * per_step, pflop_per_hour=per_hour * per_step)
        limits = Limits(
            self.limits.max_usd_per_hour,
            self.limits.fallback_usd_per_hour,
            self.limits.deadline_s,
            self.limits.budget_usd,
            spent_usd,
        )
        head, head_apart = self._head(slots, records)
        return Situation(
            now_s=self.clock(),
            zone=self.zone,
            zones=self.zones,
            plan=self.plan,
            types=types,
            holdings=holdings,
            offers=offers,
            refusals=tuple(self.refusals.values()),
            progress=progress,
            limits=limits,
            timing=Timing.of(self.join_s, self.relaunch_s),
            moving_to=self.moving_to,
            head=head,
            head_apart=head_apart,
        )

    def node_order(self, order: Order) -> NodeOrder:
        """What the buyer buys for one of the ladder's orders: its pool's type and market, at the offer's price."""
        facts = self.facts.get(order.pool.instance_type, TypeFacts(order.pool.instance_type, 0.0, None))
        price = next(o.usd_per_hour for o in self.offers if o.pool == order.pool)
        group = NodeGroup(
            order.pool.instance_type, order.pool.market, order.count, order.role, price, facts.gpus, facts.tflops
        )
        return NodeOrder(group, order.pool.zone)

    def stand_ins(
        self, slots: Iterable[Slot], records: Mapping[str, NodeRecord], pool: Pool | None = None
    ) -> list[str]:
        """The ready stand-ins (of `pool`; None: of every pool), newest first: on-demand trainers beyond the
        plan's own on-demand trainers of their type."""
        by_pool: dict[Pool, list[tuple[str, str]]] = {}
        for slot in slots:
            record = records.get(slot.instance_id)
            if (
                record is None
                or slot.status is not NodeStatus.READY
                or record.role is not Role.TRAINER
                or record.market is not Market.ON_DEMAND
            ):
                continue
            mine = _pool_of(record, self.plan_zone)
            if pool is None or mine == pool:
                by_pool.setdefault(mine, []).append((record.launched_at, slot.instance_id))
        out: list[str] = []
        for mine, nodes in by_pool.items():
            spare = len(nodes) - self._planned_on_demand_trainers(mine.instance_type)
            out += [instance_id for _, instance_id in sorted(nodes, reverse=True)[: max(0, spare)]]
        return out

    def pool_of(self, record: NodeRecord) -> Pool:
        """The pool a node was bought from."""
        return _pool_of(record, self.plan_zone)

    # --- internals -----------------------------------------------------------------------------------------
    def _head(self, slots: Iterable[Slot], records: Mapping[str, NodeRecord]) -> tuple[Offer | None, bool]:
        """The head's pool at the price it was bought, and whether it is apart: no longer held by the job."""
        record = records.get(self.head) if self.head is not None else None
        if record is None:
            return None, False
        slot = next((s for s in slots if s.instance_id == self.head), None)
        held = slot is not None and slot.status in (*_READY, NodeStatus.AT_RISK, NodeStatus.BOUGHT)
        return Offer(_pool_of(record, self.plan_zone), record.usd_per_hour), not held

    def _pending(self, order: NodeOrder) -> _Pending | None:
        return next((p for p in self.pending if p.bought == order), None)

    def _planned_on_demand_trainers(self, instance_type: str) -> int:
        return sum(
            g.count
            for g in self.plan
            if (g.instance_type, g.market, g.role) == (instance_type, Market.ON_DEMAND, Role.TRAINER)
        )

    def _holdings(self, slots: Iterable[Slot], records: Mapping[str, NodeRecord]) -> tuple[Holding, ...]:
        counts: dict[tuple[Pool, Role], list[int]] = {}
        for slot in slots:
            record = records.get(slot.instance_id)
            if record is None or slot.status not in (*_READY, NodeStatus.BOUGHT):
                continue
            key = (_pool_of(record, self.plan_zone), record.role)
            counts.setdefault(key, [0, 0])[0 if slot.status in _READY else 1] += 1
        for p in self.pending:
            counts.setdefault((p.order.pool, p.order.role), [0, 0])[1] += p.unbought
        out: list[Holding] = []
        for (pool, role), (ready, coming) in counts.items():
            if not (pool.market is Market.ON_DEMAND and role is Role.TRAINER and pool.zone == self.zone):
                out.append(Holding(pool, role, ready, coming))
                continue
            planned = self._planned_on_demand_trainers(pool.instance_type)
            own_ready = min(ready, planned)
            own_coming = min(coming, planned - own_ready)
            if own_ready or own_coming:
                out.append(Holding(pool, role, own_ready, own_coming))
            if ready > own_ready or coming > own_coming:
                out.append(Holding(pool, role, ready - own_ready, coming - own_coming, stand_in=True))
        return tuple(out)

    def _priced(
        self, holdings: tuple[Holding, ...], records: Mapping[str, NodeRecord]
    ) -> tuple[tuple[Offer, ...], tuple[TypeFacts, ...]]:
        """The offers and type facts, with a price and facts for any pool held that the offers lack (a node
        adopted from an older controller): the ladder counts every node held at a price."""
        priced = {o.pool for o in self.offers}
        paid = {_pool_of(r, self.plan_zone): r.usd_per_hour for r in records.values()}
        extra = tuple(Offer(h.pool, paid.get(h.pool, 0.0)) for h in holdings if h.pool not in priced)
        known = set(self.facts)
        unknown = tuple(TypeFacts(name, 0.0, None) for name in sorted({h.pool.instance_type for h in holdings} - known))
        return self.offers + tuple(dict.fromkeys(extra)), self.types + unknown


def job_offers(plan: Plan, zones: Sequence[str]) -> MarketOffers:
    """The pools of `zones` (the cluster's own and those it may move to: Cluster.zones) the live ladder may buy
    from, at the prices of the catalog the plan names (its own, the repairs' other GPU types, the stand-ins');
    InputError when that catalog cannot be read."""
    from provisioning.clusters.plan_choice import catalog_of

    return market_offers(plan, catalog_of(plan), zones or (plan.availability_zone,), repairs=True)


def _pool_of(record: NodeRecord, zone: str) -> Pool:
    """The pool a node was bought from (a record without a zone is of the cluster's)."""
    return Pool(record.availability_zone or zone, record.instance_type, record.market)


def _epoch(iso: str) -> float:
    """A stored UTC time (utc_now's ISO-8601) as seconds since the epoch."""
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()
