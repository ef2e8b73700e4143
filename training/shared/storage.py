"""Where a job's objects live in S3, from its spec: the one place that says so, for the ranks that write
them (DeepCheck's L3 on every holder, training.node.rank), the head's log mirror (training.head.log_mirror)
and its copy of the job's outputs at its end (training.head.outputs), and the user's side that grants exactly
these areas to the cluster's roles before the job starts (training.client.storage)."""

from __future__ import annotations

from provisioning.cloud.types import JobStorage, S3Area
from training.shared.jobspec import CheckpointSpec, Cifar10Data, JobSpec

L3_DEFAULT_PREFIX = "deepcheck"  # the key prefix of L3 when s3_prefix names only a bucket
LOG_DIR = "deepvm-jobs"  # under the job's prefix: the managed jobs' mirrored logs, results and outputs
CHECKPOINT_DIR = "checkpoint"  # under a job's files: the newest checkpoint copied at its end (training/head/outputs.py)


def split_s3_url(url: str) -> tuple[str, str]:
    """("bucket", "key/prefix") from "s3://bucket/key/prefix/" (no slashes around the prefix)."""
    bucket, _, prefix = url.removeprefix("s3://").partition("/")
    return bucket, prefix.strip("/")


def l3_location(checkpoint: CheckpointSpec) -> tuple[str, str] | None:
    """(bucket, key prefix) DeepCheck's L3 writes under, or None when the job has no L3."""
    if "l3" not in checkpoint.levels or not checkpoint.s3_prefix:
        return None
    bucket, prefix = split_s3_url(checkpoint.s3_prefix)
    return bucket, prefix or L3_DEFAULT_PREFIX


def job_key(s3_prefix: str, job_id: str, name: str) -> tuple[str, str]:
    """(bucket, key) of one of a managed job's files in S3 (its log mirror, its outputs at its end: name ""
    gives the key prefix they share)."""
    bucket, prefix = split_s3_url(s3_prefix)
    return bucket, "/".join(p for p in (prefix, LOG_DIR, job_id, name) if p)


def outputs_url(spec: JobSpec, cluster_bucket: str) -> str:
    """Where a job's files go at its end (training/head/outputs.py): beside its log mirror when it has L3 in a
    bucket of its own, else the bucket deepvm made for the cluster."""
    if l3_location(spec.checkpoint) is not None and spec.checkpoint.s3_prefix:
        return spec.checkpoint.s3_prefix
    return f"s3://{cluster_bucket}"


def job_storage(spec: JobSpec, head_trains: bool, head_reads: tuple[S3Area, ...] = ()) -> JobStorage | None:
    """The S3 areas the job uses, by the nodes that use them; None when it uses none that deepvm grants.

    Every holder writes, reads, lists and deletes L3 (any holder may lead: the lowest holder rank leads,
    and a replaced holder may be it); the head also mirrors the job's log (beside L3, or in the bucket's
    `deepvm-jobs/` when s3_prefix names only a bucket) and, when it trains (a Single Anchor's anchor), reads
    an S3 dataset. Trainers read a dataset with the launch template's `--instance-profile`, as before.
    `head_reads`: more areas the head reads (the checkpoint a job resumed from another cluster starts from)."""
    l3 = l3_location(spec.checkpoint)
    dataset = spec.dataset.s3 if isinstance(spec.dataset, Cifar10Data) else None
    if l3 is None and not (dataset and head_trains) and not head_reads:
        return None
    holders: tuple[S3Area, ...] = ()
    head: list[S3Area] = []
    if l3 is not None:
        holders = (S3Area(l3[0], f"{l3[1]}/", writes=True),)
        bucket, logs = job_key(spec.checkpoint.s3_prefix or "", "", "")
        if not logs.startswith(f"{l3[1]}/"):
            head.append(S3Area(bucket, logs.rstrip("/") + "/", writes=True))
    if dataset and head_trains:
        bucket, prefix = split_s3_url(dataset)
        head.append(S3Area(bucket, f"{prefix}/" if prefix else "", writes=False))
    return JobStorage(holders=holders, head=(*head, *head_reads))
