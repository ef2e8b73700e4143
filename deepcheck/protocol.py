"""The small control messages ranks exchange (pickled by mpi4py; bulk bytes never travel in them).

Flow of one checkpoint (T = trainer, H = holder, L = lead holder, the lowest-ranked holder):
  T->H ShardHeader, then the shard's bytes as buffer sends, then ShardTrailer (digest)
  H->T ShardAck            H->L L1Report (all of H's shards of the checkpoint are in RAM)
  L->T,H Complete(L1)      L->H Persist        H->L Durable (shard files fsynced)
  L writes the manifest    L->H Commit (others write it too)     L->T Complete(L2)
  with S3: L->H Upload     H->L Uploaded       L uploads the manifest    L->T Complete(L3)
Shutdown: T->L Bye once all its shards are acked; L drains persistence, then L->all Shutdown.
Restore (separate communicator): T->H InventoryRequest / Inventory, FetchRequest / FetchReply + bytes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

from .manifest import CheckpointId, Manifest, ShardInfo
from .sharding import Shard


class Level(IntEnum):
    L1 = 1  # holders' RAM ring buffer
    L2 = 2  # holders' disks
    L3 = 3  # object storage (S3)


@dataclass
class ShardHeader:
    ckpt: CheckpointId
    epoch: int | None
    shard: Shard
    total: int  # stream size
    n_trainers: int
    n_holders: int
    chunk: int  # bytes per buffer message
    layout: dict[str, Any] | None = None  # skeleton + leaves, sent with trainer 0's first shard
    rank_state: tuple[int, Any] | None = None  # (trainer index, inline state), with each trainer's first shard


@dataclass
class ShardTrailer:
    ckpt: CheckpointId
    index: int
    digest: int  # checksum.digest of the shard's bytes


@dataclass
class ShardAck:
    ckpt: CheckpointId
    index: int


@dataclass
class L1Report:
    ckpt: CheckpointId
    holder: int  # holder index
    epoch: int | None
    total: int
    n_trainers: int
    shards: list[ShardInfo]
    layout: dict[str, Any] | None
    rank_states: dict[int, Any] = field(default_factory=dict)


@dataclass
class Complete:
    ckpt: CheckpointId
    level: Level


@dataclass
class Failed:
    """The lead to every trainer: this checkpoint will never be complete at `level` (a holder's disk is full,
    an upload was refused); said once, so that a trainer can tell its user what is not safe."""

    ckpt: CheckpointId
    level: Level
    reason: str


@dataclass
class Persist:
    ckpt: CheckpointId


@dataclass
class Durable:
    ckpt: CheckpointId
    holder: int
    error: str | None  # None when every shard file is fsynced


@dataclass
class Commit:
    manifest: Manifest


@dataclass
class Upload:
    ckpt: CheckpointId


@dataclass
class Uploaded:
    ckpt: CheckpointId
    holder: int
    error: str | None


@dataclass
class Bye:
    trainer: int
    last: CheckpointId | None  # newest checkpoint this trainer sent


@dataclass
class Shutdown:
    pass


@dataclass
class InventoryRequest:
    pass


@dataclass
class Inventory:
    rank: int  # MPI rank of the holder, to address FetchRequests
    has_s3: bool
    ram: dict[CheckpointId, list[int]]  # shard indices fully received, per checkpoint
    disk: dict[CheckpointId, dict[int, int]]  # shard file sizes, per checkpoint
    manifests: list[tuple[Level, Manifest]]  # complete checkpoints this holder knows of, with their level


@dataclass
class FetchRequest:
    ckpt: CheckpointId
    info: ShardInfo
    level: Level
    lo: int  # byte range within the shard
    hi: int
    chunk: int


@dataclass
class FetchReply:
    error: str | None  # None: the bytes follow as buffer messages
