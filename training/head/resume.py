"""A job continued on this head from its checkpoint in S3 (`deepvm train JOB.yaml --resume` on any cluster, a
new one included, after the job stopped at its time limit or failed on another): before its controller
starts, the checkpoint the old head copied at the job's end (training/head/outputs.py) is downloaded onto
this head's disk, into the job's DeepCheck L2 directory (the head is always a checkpoint holder), where the
first launch's restore finds it complete (its manifest last, as DeepCheck writes its own); and the job's row
is seeded here, stopped at that step with its counts, so the controller resumes it as the user's resume.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from provisioning.clusters.handle import Cluster
from provisioning.clusters.store import utc_now
from training.control.jobrecord import TrainRequest, fresh_row
from training.shared.guard import ResumeFrom
from training.shared.jobstore import JobStatus, JobStore
from training.shared.records import HeadJob
from training.shared.s3url import split_s3_url


def download_checkpoint(resume: ResumeFrom, job_id: str, home: Path) -> Path:
    """The checkpoint's files in the job's L2 directory on this node; the directory."""
    import boto3  # the head's role: `train` granted it reading exactly this checkpoint

    s3 = boto3.client("s3")
    bucket, prefix = split_s3_url(resume.checkpoint_url)
    target = home / "deepvm" / "jobs" / job_id / "checkpoints" / prefix.rsplit("/", 1)[-1]
    target.mkdir(parents=True, exist_ok=True)
    keys = [
        o["Key"]
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=f"{prefix}/")
        for o in page.get("Contents", [])
    ]
    for key in sorted(keys, key=lambda k: k.endswith("manifest.json")):  # the manifest last: complete only then
        s3.download_file(bucket, key, str(target / key.rsplit("/", 1)[-1]))
    return target


def seed_row(job: HeadJob, request: TrainRequest, name: str) -> None:
    """The job's row on this head, as it stopped on the cluster it ran on before: `choose_job` then resumes it
    (a user's resume). Its cost goes on from what it cost there (the base is this cluster's cost now less it)."""
    resume = job.resume
    assert resume is not None
    jobs = JobStore()
    if jobs.get(job.job_id) is not None:  # a restarted controller: the row is here already
        return
    here = Cluster.open(job.cluster.name).cost().usd
    row = fresh_row(request, name, 0, job.cluster.name, job.job_id, here - resume.cost_usd)
    jobs.put(
        replace(
            row,
            status=JobStatus.STOPPED,
            step=resume.step,
            checkpoint_step=resume.step,
            restarts=resume.restarts,
            lost_steps=resume.lost_steps,
            started_at=resume.started_at or utc_now(),
            message=f"stopped at step {resume.step}; resumed from {resume.checkpoint_url}",
        )
    )
