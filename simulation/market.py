"""The `deepvm` policy's question: a plan run by the recovery ladder (provisioning/ladder) on a market of
several zones, each with its own capacity trace.

What the simulated market offers the ladder, per zone that has a trace (the plan's own first):
- the plan's Spot types at that zone's Spot price, and the on-demand price of the plan's own types (its
  holders, its anchor, its trainers as stand-ins; every GPU type with an on-demand price when none of the
  plan's trainer types has one);
- Spot capacity: a zone's share of the trace times the plan's Spot trainers M is how many Spot nodes the zone
  holds, whatever their type. The traces measure one type per zone (p3.2xlarge), so the zone's series
  stands for all of them: another type in the same zone would otherwise find capacity the trace never
  showed. So the simulator never offers a repair with another type; the ladder's REPAIR rung is tested on
  its own (tests/ladder), and the zones are where a capacity trace lets a policy go.
- `capacity_seen` of a Spot offer: the zone's free capacity now, as a Spot placement score would hint it
  (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/spot-placement-score.html): the ladder uses it only
  to choose where to move, never to skip asking its own zone.
Orders are answered as CreateFleet's instant fleets are: on demand in full, Spot up to the free capacity, the
rest refused (simulation/market_run.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from provisioning.catalog.model import Catalog, Market
from provisioning.ladder.deadline import fallback_fill
from provisioning.ladder.offers import market_offers
from provisioning.ladder.situation import Limits, Offer, PlannedGroup, Progress, Situation, Timing, TypeFacts
from provisioning.planner.plan import Plan
from simulation.capacity import CapacityWindows, capacity_windows
from simulation.draws import Draws, block_size
from simulation.recovery import RecoveryModel, Workload
from simulation.trace import Trace
from simulation.zones import ZoneTraces


def ladder_timing(recovery: RecoveryModel) -> Timing:
    """The ladder's times from the simulator's recovery figures; where reclaims may come without notice, the
    deadline's reserve also keeps their share of a checkpoint interval in hand (what such a reclaim takes back)."""
    unnoticed = (1.0 - recovery.notice_share) * recovery.checkpoint_interval_s
    return Timing.of(recovery.replacement_delay_s, recovery.relaunch_s, unnoticed)


@dataclass(frozen=True)
class ZoneMarket:
    """One zone's Spot capacity for the plan's M Spot trainers: its trace, and per step how many nodes."""

    zone: str
    trace: Trace
    windows: CapacityWindows | None  # None: a lifetime-driven trace (no capacity limit)
    counts: np.ndarray | None  # nodes the zone holds in each step of its series

    def capacity(self, offset_h: float, t_h: float, levels: int) -> int:
        """Spot nodes the zone holds at t (all `levels` for a lifetime-driven trace)."""
        if self.windows is None or self.counts is None:
            return levels
        step = int(np.floor((offset_h + t_h) / self.windows.step_h + 1e-9)) % self.windows.steps
        return int(self.counts[step])


@dataclass(frozen=True)
class MarketCase:
    """The plan, its market and the workload (module docstring)."""

    plan: Plan
    zones: tuple[ZoneMarket, ...]  # the plan's own zone first
    offers: tuple[Offer, ...]  # capacity_seen left None: the run fills it in
    types: tuple[TypeFacts, ...]
    planned: tuple[PlannedGroup, ...]
    limits: Limits  # deadline_s set from the workload
    timing: Timing
    workload: Workload
    levels: int  # M: the plan's Spot trainers, the unit of every zone's share
    # PFLOP/h with 1, 2, .. trainers joined, as measured where the nodes share cores (`deepvm chaos`'s sandbox:
    # simulation/chaos.py's measured_speeds says why); None: the planner's rate model
    measured_rates: tuple[float, ...] | None = None

    @cached_property
    def zone_index(self) -> dict[str, int]:
        return {z.zone: i for i, z in enumerate(self.zones)}

    @property
    def horizon_h(self) -> float:
        """The traces' common clock: where a run starts (the shortest series; zones.py cuts them to it)."""
        horizons = [z.windows.horizon_h for z in self.zones if z.windows is not None]
        return min(horizons) if horizons else 0.0

    def draws(self) -> Draws:
        """Random numbers addressed by (run, zone x M + level, occupant): run i starts at the same share of the
        traces as every other policy's run i (the same seed's start stream)."""
        traces = tuple(z.trace for z in self.zones)
        expected = self.workload.work_pflop / max(self.full_rate, 1e-12)
        block = block_size(traces, expected, self.workload.runs, self.levels * len(self.zones))
        return Draws(
            traces,
            tuple(self.levels for _ in self.zones),
            self.workload.runs,
            self.workload.seed,
            self.workload.recovery.notice_share,
            block,
        )

    @cached_property
    def full_rate(self) -> float:
        """The plan's rate with every node up (PFLOP/h)."""
        from provisioning.ladder.throughput import pflop_per_hour

        facts = {t.instance_type: t for t in self.types}
        return pflop_per_hour([(facts[g.instance_type], g.count) for g in self.planned])


def market_case(
    plan: Plan,
    catalog: Catalog,
    traces: ZoneTraces,
    workload: Workload,
    fallback_usd_per_hour: float | None,
    max_usd_per_hour: float,
) -> MarketCase:
    """The `deepvm` policy's case for `plan`: the zones with a trace (the plan's own always), their offers."""
    levels = sum(g.count for g in plan.nodes if g.market is Market.SPOT)
    zones = []
    for zone in traces.zones():
        trace = traces.trace_for(_first_spot_type(plan), plan.region, zone)
        windows = counts = None
        if trace.capacity is not None and levels:
            windows = capacity_windows(trace.capacity, levels)
            counts = np.floor(trace.capacity.as_array() * levels + 1e-9).astype(np.int64)
        zones.append(ZoneMarket(zone, trace, windows, counts))
    planned = tuple(PlannedGroup(g.instance_type, g.market, g.role, g.count) for g in plan.nodes)
    market = market_offers(plan, catalog, [z.zone for z in zones], repairs=False)
    deadline_s = None if workload.deadline_h is None else workload.deadline_h * 3600.0
    fallback = max_usd_per_hour if fallback_usd_per_hour is None else fallback_usd_per_hour
    limits = Limits(max_usd_per_hour=max_usd_per_hour, fallback_usd_per_hour=fallback, deadline_s=deadline_s)
    return MarketCase(
        plan,
        tuple(zones),
        market.offers,
        market.types,
        planned,
        limits,
        ladder_timing(workload.recovery),
        workload,
        levels,
    )


def _first_spot_type(plan: Plan) -> str:
    return next((g.instance_type for g in plan.nodes if g.market is Market.SPOT), plan.nodes[0].instance_type)


def start_situation(case: MarketCase) -> Situation:
    """What the ladder sees at the job's start: nothing bought, all the work left."""
    return Situation(
        now_s=0.0,
        zone=case.plan.availability_zone,
        zones=tuple(z.zone for z in case.zones),
        plan=case.planned,
        types=case.types,
        holdings=(),
        offers=case.offers,
        refusals=(),
        progress=Progress(case.workload.work_pflop, 0.0),
        limits=case.limits,
        timing=case.timing,
    )


@dataclass(frozen=True)
class Earliest:
    """The soonest deadline the `deepvm` policy keeps for sure: the fallback's whole fill from the start."""

    hours: float  # math.inf when no on-demand trainer fits the fallback cap
    pflop_per_hour: float
    fill: str  # what the fill buys, for the message


def earliest_deadline(
    plan: Plan,
    catalog: Catalog,
    traces: ZoneTraces,
    workload: Workload,
    fallback_usd_per_hour: float | None,
    max_usd_per_hour: float,
) -> Earliest:
    """provisioning/ladder/deadline.py's earliest_finish for this plan at the start, in hours."""
    from provisioning.ladder.deadline import earliest_finish_s

    case = market_case(plan, catalog, traces, workload, fallback_usd_per_hour, max_usd_per_hour)
    start = start_situation(case)
    fill = fallback_fill(start)
    return Earliest(earliest_finish_s(start) / 3600.0, fill.full_rate, fill.describe())
