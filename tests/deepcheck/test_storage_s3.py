"""L3 against a moto S3 server reached over HTTP, the way boto3 talks to real S3."""

from __future__ import annotations

import boto3
import pytest
from dc_fixtures import make_checkpoint

from deepcheck import ConfigError, CorruptCheckpointError, S3Config
from deepcheck.storage_s3 import S3Store


@pytest.fixture
def store(s3_endpoint, tmp_path):
    bucket = f"ckpt-{tmp_path.name.lower().replace('_', '-')[-40:]}"
    boto3.client("s3", endpoint_url=s3_endpoint).create_bucket(Bucket=bucket)
    return S3Store(S3Config(bucket=bucket, prefix="job1", endpoint_url=s3_endpoint, part_size=5 << 20))


def _upload(store, tmp_path, step, size=1000):
    m, data = make_checkpoint(step, size=size)
    for info, d in zip(m.shards, data, strict=True):
        path = tmp_path / f"s{step}-{info.index}"
        path.write_bytes(d)
        store.upload_shard(m.ckpt, info.index, path)
    store.commit(m)
    return m, data


def test_multipart_upload_and_verified_read(store, tmp_path):
    m, data = _upload(store, tmp_path, 3, size=11 << 20)
    head = store.client.head_object(Bucket=store.cfg.bucket, Key=store.key(m.ckpt, "shard-00000.bin"))
    assert head["ETag"].strip('"').endswith("-3")  # three multipart parts of 5, 5 and 1 MiB
    assert store.manifests() == [m]
    assert bytes(store.read_shard(m.ckpt, m.shards[1])) == data[1]


def test_corrupt_object_is_detected(store, tmp_path):
    m, data = _upload(store, tmp_path, 1)
    bad = bytearray(data[0])
    bad[0] ^= 1
    store.client.put_object(Bucket=store.cfg.bucket, Key=store.key(m.ckpt, "shard-00000.bin"), Body=bytes(bad))
    with pytest.raises(CorruptCheckpointError, match="corrupt"):
        store.read_shard(m.ckpt, m.shards[0])


def test_only_committed_checkpoints_count_and_retention(store, tmp_path):
    ids = [_upload(store, tmp_path, s)[0].ckpt for s in range(4)]
    half, data = make_checkpoint(9)
    path = tmp_path / "half"
    path.write_bytes(data[0])
    store.upload_shard(half.ckpt, 0, path)  # no manifest: not complete
    assert [m.ckpt for m in store.manifests()] == ids[::-1]
    assert store.retain(2) == ids[:2][::-1]
    assert [m.ckpt for m in store.manifests()] == ids[2:][::-1]
    listed = store.client.list_objects_v2(Bucket=store.cfg.bucket)["Contents"]
    assert not any(ids[0].name in o["Key"] for o in listed)


def test_bad_config():
    with pytest.raises(ConfigError, match="at least"):
        S3Config(bucket="b", part_size=1024)
    with pytest.raises(ConfigError, match="bucket"):
        S3Config(bucket="")
