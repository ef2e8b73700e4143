"""A run's summary (training/shared/summary.py), made on the head from its own record of the cluster: the job's
row, the cluster's cost segments (replacements included) and the job's events in the cluster's event log.

- cost and what on-demand would have cost: provisioning.clusters.cost.run_cost over the job's window (its
  start to its end, or now), with the on-demand prices `deepvm train` handed the head (HeadJob);
- interruptions survived: the job's Spot notices and nodes lost without one (the controller's "notice" and
  "node-lost" events); replacements bought: its "replacement" events (a node bought and ready);
- a job resumed from another cluster (`train --resume JOB`) adds what it cost before.
"""

from __future__ import annotations

from datetime import datetime, timezone

from provisioning.clusters.cost import run_cost
from provisioning.clusters.store import Store, utc_now
from training.shared.guard import ResumeFrom
from training.shared.job_events import job_text
from training.shared.jobstore import JobRow
from training.shared.records import HeadJob
from training.shared.summary import RunSummary

INTERRUPTIONS = ("notice", "node-lost")  # the controller's event kinds that count as interruptions


def run_summary(job: HeadJob, row: JobRow, cluster_down: str = "", store: Store | None = None) -> RunSummary:
    """The job's summary now (see the module docstring); `cluster_down`: why its cluster goes down ("" if not)."""
    store = store or Store()
    cluster = job.cluster.name
    ended = row.updated_at if row.status.final else None
    start, end = _moment(row.started_at), _moment(ended or utc_now())
    cost = run_cost(store.node_spans(cluster), job.on_demand_prices, start, end)
    mine = [e for e in store.events(cluster) if job_text(job.job_id, e.message) is not None]
    before = job.resume or ResumeFrom("", 0, 0, 0, 0.0, 0.0, "")  # what a resumed job cost on its earlier cluster
    on_demand = (
        None
        if cost.on_demand_usd is None or before.on_demand_usd is None
        else before.on_demand_usd + cost.on_demand_usd
    )
    billing = 0.0 if cluster_down or not row.status.final else store.cost(cluster).usd_per_hour
    return RunSummary(
        job_id=job.job_id,
        cluster=cluster,
        status=row.status,
        message=row.message,
        step=row.step,
        total_steps=row.total_steps,
        started_at=before.started_at or row.started_at,
        ended_at=ended,
        cost_usd=round(before.cost_usd + cost.usd, 6),
        on_demand_usd=None if on_demand is None else round(on_demand, 6),
        interruptions=sum(1 for e in mine if e.kind in INTERRUPTIONS),
        replacements=sum(1 for e in mine if e.kind == "replacement"),
        cluster_down=cluster_down,
        billing_usd_per_hour=round(billing, 6),
    )


def _moment(text: str) -> datetime:
    moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)
