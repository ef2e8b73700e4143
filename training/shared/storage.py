"""Where a job's objects live in S3, from its spec: the one place that says so, for the ranks that write
them (DeepCheck's L3 on every holder, training.node.rank), the head's log mirror (training.head.log_mirror)
and its copy of the job's outputs at its end (training.head.outputs), and the user's side that grants exactly
these areas to the cluster's roles before the job starts (training.client.storage)."""

from __future__ import annotations

from provisioning.cloud.types import JobStorage, S3Area
from training.shared.jobspec import Cifar10Data, JobSpec
from training.shared.s3url import split_s3_url

LOG_DIR = "deepvm-jobs"  # under the job's prefix: the managed jobs' mirrored logs, results and outputs
CHECKPOINT_DIR = "checkpoint"  # under a job's files: the newest checkpoint copied at its end (training/head/outputs.py)


def job_key(s3_prefix: str, job_id: str, name: str) -> tuple[str, str]:
    """(bucket, key) of one of a managed job's files in S3 (its log mirror, its outputs at its end: name ""
    gives the key prefix they share)."""
    bucket, prefix = split_s3_url(s3_prefix)
    return bucket, "/".join(p for p in (prefix, LOG_DIR, job_id, name) if p)


def outputs_url(spec: JobSpec, cluster_bucket: str) -> str:
    """Where a job's files go at its end (training/head/outputs.py): beside its log mirror when it has L3 in a
    bucket of its own, else the bucket deepvm made for the cluster."""
    l3 = spec.checkpoint_plan.l3
    return l3.url if l3 is not None else f"s3://{cluster_bucket}"


def job_storage(spec: JobSpec, head_trains: bool, head_reads: tuple[S3Area, ...] = ()) -> JobStorage | None:
    """The S3 areas the job uses, by the nodes that use them; None when it uses none that deepvm grants.

    Every holder writes, reads, lists and deletes L3 (any holder may lead: the lowest holder rank leads,
    and a replaced holder may be it); the head also mirrors the job's log (beside L3, or in the bucket's
    `deepvm-jobs/` when s3_prefix names only a bucket) and, when it trains (a Single Anchor's anchor), reads
    an S3 dataset. Trainers read a dataset with the launch template's `--instance-profile`, as before.
    `head_reads`: more areas the head reads (the checkpoint a job resumed from another cluster starts from)."""
    l3 = spec.checkpoint_plan.l3
    dataset = spec.dataset.s3 if isinstance(spec.dataset, Cifar10Data) else None
    if l3 is None and not (dataset and head_trains) and not head_reads:
        return None
    holders: tuple[S3Area, ...] = ()
    head: list[S3Area] = []
    if l3 is not None:
        holders = (S3Area(l3.bucket, f"{l3.prefix}/", writes=True),)
        bucket, logs = job_key(l3.url, "", "")
        if not logs.startswith(f"{l3.prefix}/"):
            head.append(S3Area(bucket, logs.rstrip("/") + "/", writes=True))
    if dataset and head_trains:
        bucket, prefix = split_s3_url(dataset)
        head.append(S3Area(bucket, f"{prefix}/" if prefix else "", writes=False))
    return JobStorage(holders=holders, head=(*head, *head_reads))
