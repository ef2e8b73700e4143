"""The records between the user's machine and the head keep their JSON as before while the code holds
statuses as enums: each is written once and read back equal."""

from __future__ import annotations

import json
from dataclasses import replace

from provisioning.catalog.model import Market
from provisioning.cloud.types import CloudKind, CloudResources, NodeRecord
from provisioning.clusters.store import ClusterRow, ClusterStatus
from provisioning.planner.plan import Role
from tests.cloud.plans import make_plan
from training.shared.jobstore import JobStatus
from training.shared.records import HeadJob, JobSummary, LogRecord


def test_a_state_record_carries_the_status_string_and_reads_back_as_the_enum():
    record = LogRecord("state", 2.0, text="completed: step 20/20", status=JobStatus.COMPLETED)
    assert json.loads(record.to_json()) == {"kind": "state", "at": 2.0, "text": "completed: step 20/20",
                                            "status": "completed"}  # fmt: skip
    back = LogRecord.from_json(record.to_json())
    assert back == record and back.status is JobStatus.COMPLETED and back.status.final


def test_other_records_have_no_status():
    note = LogRecord("note", 1.0, text="attempt 1: 3 trainers")
    assert "status" not in json.loads(note.to_json())
    assert LogRecord.from_json(note.to_json()).status is None


def test_a_job_summary_round_trips():
    at = "2026-11-23T10:00:00+00:00"
    summary = JobSummary("resnet-1", "c1", "resnet", JobStatus.RUNNING, 5, 20, 1.25, 3, 4, 0, 0, 0.01, at, at,
                         "attempt 1 running", True)  # fmt: skip
    assert json.loads(summary.to_json())["status"] == "running"
    back = JobSummary.from_json(summary.to_json())
    assert back == summary and back.status is JobStatus.RUNNING and not back.status.final


def test_the_head_job_keeps_the_cluster_status():
    node = NodeRecord("i-1", "g4dn.xlarge", Market.ON_DEMAND, Role.ANCHOR, "us-east-1a", "running", "10.0.0.1",
                      None, 0.526, "2026-11-23T10:00:00+00:00", "root", 22)  # fmt: skip
    cluster = ClusterRow("c1", CloudKind.SANDBOX, ClusterStatus.UP, make_plan(), "tok", CloudResources("k"), "root",
                         "2026-11-23T10:00:00+00:00")  # fmt: skip
    job = HeadJob("resnet-1", cluster, (node,), "resnet.yaml", "python3", True, 3, None, {}, {}, "now")
    assert json.loads(job.to_json())["cluster"]["status"] == "up"
    back = HeadJob.from_json(job.to_json())
    assert back.cluster.status is ClusterStatus.UP and back.nodes == job.nodes
    assert replace(back.cluster, plan=cluster.plan) == cluster  # the plan's price is written rounded
