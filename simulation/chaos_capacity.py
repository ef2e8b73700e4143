"""A capacity trace replayed into a live cluster (`deepvm chaos --trace` with a capacity series).

A capacity series says how many Spot nodes the plan's zone holds at each moment: the series' share times the
plan's M Spot trainers, whatever their type (simulation/market.py says why one series stands for every type
of a zone). The `deepvm` policy meets that market in the simulator (simulation/market_run.py): a Spot node
takes the lowest free capacity level of its zone, a drop of the capacity below its level reclaims it, and a
purchase gets what the zone has free and a refusal for the rest. Replayed live, on the chaos clock (trace
time compressed by `time_scale`, from the run's own start offset, so the live run and `deepvm simulate`'s
run of the same seed meet the same stretch of the series):

- at each sample of the series, the live nodes above the new capacity are reclaimed (with a notice or
  without, as the simulator's draws say for their level and occupant);
- the sandbox's capacity schedule gets one rule for the zone's Spot market: what is free, the capacity less
  the nodes held, so that the head's CreateFleet launches what the trace allows and is answered
  InsufficientInstanceCapacity in Errors[] for the rest (provisioning/sandbox/realism.py).

Which nodes a drop takes depends on what the head's ladder had bought by then (its backoff, its repairs), so
the losses are read off the cluster at each sample rather than drawn beforehand from the plan-only run, as
simulation/chaos.py does for a lifetime trace. Nothing here reads a clock or calls a cloud: the loop is
handed the cluster, the pool's feed and a way to wait (Protocols), so a test drives it with fakes.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

from simulation.capacity import BOUNDARY_EPS
from simulation.chaos import LiveNode
from simulation.draws import Draws
from simulation.market import MarketCase
from simulation.recovery import SECONDS_PER_HOUR


@dataclass(frozen=True)
class CapacityStep:
    """One sample of the series: from `at_s` on, the zone holds `nodes` Spot nodes."""

    at_s: float  # seconds after chaos started, here
    trace_at_h: float  # hours after the run's start, in the trace
    nodes: int


def capacity_steps(case: MarketCase, offset_h: float, time_scale: float, until_h: float) -> tuple[CapacityStep, ...]:
    """Every sample of the plan's zone's series from `offset_h` for `until_h` trace hours, in seconds here."""
    zone = case.zones[0]
    if zone.windows is None or zone.counts is None:
        raise ValueError(f"{zone.trace.name} is not a capacity series")
    step_h, samples = zone.windows.step_h, zone.windows.steps
    first = math.floor(offset_h / step_h + BOUNDARY_EPS)
    out = [CapacityStep(0.0, 0.0, int(zone.counts[first % samples]))]
    k = first + 1
    while (t_h := k * step_h - offset_h) < until_h:
        out.append(CapacityStep(t_h * SECONDS_PER_HOUR / time_scale, t_h, int(zone.counts[k % samples])))
        k += 1
    return tuple(out)


@dataclass(frozen=True)
class Reclaim:
    """A node above the capacity: its level, its draws' occupant, and whether its reclaim has a notice."""

    instance_id: str
    level: int
    occupant: int
    notice: bool


class Levels:
    """Which live Spot node of the zone holds each capacity level: a node seen for the first time takes the
    lowest free one (the oldest first), as a node bought in the simulator does; each level counts the nodes it
    has had (the draws' occupant)."""

    def __init__(self, levels: int) -> None:
        self.levels = levels
        self.holder: dict[int, tuple[str, int]] = {}  # level -> (instance id, occupant)
        self.had: dict[int, int] = {}  # level -> nodes it has had
        self.taken: set[str] = set()  # reclaimed: never a level again, though it runs out its notice

    @property
    def held(self) -> int:
        return len(self.holder)

    def update(self, live: Iterable[LiveNode]) -> None:
        """Forget levels whose node is gone; give each new live node the lowest free level (one above M when
        none is free: the next drop takes it first)."""
        live = sorted(live, key=lambda n: (n.launched_at, n.instance_id))
        alive = {n.instance_id for n in live}
        self.holder = {lv: h for lv, h in self.holder.items() if h[0] in alive}
        held = {h[0] for h in self.holder.values()}
        for node in live:
            if node.instance_id in held or node.instance_id in self.taken:
                continue
            level = next(lv for lv in range(len(self.holder) + 1) if lv not in self.holder)
            occupant = self.had.get(level, 0)
            self.had[level] = occupant + 1
            self.holder[level] = (node.instance_id, occupant)
            held.add(node.instance_id)

    def above(self, capacity: int, draws: Draws, run: int = 0) -> list[Reclaim]:
        """The nodes at a level the capacity no longer reaches, highest first; they leave their levels."""
        out = []
        for level in sorted((lv for lv in self.holder if lv >= capacity), reverse=True):
            instance_id, occupant = self.holder.pop(level)
            self.taken.add(instance_id)
            out.append(Reclaim(instance_id, level, occupant, bool(draws.notice(run, level, occupant))))
        return out


class SpotNodes(Protocol):
    """The live cluster as the replay sees it."""

    def live_spot(self) -> list[LiveNode]:
        """The cluster's running Spot nodes of the plan's zone, read again now."""

    def reclaim(self, instance_id: str, notice: bool) -> str:
        """Take the node away (with a notice, or terminated without); what was done, in words."""


class PoolFeed(Protocol):
    """The sandbox's capacity schedule for the zone's Spot market."""

    def set_free(self, nodes: int) -> None:
        """From now on the pool launches at most `nodes` more."""

    def clear(self) -> None:
        """Take the replay's rule away (the pool has capacity without end again)."""


@dataclass(frozen=True)
class CapacityAction:
    """A sample as it was carried out: the nodes it reclaimed and what the pool had free after it."""

    step: CapacityStep
    reclaimed: tuple[Reclaim, ...]
    held: int  # Spot nodes the zone held after the reclaims
    free: int  # what the sandbox's pool could launch from then on
    done_at_s: float

    def to_dict(self) -> dict[str, object]:
        return {
            "at_s": round(self.step.at_s, 3),
            "trace_at_h": round(self.step.trace_at_h, 6),
            "capacity": self.step.nodes,
            "held": self.held,
            "free": self.free,
            "reclaimed": [{"instance_id": r.instance_id, "level": r.level, "notice": r.notice} for r in self.reclaimed],
            "done_at_s": round(self.done_at_s, 3),
        }


def replay_capacity(
    steps: Iterable[CapacityStep],
    levels: Levels,
    draws: Draws,
    nodes: SpotNodes,
    feed: PoolFeed,
    wait_until: Callable[[float], float],
    report: Callable[[CapacityAction, list[str]], None],
) -> list[CapacityAction]:
    """Carry the samples out in turn (`wait_until(at_s)` waits and returns the seconds elapsed); the pool's rule
    is taken away at the end, however the replay ends."""
    actions = []
    try:
        for step in steps:
            elapsed = wait_until(step.at_s)
            levels.update(nodes.live_spot())
            reclaimed = levels.above(step.nodes, draws)
            messages = [nodes.reclaim(r.instance_id, r.notice) for r in reclaimed]
            free = max(0, step.nodes - levels.held)
            feed.set_free(free)
            action = CapacityAction(step, tuple(reclaimed), levels.held, free, elapsed)
            actions.append(action)
            report(action, messages)
    finally:
        with contextlib.suppress(OSError):  # the sandbox went away, its rules with it: the first error is said
            feed.clear()
    return actions
