"""The head's end of a managed job without autodown (training/head/job_end.py, summary.py), in this process on a
real state store: the run's summary (its cost, what on-demand would have cost, the interruptions it survived
and the replacements it bought) is written beside the log, the hook hears how the job ended with it, the
log says once what the cluster still bills, and a follower of the log is told the end is done."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import datetime, timedelta, timezone

from provisioning.catalog.model import Market
from provisioning.cloud.types import CloudKind, CloudResources, NodeRecord
from provisioning.clusters.store import ClusterRow, ClusterStatus, Store
from provisioning.core.home import deepvm_home
from provisioning.planner.plan import Role
from tests.cloud.plans import make_plan
from training.head import job_end
from training.shared.guard import JobGuard, NotifyTarget
from training.shared.jobstore import JobRow, JobStatus, JobStore
from training.shared.layout import END_MARK
from training.shared.records import HeadJob
from training.shared.summary import SUMMARY_FILE, RunSummary

START = datetime.now(timezone.utc).replace(microsecond=0) - timedelta(hours=2)


def _at(hours: float) -> str:
    return (START + timedelta(hours=hours)).isoformat()


def _node(instance_id: str, market: Market, role: Role, price: float, launched: float, state: str = "running"):
    return NodeRecord(
        instance_id,
        "g4dn.xlarge",
        market,
        role,
        "us-east-1a",
        state,
        "10.0.0.1",
        None,
        price,
        _at(launched),
        "root",
        22,
    )


def _head_job(tmp_path, events_file) -> HeadJob:
    cluster = ClusterRow("c1", CloudKind.AWS, ClusterStatus.UP, make_plan(), "tok", CloudResources("k"), "root", _at(0))
    nodes = (_node("i-head", Market.ON_DEMAND, Role.ANCHOR, 0.5, 0), _node("i-spot", Market.SPOT, Role.TRAINER, 0.2, 0))
    guard = JobGuard(notify=NotifyTarget(command=f"{{ cat; echo; }} >> {events_file}"))
    return HeadJob(
        "job-1",
        cluster,
        nodes,
        "job.yaml",
        "python3",
        True,
        3,
        None,
        {},
        {},
        _at(0),
        guard=guard,
        on_demand_prices={"g4dn.xlarge": 0.5},
    )


def _seed(job: HeadJob, status: JobStatus) -> None:
    store = Store()
    store.put_cluster(job.cluster)
    store.put_nodes("c1", list(job.nodes))
    # a replacement the head bought an hour in; the interrupted spot node is seen gone now, at the job's end
    store.put_nodes("c1", [_node("i-new", Market.SPOT, Role.TRAINER, 0.2, 1)])
    store.put_nodes("c1", [replace(job.nodes[1], state="terminated")])
    store.add_event("c1", "notice", "job-1: Spot interruption notice on i-spot")
    store.add_event("c1", "replacement", "job-1: i-new ready")
    store.add_event("c1", "notice", "job-0: a notice of another job")
    JobStore().put(
        JobRow(
            job_id="job-1",
            cluster="c1",
            name="resnet",
            spec_path="job.yaml",
            status=status,
            started_at=_at(0),
            updated_at=_at(2),
            step=100,
            total_steps=100,
            world_size=2,
            loss=0.1,
            restarts=1,
            lost_steps=0,
            checkpoint_step=100,
            cost_base_usd=0.0,
            cost_usd=0.0,
            out_dir="",
            python="python3",
            message="completed",
            controller="i-head",
        )
    )


def test_the_end_writes_the_summary_tells_the_hook_and_says_once_what_still_bills(tmp_path):
    events = tmp_path / "events.jsonl"
    job = _head_job(tmp_path, events)
    root = deepvm_home() / "jobs" / "job-1"
    root.mkdir(parents=True)
    (root / "job.json").write_text(job.to_json())
    _seed(job, JobStatus.COMPLETED)
    job_end.finish(root)

    summary = RunSummary.from_json((root / SUMMARY_FILE).read_text())
    assert (summary.status, summary.step, summary.interruptions, summary.replacements) == (
        JobStatus.COMPLETED,
        100,
        1,
        1,
    )
    # the head's H hours at 0.5 $/h, the spot node's H and its replacement's H - 1 at 0.2 $/h (H: about 2, the
    # job's start to its end as the job store recorded it); on demand, the same node-hours at 0.5 $/h
    hours = (datetime.fromisoformat(summary.ended_at or "") - START).total_seconds() / 3600
    assert 2 <= hours < 2.5
    assert abs(summary.cost_usd - (hours * 0.5 + hours * 0.2 + (hours - 1) * 0.2)) < 1e-5
    assert summary.on_demand_usd is not None and abs(summary.on_demand_usd - (3 * hours - 1) * 0.5) < 1e-5
    assert summary.cluster_down == "" and summary.billing_usd_per_hour > 0
    (sent,) = [json.loads(line) for line in events.read_text().splitlines() if line.strip()]
    assert sent["event"] == "completion" and sent["summary"]["job_id"] == "job-1"
    notes = [json.loads(line).get("text", "") for line in (root / "log.jsonl").read_text().splitlines()]
    billing = [n for n in notes if "still bills" in n]
    assert billing == [
        f"the job is over and cluster c1 still bills ${summary.billing_usd_per_hour:.4f}/h: "
        "`deepvm down c1` stops it (`train --down-when-done` does it for the next job)"
    ]
    assert (root / END_MARK).exists()
    assert summary.lines()[1].startswith(f"cost ${summary.cost_usd:.4f}; on-demand would have cost $")
