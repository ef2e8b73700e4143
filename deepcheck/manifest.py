"""Checkpoint identity, shard checksums and the manifest that commits a checkpoint.

A checkpoint is complete at a level only once its manifest is stored there, and the manifest is always
written last. The manifest carries everything needed to rebuild the state besides the shard bytes: the
shard table with sizes and digests (see checksum), the tensor layout, the JSON skeleton, the per-rank states and the
world it was saved from. The manifest protects itself with its own CRC-32 so a torn or bit-flipped
manifest is rejected instead of trusted.
"""

from __future__ import annotations

import json
import re
import time
import zlib
from dataclasses import dataclass, field
from typing import Any

from .checksum import digest
from .codec import Leaf
from .errors import CorruptCheckpointError

FORMAT = 2  # 2: shard digests (checksum.py) instead of zlib CRC-32s
_NAME = re.compile(r"^ckpt-(\d{12})-([0-9a-f]{20})$")


@dataclass(frozen=True, order=True)
class CheckpointId:
    step: int  # training step the state belongs to
    run: str  # 20 hex digits, time-ordered id of the job that wrote it: a later run wins at equal steps

    @property
    def name(self) -> str:
        return f"ckpt-{self.step:012d}-{self.run}"

    @classmethod
    def parse(cls, name: str) -> CheckpointId | None:
        m = _NAME.match(name)
        return cls(int(m.group(1)), m.group(2)) if m else None

    def __str__(self) -> str:
        return f"step {self.step} ({self.name})"


def new_run_id(nonce: int) -> str:
    """A run id that sorts after every earlier run's (wall clock in ns, then a random nonce)."""
    return f"{time.time_ns():016x}{nonce & 0xFFFF:04x}"


@dataclass(frozen=True)
class ShardInfo:
    index: int  # position in the stream
    offset: int  # first byte
    length: int  # bytes
    digest: int  # checksum.digest of the bytes, computed by the trainer from its L0 snapshot


def verify_shard(data: Any, info: ShardInfo, where: str) -> None:
    """Raise CorruptCheckpointError unless `data` has the size and checksum the manifest promises."""
    size = memoryview(data).nbytes
    if size != info.length:
        raise CorruptCheckpointError(
            f"{where}: shard {info.index} has {size} bytes, expected {info.length} (truncated?)"
        )
    got = digest(data)
    if got != info.digest:
        raise CorruptCheckpointError(
            f"{where}: shard {info.index} checksum {got:08x} != {info.digest:08x} in the manifest (corrupt)"
        )


@dataclass(frozen=True)
class Manifest:
    ckpt: CheckpointId
    epoch: int | None  # user's epoch, if given to save()
    total_bytes: int  # size of the flat stream
    n_trainers: int  # world layout at save time
    n_holders: int
    shards: tuple[ShardInfo, ...]
    leaves: tuple[Leaf, ...]  # where each tensor / buffer lives in the stream
    skeleton: Any  # tagged-JSON tree (see codec)
    rank_states: tuple[Any, ...]  # inline-encoded per-trainer state (RNG, user rank_state), by trainer index
    created: float = field(default_factory=time.time)

    def body(self) -> dict[str, Any]:
        return {
            "step": self.ckpt.step,
            "run": self.ckpt.run,
            "epoch": self.epoch,
            "total_bytes": self.total_bytes,
            "world": {"trainers": self.n_trainers, "holders": self.n_holders},
            "shards": [[s.index, s.offset, s.length, s.digest] for s in self.shards],
            "leaves": [leaf.to_json() for leaf in self.leaves],
            "skeleton": self.skeleton,
            "rank_states": list(self.rank_states),
            "created": self.created,
        }

    def to_bytes(self) -> bytes:
        body = json.dumps(self.body(), sort_keys=True, separators=(",", ":"))
        return json.dumps({"format": FORMAT, "crc32": zlib.crc32(body.encode()), "body": body}).encode()

    @classmethod
    def from_bytes(cls, data: bytes, where: str) -> Manifest:
        try:
            outer = json.loads(data)
            body = outer["body"]
            if outer["format"] != FORMAT:
                raise CorruptCheckpointError(
                    f"{where}: manifest format {outer['format']}, written by another version of DeepCheck "
                    f"(this one reads format {FORMAT}); restore it with that version"
                )
            if zlib.crc32(body.encode()) != outer["crc32"]:
                raise CorruptCheckpointError(f"{where}: manifest checksum mismatch (torn or corrupt)")
            b = json.loads(body)
            return cls(
                ckpt=CheckpointId(int(b["step"]), str(b["run"])),
                epoch=b["epoch"],
                total_bytes=int(b["total_bytes"]),
                n_trainers=int(b["world"]["trainers"]),
                n_holders=int(b["world"]["holders"]),
                shards=tuple(ShardInfo(*map(int, s)) for s in b["shards"]),
                leaves=tuple(Leaf.from_json(x) for x in b["leaves"]),
                skeleton=b["skeleton"],
                rank_states=tuple(b["rank_states"]),
                created=float(b["created"]),
            )
        except CorruptCheckpointError:
            raise
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise CorruptCheckpointError(f"{where}: unreadable manifest ({exc})") from exc
