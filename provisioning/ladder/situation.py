"""What the recovery ladder is told: the cluster, the market and the job, as of one moment.

The caller (the controller on the head, or the simulator) builds one Situation per decision; the ladder
reads no clock and asks no cloud. Times are seconds on the caller's clock (the job's start is 0 in the
simulator, the head's wall clock live): the ladder only compares and subtracts them. Work is in PFLOP and
rates in PFLOP per hour, the planner's units: the controller turns steps into PFLOP with the plan's own
rate (as `deepvm simulate --steps N --step-time S` does), and hands the rate it measured, which the ladder
uses to correct the planner's model of any other cluster (Progress.efficiency).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

from provisioning.catalog.model import Market, ScalingParams
from provisioning.planner.plan import Role

HOUR_S = 3600.0
RESERVE_RELAUNCHES = 6  # relaunch pauses the deadline's reserve keeps in hand (Timing.of)


def affordable(usd_per_hour: float, price: float) -> int:
    """How many nodes at `price` fit in `usd_per_hour` (a hair of float noise forgiven, as the planner does)."""
    return math.floor(usd_per_hour / price + 1e-9) if price > 0 and usd_per_hour > 0 else 0


@dataclass(frozen=True)
class Pool:
    """Where a node is bought: EC2 refuses capacity per instance type, zone and market
    (InsufficientInstanceCapacity in CreateFleet's Errors[]), so that is the unit the ladder tracks."""

    zone: str
    instance_type: str
    market: Market

    def __str__(self) -> str:
        return f"{self.instance_type} {self.market.value} in {self.zone}"


@dataclass(frozen=True)
class TypeFacts:
    """What the rate model needs of an instance type (from the catalog the plan was made with)."""

    instance_type: str
    tflops: float  # one node's TFLOPS; 0 for a CPU type (a checkpoint holder)
    scaling: ScalingParams | None  # its K(n) curve; None for a type that does not train
    gpus: int = 0  # one node's GPUs: the launcher runs a rank per GPU (the ladder's model counts TFLOPS only)

    @property
    def trains(self) -> bool:
        return self.tflops > 0 and self.scaling is not None


@dataclass(frozen=True)
class Offer:
    """A pool the ladder may buy from, at its price now."""

    pool: Pool
    usd_per_hour: float
    capacity_seen: int | None = None  # nodes the market said it could give now (a placement score); None: unknown


@dataclass(frozen=True)
class PlannedGroup:
    """One group of the plan, wherever the cluster is: its zone is the cluster's (Situation.zone)."""

    instance_type: str
    market: Market
    role: Role
    count: int


@dataclass(frozen=True)
class Holding:
    """Nodes of one pool and role the job holds: those that train or hold checkpoints, and those bought
    that have not joined yet. Stand-ins are on-demand trainers bought for the deadline, to be given back
    when Spot returns; every other node is the plan's (or a repair of it)."""

    pool: Pool
    role: Role
    ready: int
    coming: int = 0
    stand_in: bool = False

    @property
    def held(self) -> int:
        return self.ready + self.coming


@dataclass(frozen=True)
class Refusals:
    """A pool's capacity refusals since it last gave what was asked (a row of them)."""

    pool: Pool
    in_row: int  # refusals in a row (>= 1)
    first_s: float  # when the first of the row came: the pool has been short since
    last_s: float  # when the newest came: the backoff counts from it


@dataclass(frozen=True)
class Progress:
    """Where the job stands."""

    remaining_pflop: float
    pflop_per_hour: float  # the rate now (measured live; the model's in the simulator); 0 while nothing trains


@dataclass(frozen=True)
class Limits:
    """What the user allowed."""

    max_usd_per_hour: float  # the plan's price cap: what the cluster may bill per hour
    fallback_usd_per_hour: float  # what it may bill per hour while it holds on-demand stand-ins (--fallback-max-price)
    deadline_s: float | None = None  # on the caller's clock; None: no deadline
    budget_usd: float | None = None  # the whole job's, replacements included; None: no budget
    spent_usd: float = 0.0  # what the job has cost so far


@dataclass(frozen=True)
class Timing:
    """How long the ladder's actions take, in seconds (the simulator's defaults: simulation/recovery.py)."""

    join_s: float  # an order -> the node trains (launch, boot, setup, fold-in); on-demand and Spot alike
    relaunch_s: float  # a planned relaunch: flush, stop, launch (a fold-in, a move's switch)
    stop_s: float  # a checkpoint and a clean stop: what the budget rung keeps in hand
    # the deadline's margin for what the rate model does not see: relaunch pauses and, where reclaims may come
    # without the two-minute notice, the work since the newest checkpoint they take back
    reserve_s: float
    backoff_s: float = 15.0  # the first wait after a refusal
    backoff_cap_s: float = 300.0  # the longest wait (the traces' own step is 300 s)

    @classmethod
    def of(cls, join_s: float, relaunch_s: float, lost_to_reclaims_s: float = 0.0) -> Timing:
        """The ladder's times from a join and a relaunch (the simulator's figures, or what the controller
        measured). The deadline's reserve keeps RESERVE_RELAUNCHES relaunch pauses in hand (a run pauses at
        every loss and every fold-in), half a join, and `lost_to_reclaims_s`: what reclaims without notice take back
        (the simulator keeps their share of a checkpoint interval)."""
        reserve = RESERVE_RELAUNCHES * relaunch_s + join_s / 2.0 + lost_to_reclaims_s
        return cls(join_s=join_s, relaunch_s=relaunch_s, stop_s=relaunch_s, reserve_s=reserve)

    def __post_init__(self) -> None:
        for name in ("join_s", "relaunch_s", "stop_s", "reserve_s", "backoff_s", "backoff_cap_s"):
            value = getattr(self, name)
            if not 0.0 <= value < math.inf:
                raise ValueError(f"{name} must be a finite non-negative number of seconds, got {value}")
        if self.backoff_s <= 0 or self.backoff_cap_s < self.backoff_s:
            raise ValueError("backoff_s must be positive and at most backoff_cap_s")


@dataclass(frozen=True)
class Situation:
    """Everything one decision depends on."""

    now_s: float
    zone: str  # where the cluster is (its plan's zone, until it moves)
    zones: tuple[str, ...]  # the region's zones it may move to (its own included)
    plan: tuple[PlannedGroup, ...]
    types: tuple[TypeFacts, ...]  # every instance type named by the plan, the holdings and the offers
    holdings: tuple[Holding, ...]
    offers: tuple[Offer, ...]  # on-demand and Spot, in every zone the ladder may use
    refusals: tuple[Refusals, ...]  # pools refusing now (a pool that last gave what was asked is not listed)
    progress: Progress
    limits: Limits
    timing: Timing
    moving_to: str | None = None  # a move under way: the new zone's nodes are on their way
    # the node the controller runs on (its pool and price), when it runs on the cluster (the live head; None in
    # the simulator and for --controller local): it stays where it is when the cluster moves, billing on
    head: Offer | None = None
    head_apart: bool = False  # a move left the head behind: it bills as the control node alone, held by no role

    def __post_init__(self) -> None:
        """A holding without a price, or a type without facts, would be counted as free or idle: a caller's bug."""
        priced = {o.pool for o in self.offers}
        known = {t.instance_type for t in self.types}
        for h in self.holdings:
            if h.pool not in priced:
                raise ValueError(f"no offer (price) for the held pool {h.pool}")
        named = (
            {h.pool.instance_type for h in self.holdings}
            | {g.instance_type for g in self.plan}
            | {o.pool.instance_type for o in self.offers}
        )
        missing = named - known
        if missing:
            raise ValueError(f"no type facts for {', '.join(sorted(missing))}")

    @cached_property
    def facts(self) -> dict[str, TypeFacts]:
        return {t.instance_type: t for t in self.types}

    @cached_property
    def offer_of(self) -> dict[Pool, Offer]:
        return {o.pool: o for o in self.offers}

    @cached_property
    def refusals_of(self) -> dict[Pool, Refusals]:
        return {r.pool: r for r in self.refusals}

    def price(self, pool: Pool) -> float | None:
        offer = self.offer_of.get(pool)
        return None if offer is None else offer.usd_per_hour

    def usd_per_hour(self, holdings: tuple[Holding, ...] | None = None) -> float:
        """What the held nodes bill per hour (bought nodes bill from their launch, joined or not); the cluster's
        whole bill (`holdings` None) counts a head left behind by a move too."""
        if holdings is not None:
            return sum(h.held * self.offer_of[h.pool].usd_per_hour for h in holdings)
        return self.usd_per_hour(self.holdings) + self.head_usd_per_hour(apart_in=None)

    def head_usd_per_hour(self, apart_in: str | None) -> float:
        """What the head bills beside the cluster's holdings: when a move left it behind already, or (`apart_in`)
        would, were the cluster in that zone; 0 where it holds checkpoints or trains in the cluster's zone."""
        if self.head is None:
            return 0.0
        apart = self.head_apart or (apart_in is not None and apart_in != self.head.pool.zone)
        return self.head.usd_per_hour if apart else 0.0

    @property
    def stand_ins(self) -> tuple[Holding, ...]:
        return tuple(h for h in self.holdings if h.stand_in)
