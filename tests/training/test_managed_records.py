"""The records between the user's machine and the head keep their JSON as before while the code holds
statuses as enums: each is written once and read back equal."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest

from provisioning.catalog.model import Market
from provisioning.cloud.types import CloudKind, CloudResources, NodeRecord
from provisioning.clusters.store import ClusterRow, ClusterStatus
from provisioning.planner.plan import Role
from tests.cloud.plans import make_plan
from training.shared.jobstore import JobStatus
from training.shared.progress import Outcome, Progress, RecoveryReason, RelaunchPhases, TrainResult
from training.shared.records import HeadJob, JobSummary, LogKind, LogRecord
from training.shared.scalars import MetricPoint


def test_a_state_record_carries_the_status_string_and_reads_back_as_the_enum():
    record = LogRecord("state", 2.0, text="completed: step 20/20", status=JobStatus.COMPLETED)
    assert json.loads(record.to_json()) == {
        "kind": "state",
        "at": 2.0,
        "text": "completed: step 20/20",
        "status": "completed",
    }
    back = LogRecord.from_json(record.to_json())
    assert back == record and back.status is JobStatus.COMPLETED and back.status.final


def test_other_records_have_no_status():
    note = LogRecord("note", 1.0, text="attempt 1: 3 trainers")
    assert "status" not in json.loads(note.to_json())
    assert LogRecord.from_json(note.to_json()).status is None


def test_a_job_summary_round_trips():
    at = "2026-11-23T10:00:00+00:00"
    summary = JobSummary(
        "resnet-1", "c1", "resnet", JobStatus.RUNNING, 5, 20, 1.25, 3, 4, 0, 0, 0.01, at, at, "attempt 1 running", True
    )
    assert json.loads(summary.to_json())["status"] == "running"
    back = JobSummary.from_json(summary.to_json())
    assert back == summary and back.status is JobStatus.RUNNING and not back.status.final


def test_the_head_job_keeps_the_cluster_status():
    node = NodeRecord(
        "i-1",
        "g4dn.xlarge",
        Market.ON_DEMAND,
        Role.ANCHOR,
        "us-east-1a",
        "running",
        "10.0.0.1",
        None,
        0.526,
        "2026-11-23T10:00:00+00:00",
        "root",
        22,
    )
    cluster = ClusterRow(
        "c1",
        CloudKind.SANDBOX,
        ClusterStatus.UP,
        make_plan(),
        "tok",
        CloudResources("k"),
        "root",
        "2026-11-23T10:00:00+00:00",
    )
    job = HeadJob("resnet-1", cluster, (node,), "resnet.yaml", "python3", True, 3, None, {}, {}, "now")
    assert json.loads(job.to_json())["cluster"]["status"] == "up"
    back = HeadJob.from_json(job.to_json())
    assert back.cluster.status is ClusterStatus.UP and back.nodes == job.nodes
    assert replace(back.cluster, plan=cluster.plan) == cluster  # the plan's price is written rounded


def test_the_head_job_carries_the_startup_grace_and_reads_an_older_one_without():
    cluster = ClusterRow(
        "c1",
        CloudKind.SANDBOX,
        ClusterStatus.UP,
        make_plan(),
        "tok",
        CloudResources("k"),
        "root",
        "2026-11-23T10:00:00+00:00",
    )
    job = HeadJob("j-1", cluster, (), "job.yaml", "python3", True, 3, 20.0, {}, {}, "now", startup_grace_s=45.0)
    assert HeadJob.from_json(job.to_json()).startup_grace_s == 45.0
    older = json.loads(job.to_json())
    del older["startup_grace_s"]
    assert HeadJob.from_json(json.dumps(older)).startup_grace_s is None  # the job file's, or the default


# a managed job's result.json as the head wrote it before recoveries kept their phases
OLD_RESULT = (
    '{"job_id": "bench-20261125T101010", "cluster": "bench", "status": "completed", "steps": 80, "total_steps": 80, '
    '"final_loss": 2.1, "synthetic": true, "restarts": 1, "lost_steps": 0, "cost_usd": 0.01, "wall_s": 70.5, '
    '"out_dir": "/root/deepvm/managed/jobs/bench-20261125T101010/out", "attempts": [{"number": 1, "nodes": '
    '["i-1", "i-2"], "world_size": 1, "first_step": 0, "last_step": 14, "status": "stopped", "returncode": 0, '
    '"startup_s": 5.5}], "recoveries": [{"reason": "notice", "nodes": ["i-2"], "from_step": 14, "resumed_step": '
    '14, "lost_steps": 0, "world_before": 2, "world_after": 1, "detected_wall": 1700000000.5, '
    '"detect_to_checkpoint_s": 0.4, "detect_to_resumed_s": 10.5}]}'
)


def test_a_result_of_before_reads_as_the_record_and_writes_back_with_its_values():
    result = TrainResult.from_json(OLD_RESULT)
    assert result.status is JobStatus.COMPLETED and result.attempts[0].status is Outcome.STOPPED
    (recovery,) = result.recoveries
    assert recovery.reason is RecoveryReason.NOTICE and recovery.nodes == ("i-2",) and recovery.phases is None
    again = json.loads(result.to_json())
    assert again == {
        **json.loads(OLD_RESULT),
        "lost_s": 0.0,  # what it did not keep: phases, a script's lost time
        "recoveries": [{**json.loads(OLD_RESULT)["recoveries"][0], "phases": None, "lost_s": None}],
    }
    assert TrainResult.from_json(result.to_json()) == result


def test_a_result_with_phases_round_trips():
    phases = RelaunchPhases(0.4, 1.0, 0.5, 3.0, 0.2, 0.6)
    result = replace(
        TrainResult.from_json(OLD_RESULT),
        recoveries=[replace(TrainResult.from_json(OLD_RESULT).recoveries[0], phases=phases)],
    )
    assert TrainResult.from_json(result.to_json()).recoveries[0].phases == phases and phases.total_s == 5.7


def test_a_log_line_of_a_kind_none_of_ours_is_not_a_record():
    with pytest.raises(ValueError, match="'chat' is not a valid LogKind"):
        LogRecord.from_json('{"kind": "chat", "at": 1.0, "text": "hi"}')
    assert LogRecord.from_json('{"kind": "note", "at": 1.0, "text": "hi"}').kind is LogKind.NOTE


def _refuse(constant: str) -> float:
    raise ValueError(f"{constant} is not JSON")


def test_a_diverged_runs_result_and_log_lines_are_strict_json_and_read_back_as_nan():
    """result.json and log.jsonl hold a run's losses and rates: NaN and the infinities are null there (strict
    JSON, which jq and JSON.parse read), and the records read them back as NaN."""
    result = replace(TrainResult.from_json(OLD_RESULT), final_loss=math.nan)
    assert json.loads(result.to_json(), parse_constant=_refuse)["final_loss"] is None
    assert math.isnan(TrainResult.from_json(result.to_json()).final_loss)
    progress = Progress(
        step=3,
        total_steps=9,
        epoch=None,
        loss=math.nan,
        samples_per_s=math.inf,
        world_size=2,
        cost_usd=0.01,
        synthetic=False,
    )
    point = MetricPoint(3, {"loss": math.nan, "grad_norm": -math.inf})
    for record in (LogRecord("progress", 1.0, progress=progress), LogRecord("metrics", 1.0, metrics=point)):
        line = record.to_json()
        json.loads(line, parse_constant=_refuse)
        back = LogRecord.from_json(line)
        numbers = [back.progress.loss, back.progress.samples_per_s] if back.progress else back.metrics.values.values()
        assert all(math.isnan(n) for n in numbers), back
