from __future__ import annotations

import pytest
from dc_fixtures import make_checkpoint

from deepcheck import CorruptCheckpointError
from deepcheck.manifest import CheckpointId, Manifest
from deepcheck.storage_disk import MANIFEST, DiskStore


def _save(store: DiskStore, step: int, commit: bool = True):
    m, data = make_checkpoint(step)
    store.write_shards(m.ckpt, [(info.index, d) for info, d in zip(m.shards, data, strict=True)])
    if commit:
        store.commit(m)
    return m, data


def test_manifest_roundtrip_and_self_check():
    m, _ = make_checkpoint(7)
    assert Manifest.from_bytes(m.to_bytes(), "x") == m
    raw = bytearray(m.to_bytes())
    raw[raw.index(b"step") + 10] ^= 1
    with pytest.raises(CorruptCheckpointError, match="x: "):
        Manifest.from_bytes(bytes(raw), "x")
    with pytest.raises(CorruptCheckpointError, match="unreadable"):
        Manifest.from_bytes(m.to_bytes()[:-20], "x")


def test_checkpoint_ids_order_by_step_then_run():
    a, b = CheckpointId(5, "0" * 20), CheckpointId(5, "1" + "0" * 19)
    assert a < b < CheckpointId(6, "0" * 20)
    assert CheckpointId.parse(b.name) == b and CheckpointId.parse("ckpt-junk") is None


def test_write_read_and_no_temp_files_left(tmp_path):
    store = DiskStore(tmp_path)
    m, data = _save(store, 1)
    assert store.manifests() == [m]
    assert bytes(store.read_shard(m.ckpt, m.shards[1])) == data[1]
    assert not list(tmp_path.rglob("*.tmp"))


def test_truncated_and_corrupted_shards_are_detected(tmp_path):
    store = DiskStore(tmp_path)
    m, _ = _save(store, 1)
    path = store.shard_path(m.ckpt, 0)
    path.write_bytes(path.read_bytes()[:-1])
    with pytest.raises(CorruptCheckpointError, match="truncated"):
        store.read_shard(m.ckpt, m.shards[0])
    path = store.shard_path(m.ckpt, 1)
    raw = bytearray(path.read_bytes())
    raw[3] ^= 0x40
    path.write_bytes(raw)
    with pytest.raises(CorruptCheckpointError, match="corrupt"):
        store.read_shard(m.ckpt, m.shards[1])
    path.unlink()
    with pytest.raises(CorruptCheckpointError, match="missing"):
        store.read_shard(m.ckpt, m.shards[1])


@pytest.mark.parametrize(
    ("manifest", "said"),
    [
        (b'{"format": 2, "crc32": 0, "body": "{}"}', "skipping checkpoint step 2"),
        (
            b'{"format": 1, "crc32": 0, "body": "{}"}',
            "manifest format 1, written by another version of DeepCheck (this one reads format 2)",
        ),
    ],
    ids=["corrupt", "other-format"],
)
def test_corrupt_or_foreign_manifest_is_skipped_and_says_why(tmp_path, caplog, manifest, said):
    store = DiskStore(tmp_path)
    old, _ = _save(store, 1)
    new, _ = _save(store, 2)
    (store.ckpt_dir(new.ckpt) / MANIFEST).write_bytes(manifest)
    assert [m.ckpt for m in store.manifests()] == [old.ckpt]
    assert said in caplog.text


def test_retention_keeps_newest_k_and_incomplete_newer(tmp_path):
    store = DiskStore(tmp_path)
    ids = [_save(store, s)[0].ckpt for s in range(5)]
    pending, _ = _save(store, 9, commit=False)  # in progress, or complete on another holder's disk
    assert store.retain(2) == ids[:3][::-1]
    assert [m.ckpt for m in store.manifests()] == ids[3:][::-1]
    assert store.ckpt_dir(pending.ckpt).is_dir()
    assert store.retain(1) == [ids[3]] and [m.ckpt for m in store.manifests()] == [ids[4]]
    assert store.retain(1) == []  # the newest complete checkpoint is never deleted
