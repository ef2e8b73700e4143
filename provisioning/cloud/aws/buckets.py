"""The S3 bucket deepvm makes for a cluster's outputs (issue 25): where a job that names no `s3_prefix` has its
outputs, log and last checkpoint copied before its head takes the cluster down, and where the head leaves its
record of the cluster's end.

One bucket per cluster, named from the cluster's identity and region (`deepvm-NAME-ID-REGION-out`, cut to
S3's 63 characters, lower case): the teardown finds it with no local state, and the random id keeps the
name from meeting anyone else's (bucket names are global across all of AWS). It is tagged with the cluster,
blocks public access (S3's default for new buckets since April 2023:
https://docs.aws.amazon.com/AmazonS3/latest/userguide/access-control-block-public-access.html), and is
deleted with the cluster by `deepvm down` unless `--keep-outputs`; a cluster its head took down keeps it
until then, since that is where the outputs wait. Its cost is S3's for what it holds (README, "The outputs
bucket").
"""

from __future__ import annotations

import re

from botocore.exceptions import BotoCoreError, ClientError

from provisioning.cloud.aws.context import AwsContext, error_code
from provisioning.cloud.names import ClusterIdentity, cluster_tags
from provisioning.core.errors import CloudError

BUCKET_NAME_MAX = 63  # S3: 3 to 63 characters, lower-case letters, digits, '-' and '.'
_GONE = ("NoSuchBucket", "404", "NotFound")


def bucket_name(cluster: ClusterIdentity, region: str) -> str:
    """The cluster's outputs bucket: `deepvm-NAME-ID-REGION-out`, the name shortened to fit and made of
    what S3 accepts (the id keeps it unique)."""
    tail = f"-{cluster.cluster_id}-{region}-out"
    name = re.sub(r"[^a-z0-9-]+", "-", cluster.name.lower()).strip("-") or "c"
    return f"deepvm-{name[: BUCKET_NAME_MAX - len('deepvm-') - len(tail)].rstrip('-')}{tail}"


def ensure_bucket(ctx: AwsContext, cluster: ClusterIdentity) -> str:
    """The cluster's outputs bucket, made (and tagged with the cluster) if it is not there; its name.
    S3 wants the region as a LocationConstraint everywhere but us-east-1, where it must be left out
    (https://docs.aws.amazon.com/AmazonS3/latest/API/API_CreateBucket.html)."""
    if not cluster.cluster_id:
        raise CloudError(
            f"cluster {cluster.name} was made before clusters had ids: its outputs bucket would have no "
            "name of its own; `deepvm down` it and `deepvm up` it again"
        )
    s3 = ctx.client("s3")
    name = bucket_name(cluster, ctx.region)
    where = {} if ctx.region == "us-east-1" else {"CreateBucketConfiguration": {"LocationConstraint": ctx.region}}
    try:
        try:
            s3.create_bucket(Bucket=name, **where)
        except ClientError as exc:
            if error_code(exc) != "BucketAlreadyOwnedByYou":  # made by an earlier `train`: ours
                raise
        tags = [{"Key": t["Key"], "Value": t["Value"]} for t in cluster_tags(cluster, Name=name)]
        s3.put_bucket_tagging(Bucket=name, Tagging={"TagSet": tags})
    except ClientError as exc:
        code = error_code(exc)
        if code == "BucketAlreadyExists":
            raise CloudError(
                f"the S3 bucket name {name} is taken by another account; `deepvm up` the cluster again for a new id"
            ) from exc
        raise CloudError(f"making the cluster's outputs bucket {name}: {code}: {exc}") from exc
    except BotoCoreError as exc:
        raise CloudError(f"making the cluster's outputs bucket {name}: {exc}") from exc
    return name


def bucket_of(ctx: AwsContext, cluster: ClusterIdentity, known: str = "") -> str:
    """The cluster's outputs bucket if it exists and carries the cluster's tag (a bucket of that name that
    deepvm did not tag is never touched), else ""."""
    if not cluster.cluster_id:
        return ""
    name = known or bucket_name(cluster, ctx.region)
    try:
        tags = ctx.client("s3").get_bucket_tagging(Bucket=name)["TagSet"]
    except ClientError as exc:
        if error_code(exc) in (*_GONE, "NoSuchTagSet", "AccessDenied"):
            return ""
        raise CloudError(f"checking the cluster's outputs bucket {name}: {error_code(exc)}") from exc
    return name if cluster.owns(tags) else ""


def delete_bucket(ctx: AwsContext, name: str) -> bool:
    """Empty the bucket and delete it; False when it was gone already. Objects go in pages of 1000 (S3's
    DeleteObjects limit); the bucket is not versioned, so no versions stay behind."""
    s3 = ctx.client("s3")
    try:
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=name):
            keys = [{"Key": o["Key"]} for o in page.get("Contents", [])]
            if keys:
                s3.delete_objects(Bucket=name, Delete={"Objects": keys, "Quiet": True})
        s3.delete_bucket(Bucket=name)
    except ClientError as exc:
        if error_code(exc) in _GONE:
            return False
        raise
    return True
