"""Situations built by hand for the ladder's tests: a plan of 16 Spot trainers and one on-demand holder in zone
a of a three-zone region, priced like g4dn.xlarge and c5.xlarge in us-east-1."""

from __future__ import annotations

from provisioning.catalog.model import DEFAULT_SCALING, Market
from provisioning.ladder.situation import (
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
from provisioning.planner.plan import Role

ZONES = ("z-a", "z-b", "z-c")
GPU, FAST, CPU = "g4dn.xlarge", "g5.xlarge", "c5.xlarge"
SPOT_USD, OD_USD, FAST_USD, HOLDER_USD = 0.15, 0.526, 0.30, 0.17
CAP = 16 * SPOT_USD + HOLDER_USD + 0.2  # 2.77 $/h: the plan and a little room
TYPES = (TypeFacts(GPU, 65.0, DEFAULT_SCALING), TypeFacts(FAST, 125.0, DEFAULT_SCALING), TypeFacts(CPU, 0.0, None))
PLAN = (PlannedGroup(GPU, Market.SPOT, Role.TRAINER, 16), PlannedGroup(CPU, Market.ON_DEMAND, Role.HOLDER, 1))
TIMING = Timing(join_s=300.0, relaunch_s=12.0, stop_s=12.0, reserve_s=0.0)


def spot(zone: str = "z-a", itype: str = GPU) -> Pool:
    return Pool(zone, itype, Market.SPOT)


def od(zone: str = "z-a", itype: str = GPU) -> Pool:
    return Pool(zone, itype, Market.ON_DEMAND)


def offers(capacity: dict[str, int | None] | None = None) -> tuple[Offer, ...]:
    """Every zone offers g4dn.xlarge Spot and on demand and the c5.xlarge holder; zone a also g5.xlarge Spot.
    `capacity`: what a placement score says of each zone's Spot (default: unknown)."""
    seen = capacity or {}
    out = []
    for zone in ZONES:
        out += [Offer(spot(zone), SPOT_USD, seen.get(zone)), Offer(od(zone), OD_USD), Offer(od(zone, CPU), HOLDER_USD)]
    out.append(Offer(spot("z-a", FAST), FAST_USD))
    return tuple(out)


def whole(spot_ready: int = 16, holder: int = 1) -> tuple[Holding, ...]:
    return (Holding(spot(), Role.TRAINER, spot_ready), Holding(od("z-a", CPU), Role.HOLDER, holder))


def situation(
    holdings: tuple[Holding, ...] | None = None,
    *,
    now_s: float = 1000.0,
    refusals: tuple[Refusals, ...] = (),
    capacity: dict[str, int | None] | None = None,
    remaining: float = 10_000.0,
    deadline_s: float | None = None,
    budget: float | None = None,
    spent: float = 0.0,
    fallback: float | None = None,
    moving_to: str | None = None,
) -> Situation:
    """The cluster (default: whole) at `now_s`; no rate measured, so the ladder counts the planner's model."""
    return Situation(
        now_s=now_s,
        zone="z-a",
        zones=ZONES,
        plan=PLAN,
        types=TYPES,
        holdings=whole() if holdings is None else holdings,
        offers=offers(capacity),
        refusals=refusals,
        progress=Progress(remaining, 0.0),
        limits=Limits(CAP, CAP if fallback is None else fallback, deadline_s, budget, spent),
        timing=TIMING,
        moving_to=moving_to,
    )


def refused(pool: Pool, first_s: float, last_s: float, in_row: int = 1) -> Refusals:
    return Refusals(pool, in_row, first_s, last_s)
