"""Fetch a dataset stored under an S3 prefix into a local cache, once per node.

Credentials and endpoint come the way boto3 finds them (AWS_ENDPOINT_URL included, so moto works).
A file already cached with the object's size is not downloaded again; downloads land under a
temporary name and are renamed, so an interrupted download never looks complete and ranks sharing a
node may download at once.
"""

from __future__ import annotations

import os
from pathlib import Path

from provisioning.core.errors import CloudError, InputError


def split_s3_url(url: str) -> tuple[str, str]:
    """("bucket", "prefix/") from "s3://bucket/prefix"; the prefix always ends in "/" unless empty."""
    if not url.startswith("s3://") or len(url) <= len("s3://"):
        raise InputError(f"{url!r}: expected s3://bucket/prefix")
    bucket, _, prefix = url[len("s3://") :].partition("/")
    if prefix and not prefix.endswith("/"):
        prefix += "/"
    return bucket, prefix


def download_prefix(url: str, cache_dir: str | Path) -> Path:
    """Mirror every object under ``url`` into ``cache_dir/bucket/prefix`` and return that directory."""
    import boto3  # imported here: a second of start-up that synthetic and local runs never need
    from botocore.exceptions import BotoCoreError, ClientError

    bucket, prefix = split_s3_url(url)
    target = Path(cache_dir).expanduser() / bucket / prefix
    s3 = boto3.client("s3")
    count = 0
    try:
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
            for obj in page.get("Contents", []):
                relative = obj["Key"][len(prefix) :]
                if not relative or relative.endswith("/") or ".." in relative.split("/"):
                    continue
                local = target / relative
                count += 1
                if local.is_file() and local.stat().st_size == obj["Size"]:
                    continue
                local.parent.mkdir(parents=True, exist_ok=True)
                partial = local.with_name(f"{local.name}.{os.getpid()}.part")  # ranks share a node
                s3.download_file(bucket, obj["Key"], str(partial))
                os.replace(partial, local)
    except (ClientError, BotoCoreError) as exc:
        raise CloudError(f"{url}: cannot download dataset: {exc}") from None
    if count == 0:
        raise InputError(f"{url}: no objects under this prefix")
    return target
