"""Runs of the `deepvm` policy: the market's events in time order, and the recovery ladder asked after each.

The model is simulation/reference.py's (training at the planner's rate for the trainers joined, a pause per
relaunch, one relaunch at a time, the work since the last checkpoint lost to a reclaim without notice),
with the ladder deciding what is bought where, so it is written as one plain loop per run: the ladder is
a Python function of a Situation, and the same function decides on the head
(provisioning/ladder/ladder.py). What differs from the plan's fixed slots:
- Orders are answered as EC2 answers CreateFleet (instant): on demand in full; Spot up to the zone's free
  capacity (simulation/market.py), the rest refused, which the ladder sees as a refusal of that pool.
  A node bought at the job's start (t = 0) is up at once, as every policy's first nodes are; any later one
  joins a replacement delay after its order, at a relaunch.
- A Spot node takes the lowest free capacity level of its zone and is reclaimed when the zone's capacity
  drops below it (or its lifetime ends), booting or not; a Spot node reclaimed before it joined costs no
  relaunch.
- Every node bills from its order (not from its join, as the fixed-slot policies count): a move's new
  nodes, and the Spot nodes that replace stand-ins, bill while they boot beside the nodes they replace.
- A retired node stops billing at once; retiring one that trains is a relaunch without it.
- A move's nodes join together; then the old zone's nodes are retired and the job relaunches once.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from provisioning.catalog.model import Market
from provisioning.ladder.decision import Decision, Order, Retire, Rung
from provisioning.ladder.ladder import decide
from provisioning.ladder.situation import HOUR_S, Holding, Offer, Pool, Progress, Refusals, Situation
from provisioning.ladder.throughput import pflop_per_hour
from provisioning.planner.plan import Role
from simulation.draws import Draws
from simulation.engine import RunOutcomes
from simulation.errors import PACE_FROM, check_pace, check_time
from simulation.market import MarketCase
from simulation.recovery import relaunch_end

_MAX_ACTIONS = 64  # decisions that act, in a row at one instant: more is a ladder that never settles (a bug)


@dataclass
class _Node:
    pool: Pool
    role: Role
    stand_in: bool
    level: int  # its capacity level in its zone (Spot); -1 on demand
    occupant: int  # how many nodes that level had before it (its draws' address)
    joins_h: float
    dies_h: float  # math.inf on demand
    replaces: Pool | None = None  # retire a stand-in of this pool as it joins (RETURN_TO_SPOT)
    moving: bool = False  # bought for the move under way
    joined: bool = False

    @property
    def trains(self) -> bool:
        return self.role is not Role.HOLDER


@dataclass(frozen=True)
class MarketRun:
    makespan_h: float
    cost_usd: float
    interruptions: int
    restarts: int
    decisions: tuple[tuple[float, Decision], ...] = field(default_factory=tuple)  # (hours, decision) that acted


def simulate_market(
    case: MarketCase, draws: Draws | None = None, progress: Callable[[int, int], None] | None = None
) -> RunOutcomes:
    """Every run of the case, in run order."""
    draws = draws or case.draws()
    runs = case.workload.runs
    out = RunOutcomes(np.zeros(runs), np.zeros(runs), np.zeros(runs, np.int64), np.zeros(runs, np.int64))
    for run in range(runs):
        one = run_market(case, draws, run)
        out.makespan_h[run], out.cost_usd[run] = one.makespan_h, one.cost_usd
        out.interruptions[run], out.restarts[run] = one.interruptions, one.restarts
        if progress is not None and ((run + 1) % 16 == 0 or run + 1 == runs):
            progress(run + 1, runs)
    return out


def run_market(case: MarketCase, draws: Draws, run: int, *, record: bool = False) -> MarketRun:
    """Run `run` of `draws`; `record` keeps every decision that acted."""
    return _Run(case, draws, run, record).result()


def run_offset_h(case: MarketCase, draws: Draws, run: int = 0) -> float:
    """Where run `run` starts in the traces, in hours: `deepvm chaos` replays a capacity series from there."""
    return float(draws.start_share[run]) * case.horizon_h


class _Run:
    def __init__(self, case: MarketCase, draws: Draws, run: int, record: bool) -> None:
        self.case, self.draws, self.run, self.record = case, draws, run, record
        self.recovery = case.workload.recovery
        self.offset = run_offset_h(case, draws, run)
        self.t = self.done = self.checkpoint = self.pause = self.cost = 0.0
        self.interruptions = self.restarts = 0
        self.nodes: list[_Node] = []
        self.refusals: dict[Pool, Refusals] = {}
        self.zone, self.moving_to = case.plan.availability_zone, None
        self.wake = math.inf
        self.occupied: dict[str, set[int]] = {z.zone: set() for z in case.zones}
        self.occupants: dict[tuple[str, int], int] = {}
        self.price = {o.pool: o.usd_per_hour for o in case.offers}
        self.facts = {t.instance_type: t for t in case.types}
        self.decisions: list[tuple[float, Decision]] = []
        self._rate_now: float | None = None
        self._usd_now: float | None = None
        self._holdings_now: tuple[Holding, ...] | None = None
        self._offers: dict[tuple[int, ...], tuple[Offer, ...]] = {}  # per free capacity of each zone
        self._zones = tuple(z.zone for z in case.zones)
        self._act()

    # --- the loop ---------------------------------------------------------------------------------------------
    def result(self) -> MarketRun:
        work = self.case.workload.work_pflop
        events = 0
        while True:
            events += 1
            if events % PACE_FROM == 0:  # as the engine's runs: on course for endless events is refused early
                check_pace(events, self.done / work, self.case.plan.summary())
            rate = self._rate()
            start = max(self.t, self.pause)
            t_finish = start + (work - self.done) / rate if rate > 0 else math.inf
            t_death = min((n.dies_h for n in self.nodes), default=math.inf)
            t_join = min((n.joins_h for n in self.nodes if not n.joined), default=math.inf)
            t_event = min(t_death, t_join, self.wake)
            t_next = min(t_finish, t_event)
            check_time(t_next, self.case.workload.max_hours, self.case.plan.summary())
            self.done = work if t_finish <= t_event else self.done + rate * max(t_next - start, 0.0)
            self.cost += self._usd_per_hour() * (t_next - self.t)
            self.t = t_next
            if t_finish <= t_event:
                return MarketRun(self.t, self.cost, self.interruptions, self.restarts, tuple(self.decisions))
            dying = [n for n in self.nodes if n.dies_h == self.t]
            if dying:
                self._deaths(dying, rate)
            joining = [n for n in self.nodes if not n.joined and n.joins_h == self.t]
            if joining:
                self._joins(joining, self._rate())
            self._act()

    def _rate(self) -> float:
        """The model's rate of the trainers joined (kept until the nodes change)."""
        if self._rate_now is None:
            counts: dict[str, int] = {}
            for n in self.nodes:
                if n.joined and n.trains:
                    counts[n.pool.instance_type] = counts.get(n.pool.instance_type, 0) + 1
            measured, trainers = self.case.measured_rates, sum(counts.values())
            if measured and trainers:
                self._rate_now = measured[min(trainers, len(measured)) - 1]
            else:
                self._rate_now = pflop_per_hour((self.facts[name], count) for name, count in sorted(counts.items()))
        return self._rate_now

    def _usd_per_hour(self) -> float:
        """What every node held bills (kept until the nodes change)."""
        if self._usd_now is None:
            self._usd_now = sum(self.price[n.pool] for n in self.nodes)
        return self._usd_now

    def _changed(self) -> None:
        self._rate_now = self._usd_now = self._holdings_now = None

    # --- what the market does -------------------------------------------------------------------------------
    def _deaths(self, dying: list[_Node], rate: float) -> None:
        lost_trainer, without_notice, share = False, False, 0.0
        for n in dying:
            self._remove(n)
            if not n.joined:
                continue  # reclaimed while it booted: the ladder buys again
            lost_trainer = lost_trainer or n.trains
            self.interruptions += 1
            slot, occupant = self._address(n)
            if not bool(self.draws.notice(self.run, slot, occupant)):
                without_notice = True
                share = max(share, float(self.draws.lost_share(self.run, slot, occupant)))
        if not lost_trainer:
            return
        if without_notice:
            interval = self.recovery.checkpoint_interval_h
            self.done -= min(share * interval * rate, self.done - self.checkpoint)
        self.checkpoint = self.done
        self._relaunch(fails=without_notice)

    def _joins(self, joining: list[_Node], rate_before: float) -> None:
        self._changed()
        for n in joining:
            n.joined = True
            if n.replaces is not None:
                self._retire_one(n.replaces, stand_in=True)
        if self.moving_to is not None and any(n.moving for n in joining):
            self._complete_move()
        self._fold_in(rate_before)

    def _complete_move(self) -> None:
        """The move's nodes have joined: the old zone's are retired, and the cluster is in the new zone."""
        for old in [n for n in self.nodes if not n.moving]:
            self._remove(old)
        for n in self.nodes:
            n.moving = False
        self.zone, self.moving_to = self.moving_to or self.zone, None

    def _fold_in(self, rate_before: float) -> None:
        """A planned relaunch with the nodes now joined (or without those retired): a relaunch of the
        running job, or its launch when nothing trained."""
        self.checkpoint = self.done
        if rate_before > 0:
            self._relaunch(fails=False)
        else:
            self.pause = max(self.pause, self.t + self.recovery.notice_pause_h)

    def _relaunch(self, fails: bool) -> None:
        end = relaunch_end(self.t, self.pause, fails, self.recovery)
        if end is not None:
            self.pause = end
            self.restarts += 1

    def _remove(self, n: _Node) -> None:
        self._changed()
        self.nodes.remove(n)
        if n.level >= 0:
            self.occupied[n.pool.zone].discard(n.level)

    def _retire_one(self, pool: Pool, stand_in: bool) -> None:
        """Retire one node of the pool: one not joined first, else the newest."""
        mine = [n for n in self.nodes if n.pool == pool and n.stand_in == stand_in and not n.moving]
        if mine:
            mine.sort(key=lambda n: (n.joined, -n.joins_h))
            self._remove(mine[0])

    def _address(self, n: _Node) -> tuple[int, int]:
        """(slot, occupant) of a Spot node in the draws: zone x M + level, and its level's count before it."""
        return self.case.zone_index[n.pool.zone] * self.case.levels + n.level, n.occupant

    # --- the ladder -----------------------------------------------------------------------------------------------
    def _act(self) -> None:
        for _ in range(_MAX_ACTIONS):
            decision = decide(self._situation())
            if not decision.rung.acts:
                if decision.rung is Rung.STOP:
                    raise RuntimeError("deepvm simulate gives no budget: the ladder cannot stop at one")
                wake = math.inf if decision.check_at_s is None else decision.check_at_s / HOUR_S
                self.wake = max(wake, self.t + 1e-9)
                return
            if self.record:
                self.decisions.append((self.t, decision))
            self._apply(decision)
        raise RuntimeError(f"the ladder acted {_MAX_ACTIONS} times at {self.t:.4f} h without settling")

    def _situation(self) -> Situation:
        case = self.case
        free = tuple(self._free(z.zone) for z in case.zones)
        if free not in self._offers:
            seen = dict(zip(case.zone_index, free))
            self._offers[free] = tuple(
                Offer(o.pool, o.usd_per_hour, seen[o.pool.zone]) if o.pool.market is Market.SPOT else o
                for o in case.offers
            )
        remaining = case.workload.work_pflop - self.done
        return Situation(
            now_s=self.t * HOUR_S,
            zone=self.zone,
            zones=self._zones,
            plan=case.planned,
            types=case.types,
            holdings=self._holdings(),
            offers=self._offers[free],
            refusals=tuple(self.refusals.values()),
            progress=Progress(remaining, self._rate()),
            limits=case.limits,
            timing=case.timing,
            moving_to=self.moving_to,
        )

    def _holdings(self) -> tuple[Holding, ...]:
        """The nodes held, per pool, role and stand-in or not (kept until the nodes change)."""
        if self._holdings_now is None:
            counts: dict[tuple[Pool, Role, bool], list[int]] = {}
            for n in self.nodes:
                entry = counts.setdefault((n.pool, n.role, n.stand_in), [0, 0])
                entry[0 if n.joined else 1] += 1
            self._holdings_now = tuple(
                Holding(pool, role, ready, coming, stand_in)
                for (pool, role, stand_in), (ready, coming) in counts.items()
            )
        return self._holdings_now

    def _free(self, zone: str) -> int:
        market = self.case.zones[self.case.zone_index[zone]]
        return max(0, market.capacity(self.offset, self.t, self.case.levels) - len(self.occupied[zone]))

    def _apply(self, d: Decision) -> None:
        rate_before = self._rate()
        retired_trainer = False
        for r in d.retire:
            retired_trainer = self._retire(r) or retired_trainer
        if d.move_to is not None:
            self.moving_to = d.move_to
        for order in d.orders:
            self._buy(order, moving=d.move_to is not None)
        if d.move_to is not None and self.t == 0.0:  # nothing trained yet: the cluster starts there
            self._complete_move()
        if retired_trainer:
            self._fold_in(rate_before)

    def _retire(self, r: Retire) -> bool:
        """Retire the nodes; whether one of them trained."""
        mine = [n for n in self.nodes if n.pool == r.pool and n.role is r.role and n.stand_in == r.stand_in]
        mine.sort(key=lambda n: (n.joined, -n.joins_h))
        trained = False
        for n in mine[: r.count]:
            trained = trained or (n.joined and n.trains)
            self._remove(n)
        return trained

    def _buy(self, order: Order, moving: bool) -> None:
        """Buy as EC2 answers; the first `order.retires.count` nodes bought each retire a stand-in as they join."""
        self._changed()
        swaps = 0 if order.retires is None else order.retires.count
        t = self.t
        start = t == 0.0  # the job's first nodes are up when it starts, as every policy's are
        joins = t if start else t + self.recovery.replacement_delay_h
        pool = order.pool
        if pool.market is Market.ON_DEMAND:
            for i in range(order.count):
                self.nodes.append(
                    _Node(
                        pool,
                        order.role,
                        order.stand_in,
                        -1,
                        0,
                        joins,
                        math.inf,
                        _swap(order, i < swaps),
                        moving,
                        joined=start,
                    )
                )
            self.refusals.pop(pool, None)
            return
        zone = self.case.zones[self.case.zone_index[pool.zone]]
        capacity = zone.capacity(self.offset, t, self.case.levels)
        taken = self.occupied[pool.zone]
        free = [level for level in range(capacity) if level not in taken][: order.count]
        occupants = [self.occupants.get((pool.zone, level), 0) for level in free]
        first_slot = self.case.zone_index[pool.zone] * self.case.levels
        lives = self.draws.lifetime(self.run, first_slot + np.array(free, np.int64), np.array(occupants, np.int64))
        for i, (level, occupant, life) in enumerate(zip(free, occupants, lives.tolist())):
            self.occupants[(pool.zone, level)] = occupant + 1
            dies = t + life
            if zone.windows is not None:
                dies = min(dies, float(zone.windows.at(level, self.offset, t)[1]))
            taken.add(level)
            self.nodes.append(
                _Node(
                    pool, order.role, False, level, occupant, joins, dies, _swap(order, i < swaps), moving, joined=start
                )
            )
        if len(free) < order.count:
            seen = self.refusals.get(pool)
            t_s = t * HOUR_S
            self.refusals[pool] = (
                Refusals(pool, 1, t_s, t_s) if seen is None else Refusals(pool, seen.in_row + 1, seen.first_s, t_s)
            )
        else:
            self.refusals.pop(pool, None)


def _swap(order: Order, swaps: bool) -> Pool | None:
    """The stand-ins' pool a node of `order` retires one of as it joins (None: it retires none)."""
    return order.retires.pool if swaps and order.retires is not None else None
