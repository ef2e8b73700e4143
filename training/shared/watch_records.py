"""What `deepvm watch` reads from the head: the job's log records, and now and then a Snapshot of what the log
does not say (the nodes as the head's store has them, the money, the cluster's timeline).

One stream carries both, one JSON object a line: a log record as the log has it (training.shared.records
.LogRecord, `{"kind": ...}`), a snapshot as `{"snapshot": {...}}`. `watch_line` tells them apart; a line
that is neither is None (nothing of ours writes one).
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from typing import Any

from provisioning.catalog.model import Market
from provisioning.catalog.snapshot import load_snapshot
from provisioning.clusters.cost import run_cost
from provisioning.clusters.store import Store
from provisioning.planner.plan import Role
from training.shared.job_events import job_text
from training.shared.records import JobSummary, LogRecord


@dataclass(frozen=True)
class NodeView:
    """One node of the cluster as the head's store has it (replacements the head bought included)."""

    instance_id: str
    role: Role
    market: Market
    instance_type: str
    zone: str
    state: str  # EC2's state name: pending, running, shutting-down, terminated, ...
    usd_per_hour: float  # its planned price


@dataclass(frozen=True)
class TimelineEntry:
    """One event of the cluster's event log since the job started: a notice, a replacement, a relaunch."""

    at: str  # ISO-8601 UTC, as the head's store wrote it
    kind: str  # the event's kind: notice, recovered, replacement, node-lost, retired, stall, completed, ...
    text: str


@dataclass(frozen=True)
class Money:
    """What the job has cost, and what it costs now (README: "What on-demand would have cost")."""

    usd: float  # the job's nodes at their planned prices, since it started
    usd_per_hour: float  # what the cluster bills per hour now (0 once every node is gone)
    on_demand_usd: float | None  # the same nodes for the same wall time at on-demand prices (None: a price unknown)


@dataclass(frozen=True)
class Snapshot:
    """The job as the head sees it at `at`, beside its log."""

    at: float  # the head's time.time()
    job: JobSummary
    nodes: tuple[NodeView, ...]
    money: Money
    timeline: tuple[TimelineEntry, ...]

    def to_json(self) -> str:
        return json.dumps({"snapshot": asdict(self)}, separators=(",", ":"))

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Snapshot:
        nodes = tuple(NodeView(**{**n, "role": Role(n["role"]), "market": Market(n["market"])}) for n in data["nodes"])
        job = JobSummary.from_json(json.dumps(data["job"]))
        return cls(
            at=data["at"],
            job=job,
            nodes=nodes,
            money=Money(**data["money"]),
            timeline=tuple(TimelineEntry(**t) for t in data["timeline"]),
        )


def snapshot_of(summary: JobSummary, store: Store, now: datetime | None = None) -> Snapshot:
    """The job (`summary`) as `store` has its cluster: the head's store while the cluster runs, this
    machine's once it is gone. The money is cost.run_cost's over the job's wall time (to its end once final)."""
    now = now or datetime.now(timezone.utc)
    row = store.cluster(summary.cluster) if summary.cluster else None
    if row is None:  # the job's controller has not written its row yet, or the cluster is forgotten here
        return Snapshot(time.time(), summary, (), Money(summary.cost_usd, 0.0, None), ())
    nodes = store.nodes(row.name)
    start = _moment(summary.started_at) or now
    end = (_moment(summary.updated_at) if summary.status.final else None) or now
    cost = run_cost(
        store.node_spans(row.name), on_demand_prices(row.region, {n.instance_type for n in nodes}), start, end
    )
    money = Money(
        round(cost.usd, 6),
        round(store.cost(row.name, now).usd_per_hour, 6),
        None if cost.on_demand_usd is None else round(cost.on_demand_usd, 6),
    )
    views = tuple(
        NodeView(n.instance_id, n.role, n.market, n.instance_type, n.availability_zone, n.state, n.usd_per_hour)
        for n in nodes
    )
    since = [e for e in store.events(row.name) if e.at >= summary.started_at]  # both ISO-8601 UTC: they sort
    timeline = tuple(TimelineEntry(e.at, e.kind, _text(summary.job_id, e.message)) for e in since)
    return Snapshot(time.time(), summary, views, money, timeline)


def _text(job_id: str, message: str) -> str:
    """An event's text on this job's screen, which says the job's id once in its title."""
    own = job_text(job_id, message)
    return message if own is None else own


def on_demand_prices(region: str, types: set[str]) -> dict[str, float]:
    """USD per hour on demand of each of `types` in `region` that deepvm's price snapshot knows."""
    catalog = load_snapshot()
    prices = {t: catalog.on_demand_price(t, region) for t in types}
    return {t: p for t, p in prices.items() if p is not None}


def _moment(text: str) -> datetime | None:
    try:
        return datetime.fromisoformat(text) if text else None
    except ValueError:
        return None


def watch_line(text: str) -> LogRecord | Snapshot | None:
    """The record on one line of the watch stream, or None."""
    try:
        data = json.loads(text)
        if isinstance(data, dict) and isinstance(data.get("snapshot"), dict):
            return Snapshot.from_dict(data["snapshot"])
        return LogRecord.from_json(text)
    except (ValueError, TypeError, KeyError):
        return None
