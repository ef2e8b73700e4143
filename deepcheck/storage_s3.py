"""L3: complete checkpoints copied to S3 (or any S3-compatible store).

Same layout and the same rule as L2: shards first (multipart uploads), the manifest object last, so a
checkpoint is complete in S3 exactly when its manifest object exists; retention deletes the manifest
before the shards. boto3 is imported only when an S3Store is built, so DeepCheck without L3 needs
only torch and mpi4py.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from .errors import ConfigError, CorruptCheckpointError
from .manifest import CheckpointId, Manifest, ShardInfo, verify_shard
from .storage_disk import MANIFEST, shard_name

log = logging.getLogger("deepcheck")
MIN_PART = 5 << 20  # S3's smallest multipart part (all but the last)


@dataclass(frozen=True)
class S3Config:
    bucket: str  # existing bucket
    prefix: str = "deepcheck"  # key prefix; one prefix per training job
    endpoint_url: str | None = None  # e.g. a moto server or MinIO; None means AWS (or $AWS_ENDPOINT_URL)
    region: str | None = None  # None means the boto3 default chain
    part_size: int = 8 << 20  # multipart part size and threshold

    def __post_init__(self):
        if not self.bucket:
            raise ConfigError("S3Config.bucket must name an existing bucket")
        if self.part_size < MIN_PART:
            raise ConfigError(f"S3Config.part_size must be at least {MIN_PART} bytes (S3's minimum part)")


class S3Store:
    def __init__(self, cfg: S3Config):
        import boto3
        from boto3.s3.transfer import TransferConfig

        self.cfg = cfg
        self.client = boto3.client("s3", endpoint_url=cfg.endpoint_url, region_name=cfg.region)
        self.transfer = TransferConfig(multipart_threshold=cfg.part_size, multipart_chunksize=cfg.part_size)

    def key(self, ckpt: CheckpointId, name: str) -> str:
        return f"{self.cfg.prefix.strip('/')}/{ckpt.name}/{name}"

    def upload_shard(self, ckpt: CheckpointId, index: int, path: Path) -> None:
        self.client.upload_file(str(path), self.cfg.bucket, self.key(ckpt, shard_name(index)), Config=self.transfer)

    def commit(self, manifest: Manifest) -> None:
        """Upload the manifest; call only after every shard of the checkpoint is uploaded."""
        self.client.put_object(Bucket=self.cfg.bucket, Key=self.key(manifest.ckpt, MANIFEST), Body=manifest.to_bytes())

    def _ckpt_ids(self) -> list[CheckpointId]:
        pages = self.client.get_paginator("list_objects_v2").paginate(
            Bucket=self.cfg.bucket, Prefix=self.cfg.prefix.strip("/") + "/", Delimiter="/"
        )
        ids = []
        for page in pages:
            for p in page.get("CommonPrefixes", []):
                ckpt = CheckpointId.parse(p["Prefix"].rstrip("/").rsplit("/", 1)[-1])
                if ckpt is not None:
                    ids.append(ckpt)
        return sorted(ids, reverse=True)

    def manifests(self) -> list[Manifest]:
        """Committed, readable manifests in the bucket, newest first."""
        out = []
        for ckpt in self._ckpt_ids():
            key = self.key(ckpt, MANIFEST)
            try:
                body = self.client.get_object(Bucket=self.cfg.bucket, Key=key)["Body"].read()
            except self.client.exceptions.NoSuchKey:
                continue
            try:
                out.append(Manifest.from_bytes(body, f"s3://{self.cfg.bucket}/{key}"))
            except CorruptCheckpointError as exc:
                log.warning("skipping checkpoint %s: %s", ckpt, exc)
        return out

    def read_shard(self, ckpt: CheckpointId, info: ShardInfo) -> bytearray:
        key = self.key(ckpt, shard_name(info.index))
        where = f"s3://{self.cfg.bucket}/{key}"
        try:
            body = self.client.get_object(Bucket=self.cfg.bucket, Key=key)["Body"].read()
        except self.client.exceptions.NoSuchKey as exc:
            raise CorruptCheckpointError(f"{where}: shard object is missing") from exc
        buf = bytearray(body)
        verify_shard(buf, info, where)
        return buf

    def delete(self, ckpt: CheckpointId) -> None:
        self.client.delete_object(Bucket=self.cfg.bucket, Key=self.key(ckpt, MANIFEST))
        pages = self.client.get_paginator("list_objects_v2").paginate(Bucket=self.cfg.bucket, Prefix=self.key(ckpt, ""))
        for page in pages:
            for obj in page.get("Contents", []):
                self.client.delete_object(Bucket=self.cfg.bucket, Key=obj["Key"])

    def retain(self, keep: int) -> list[CheckpointId]:
        """Delete checkpoints older than the `keep`-th newest committed one (never the newest)."""
        committed = [m.ckpt for m in self.manifests()]
        if len(committed) <= keep:
            return []
        horizon = committed[keep - 1]
        old = [c for c in self._ckpt_ids() if c < horizon]
        for ckpt in old:
            self.delete(ckpt)
        return old
