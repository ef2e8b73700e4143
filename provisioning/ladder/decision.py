"""What the recovery ladder answers: one rung, the orders that carry it out, when to ask again, and why.

The caller acts on the orders and asks again at once while the rung acted (BUY_LIKE_PLAN, REPAIR,
FALLBACK, RETURN_TO_SPOT, MOVE: one decision buys for one role or one reason), and otherwise at
`check_at_s` or at its next event (a loss, a node joining, a refusal), whichever comes first. The reason is
a record, so `deepvm logs` and `status` can show the numbers it rests on, not a string to parse.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from provisioning.ladder.situation import Pool
from provisioning.planner.plan import Role


class Rung(str, Enum):
    """The ladder's rungs, in the order they are tried (provisioning/ladder/ladder.py)."""

    STOP = "stop"  # the budget would be exceeded: checkpoint and stop (resumable)
    MOVING = "moving"  # a move is under way: wait for the new zone's nodes
    FALLBACK = "on-demand-fallback"  # the deadline needs on-demand stand-ins (Can't Be Late)
    RETURN_TO_SPOT = "return-to-spot"  # the deadline allows: Spot nodes bought to replace stand-ins
    BUY_LIKE_PLAN = "buy-like-plan"  # a role is short: buy what the plan has, where the cluster is
    REPAIR = "repair"  # the plan's pool refuses: the next-best Spot type in the zone, within the cap
    MOVE = "move"  # the zone has refused long enough that moving the cluster pays
    RETRY = "retry"  # every way to fill a short role refused lately: ask again after the backoff
    HOLD = "hold"  # nothing to do now

    @property
    def acts(self) -> bool:
        """Whether the caller has orders to carry out (and then asks again at once)."""
        return self in (Rung.FALLBACK, Rung.RETURN_TO_SPOT, Rung.BUY_LIKE_PLAN, Rung.REPAIR, Rung.MOVE)


@dataclass(frozen=True)
class Retire:
    """Let `count` nodes of `pool` go (those not yet joined first): the controller drains them at its next
    launch (training/control/nodepool.py: AT_RISK -> DRAINING -> RETIRED). `stand_in`: the pool's stand-ins
    go, else its other nodes (a Spot trainer making room under the fallback's cap)."""

    pool: Pool
    role: Role
    count: int
    stand_in: bool = False


@dataclass(frozen=True)
class Order:
    """Buy `count` nodes of `pool` for `role`. A stand-in is an on-demand trainer the deadline asked for;
    `retires` names stand-ins to let go as these join, one per node joined, until its count have gone
    (RETURN_TO_SPOT: they stay until their Spot replacements train)."""

    pool: Pool
    role: Role
    count: int
    stand_in: bool = False
    retires: Retire | None = None


@dataclass(frozen=True)
class Reason:
    """Why: one line for a person, and the numbers it rests on (None where they do not apply)."""

    text: str
    short: int = 0  # trainers the plan has that the cluster lacks
    slack_s: float | None = None  # deadline slack against the stand-ins' guaranteed rate (deadline.py)
    outage_s: float | None = None  # how long the cluster's zone has refused its Spot pools
    refused: tuple[Pool, ...] = ()  # pools cooling down after a refusal
    deadline_at_risk: bool = False  # even every stand-in the fallback cap allows cannot keep the deadline


@dataclass(frozen=True)
class Decision:
    rung: Rung
    reason: Reason
    orders: tuple[Order, ...] = ()
    retire: tuple[Retire, ...] = ()
    move_to: str | None = None  # MOVE: the zone the cluster moves to
    check_at_s: float | None = None  # ask again by then even if nothing happens (None: at the next event)
