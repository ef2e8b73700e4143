"""s3://bucket/key/prefix URLs, as job files and records give them."""

from __future__ import annotations


def split_s3_url(url: str) -> tuple[str, str]:
    """("bucket", "key/prefix") from "s3://bucket/key/prefix/" (no slashes around the prefix)."""
    bucket, _, prefix = url.removeprefix("s3://").partition("/")
    return bucket, prefix.strip("/")
