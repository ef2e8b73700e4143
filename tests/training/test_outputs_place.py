"""Where a managed job's outputs and log are now (training/client/outputs.py), on this machine's real state store
and a moto S3 over HTTP: on the head while its cluster is up, in S3 once it is down (or as soon as a job whose end
takes its cluster down is over), gone (with why) when nothing was copied; and `train --resume` on any cluster
finds the checkpoint a stopped job's head copied, and refuses a completed one with why."""

from __future__ import annotations

import boto3
import pytest

from provisioning.cloud.types import CloudKind, CloudResources
from provisioning.clusters.store import ClusterRow, ClusterStatus, Store
from provisioning.core.errors import InputError
from tests.cloud.plans import make_plan
from training.client.outputs import Where, find_resumed, job_outputs, s3_log
from training.shared.jobstore import JobRow, JobStatus, JobStore
from training.shared.summary import RunSummary

BUCKET = "guard-outputs"
FILES = "deepvm-jobs/job-1"


@pytest.fixture
def s3(s3_endpoint, monkeypatch):
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_endpoint)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    client = boto3.client("s3", region_name="us-east-1")
    client.create_bucket(Bucket=BUCKET)
    yield client
    for item in client.list_objects_v2(Bucket=BUCKET).get("Contents", []):
        client.delete_object(Bucket=BUCKET, Key=item["Key"])
    client.delete_bucket(Bucket=BUCKET)


def _cluster(status: ClusterStatus) -> None:
    Store().put_cluster(
        ClusterRow(
            "c1", CloudKind.AWS, status, make_plan(), "tok", CloudResources("k"), "root", "2026-11-25T01:00:00+00:00"
        )
    )


def _row(status: JobStatus = JobStatus.RUNNING, outputs_url: str = f"s3://{BUCKET}", down: bool = False) -> JobRow:
    return JobStore().put(
        JobRow(
            job_id="job-1",
            cluster="c1",
            name="resnet",
            spec_path="job.yaml",
            status=status,
            started_at="2026-11-25T01:00:00+00:00",
            updated_at="",
            step=40,
            total_steps=100,
            world_size=2,
            loss=None,
            restarts=1,
            lost_steps=3,
            checkpoint_step=40,
            cost_base_usd=0.0,
            cost_usd=0.0,
            out_dir="/tmp/out",
            python="python3",
            message="",
            controller="i-head",
            outputs_url=outputs_url,
            down_when_done=down,
        )
    )


def _summary(status: JobStatus) -> bytes:
    return (
        RunSummary(
            job_id="job-1",
            cluster="c1",
            status=status,
            message=f"{status}",
            step=50,
            total_steps=100,
            started_at="2026-11-25T01:00:00+00:00",
            ended_at="2026-11-25T03:00:00+00:00",
            cost_usd=1.25,
            on_demand_usd=3.5,
            interruptions=1,
            replacements=1,
        )
        .to_json()
        .encode()
    )


def test_the_head_while_the_cluster_is_up_s3_once_it_is_down_or_nowhere_with_why(s3):
    _cluster(ClusterStatus.UP)
    assert job_outputs(_row()).where is Where.HEAD
    assert job_outputs(_row(JobStatus.COMPLETED, down=True)).where is Where.S3  # its end takes the cluster down
    _cluster(ClusterStatus.TERMINATED)
    place = job_outputs(_row())
    assert (place.where, place.url) == (Where.S3, f"s3://{BUCKET}/{FILES}/")
    s3.put_object(
        Bucket=BUCKET,
        Key=f"{FILES}/log.jsonl",
        Body=b'{"kind":"note","at":1.0,"text":"attempt 1"}\n{"kind":"note","at":2.0,"text":"done"}\n',
    )
    assert [r.text for r in s3_log(place)] == ["attempt 1", "done"]
    gone = job_outputs(_row(outputs_url=""))
    assert gone.where is Where.NOWHERE and gone.why.startswith("cluster c1 is down and the job's outputs were not")


def test_resume_finds_the_checkpoint_a_stopped_job_left_in_s3_even_on_a_cluster_still_up(s3):
    _cluster(ClusterStatus.UP)  # stopped at --max-duration; its cluster stays up
    _row(outputs_url=f"s3://{BUCKET}")
    with pytest.raises(InputError, match="job job-1 is still running: only a job that stopped or failed"):
        find_resumed("resnet")
    s3.put_object(Bucket=BUCKET, Key=f"{FILES}/summary.json", Body=_summary(JobStatus.STOPPED))
    with pytest.raises(InputError, match="left no checkpoint"):
        find_resumed("resnet")
    for key in ("shard-0000.bin", "manifest.json"):
        s3.put_object(Bucket=BUCKET, Key=f"{FILES}/checkpoint/ckpt-000050-2/{key}", Body=b"x")
    resumed = find_resumed("resnet")
    assert resumed.job_id == "job-1"
    start = resumed.start
    assert (start.checkpoint_url, start.step) == (f"s3://{BUCKET}/{FILES}/checkpoint/ckpt-000050-2/", 50)
    assert (start.restarts, start.lost_steps, start.cost_usd, start.on_demand_usd) == (1, 3, 1.25, 3.5)
    (area,) = resumed.reads
    assert (area.bucket, area.prefix, area.writes) == (BUCKET, f"{FILES}/checkpoint/ckpt-000050-2/", False)
    s3.put_object(Bucket=BUCKET, Key=f"{FILES}/summary.json", Body=_summary(JobStatus.COMPLETED))
    with pytest.raises(InputError, match="job job-1 is completed"):
        find_resumed("resnet")
    with pytest.raises(InputError, match="nothing to resume: no job named 'other'"):
        find_resumed("other")
