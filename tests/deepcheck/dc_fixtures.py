"""Small builders shared by the storage tests."""

from __future__ import annotations

import os

from deepcheck.checksum import digest
from deepcheck.codec import Leaf
from deepcheck.manifest import CheckpointId, Manifest, ShardInfo


def make_checkpoint(step: int, nshards: int = 2, size: int = 1000) -> tuple[Manifest, list[bytes]]:
    data = [os.urandom(size) for _ in range(nshards)]
    shards = tuple(ShardInfo(i, i * size, size, digest(d)) for i, d in enumerate(data))
    manifest = Manifest(
        ckpt=CheckpointId(step, f"{step:016x}abcd"),
        epoch=step // 10,
        total_bytes=nshards * size,
        n_trainers=nshards,
        n_holders=1,
        shards=shards,
        leaves=(Leaf("bytes", 0, nshards * size),),
        skeleton={"$": "leaf", "i": 0},
        rank_states=(None,) * nshards,
    )
    return manifest, data
