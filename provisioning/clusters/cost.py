"""What a cluster cost: the one piece of arithmetic behind `status`, `down`, `cost-report` and a job's cost.

The state store (provisioning/clusters/store.py) keeps one cost segment per node: its price as planned, its launch
and when it was seen gone (open while the node runs). A cluster's cost is the sum of
its segments, each at its own price, and its runtime spans its first node's launch to its last node's end
(now while a node runs). Prices are the plan's, so a report never re-reads today's prices; a Spot price
that moved after planning is not followed (the cloud's bill is the authority).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True)
class CostSegment:
    """One node's billing at one price: open (ended None) while the node runs."""

    usd_per_hour: float
    started: datetime
    ended: datetime | None


@dataclass(frozen=True)
class ClusterCost:
    """What a cluster has cost up to `now`, and what it costs per hour from now on."""

    usd: float  # every segment so far, each at its own price
    usd_per_hour: float  # the open segments' prices: 0 once every node is gone
    launched: datetime | None  # the first segment's start (None: no node ever ran)
    ended: datetime | None  # the last segment's end; None while a segment is open or none exists
    runtime_s: float  # launched -> ended, or -> now while a node runs

    @property
    def billing(self) -> bool:
        """Whether some node still runs (and so costs money)."""
        return self.launched is not None and self.ended is None


def cluster_cost(segments: Iterable[CostSegment], now: datetime) -> ClusterCost:
    """The cost and runtime of a cluster's segments as of `now` (aware datetimes, UTC)."""
    usd = usd_per_hour = 0.0
    running = False
    starts: list[datetime] = []
    ends: list[datetime] = []
    for segment in segments:
        end = segment.ended or now
        usd += max(0.0, (end - segment.started).total_seconds()) / 3600 * segment.usd_per_hour
        if segment.ended is None:
            running = True
            usd_per_hour += segment.usd_per_hour
        starts.append(segment.started)
        ends.append(end)
    if not starts:
        return ClusterCost(usd=0.0, usd_per_hour=0.0, launched=None, ended=None, runtime_s=0.0)
    launched, last = min(starts), max(ends)
    return ClusterCost(
        usd=usd,
        usd_per_hour=usd_per_hour,
        launched=launched,
        ended=None if running else last,
        runtime_s=max(0.0, (last - launched).total_seconds()),
    )


def cost_fields(cost: ClusterCost | None) -> dict[str, object]:
    """The cost as `--json` states it in `status`, `down` and `cost-report` alike (nulls: not known)."""
    if cost is None:
        return dict.fromkeys(("launched_at", "ended_at", "runtime_s", "cost_usd"))
    return {
        "launched_at": iso(cost.launched),
        "ended_at": iso(cost.ended),
        "runtime_s": round(cost.runtime_s, 1),
        "cost_usd": round(cost.usd, 6),
    }


def iso(moment: datetime | None) -> str | None:
    """How the state store and `--json` write a moment (None stays None)."""
    return None if moment is None else moment.isoformat(timespec="seconds")


@dataclass(frozen=True)
class NodeSpan:
    """One node's billing as a run's cost counts it: its type, its planned price, when it billed."""

    instance_id: str
    instance_type: str
    usd_per_hour: float  # as planned (a spot node's planned spot price)
    started: datetime
    ended: datetime | None  # None while it runs


@dataclass(frozen=True)
class RunCost:
    """What a run cost, and what the same nodes would have cost at on-demand prices."""

    usd: float
    on_demand_usd: float | None  # None when the on-demand price of one of its types is not known
    unpriced: tuple[str, ...] = ()  # those types


def run_cost(spans: Iterable[NodeSpan], on_demand: Mapping[str, float], start: datetime, end: datetime) -> RunCost:
    """What a run from `start` to `end` cost, and what on-demand would have cost (README, "What on-demand would
    have cost"): every node that billed during the run, for the part of its life within it, at its planned
    price and at its type's on-demand price (`on_demand`: USD per hour by type). Replacements count as they
    ran: the same nodes for the same wall time, never a guess at how long an on-demand cluster would take."""
    usd = on_demand_usd = 0.0
    unpriced: set[str] = set()
    for span in spans:
        hours = max(0.0, (min(span.ended or end, end) - max(span.started, start)).total_seconds()) / 3600
        usd += hours * span.usd_per_hour
        price = on_demand.get(span.instance_type)
        if price is None:
            unpriced.add(span.instance_type)
        else:
            on_demand_usd += hours * price
    return RunCost(usd, None if unpriced else on_demand_usd, tuple(sorted(unpriced)))
