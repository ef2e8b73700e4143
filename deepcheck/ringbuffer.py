"""L1: a holder's RAM copy of the newest checkpoints, with receive buffers recycled between them.

Each entry holds the shards of one checkpoint that this holder keeps. The ring keeps the newest `keep`
checkpoints the lead has declared complete, plus anything newer (still arriving); everything older goes,
except entries pinned by a persist or restore in progress. Freed buffers are reused for later shards of
the same size: first-touch page faults on fresh memory cost more than the copy itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mpi4py import MPI

from .manifest import CheckpointId, ShardInfo

POOL_LIMIT = 8  # spare buffers kept for reuse


@dataclass
class Slot:
    info: ShardInfo  # digest is -1 until the trailer arrives
    trainer_rank: int  # where the bytes come from (for the ack)
    buf: bytearray
    reqs: list[MPI.Request]
    received: bool = False

    def advance(self) -> bool:
        """Test the outstanding receives (with shared memory this is where the copy happens); True if any
        completed. Completion needs the digest trailer too: see `finish()`."""
        if not self.reqs:
            return False
        if not MPI.Request.Testsome(self.reqs):
            return False
        self.reqs = [r for r in self.reqs if r]  # completed requests became MPI.REQUEST_NULL
        return True

    def finish(self) -> bool:
        """True when this call completed the slot (all bytes in and digest known)."""
        if self.received or self.reqs or self.info.digest < 0:
            return False
        self.received = True
        return True


@dataclass
class Entry:
    ckpt: CheckpointId
    epoch: int | None
    total: int
    n_trainers: int
    expected: frozenset[int]  # shard indices this holder keeps
    slots: dict[int, Slot] = field(default_factory=dict)
    layout: dict[str, Any] | None = None
    rank_states: dict[int, Any] = field(default_factory=dict)
    reported: bool = False
    complete: bool = False  # the lead said every holder has its shards
    pins: int = 0

    def locally_complete(self) -> bool:
        return self.expected <= {i for i, s in self.slots.items() if s.received}


class Ring:
    def __init__(self, keep: int):
        self.keep = keep
        self.entries: dict[CheckpointId, Entry] = {}
        self.pool: list[bytearray] = []

    def buffer(self, nbytes: int) -> bytearray:
        for i, buf in enumerate(self.pool):
            if len(buf) == nbytes:
                return self.pool.pop(i)
        return bytearray(nbytes)

    def drop(self, ckpt: CheckpointId) -> None:
        for slot in self.entries.pop(ckpt).slots.values():
            if slot.received:  # never recycle memory an unfinished Irecv may still write to
                self.pool.append(slot.buf)
        del self.pool[:-POOL_LIMIT]

    def retain(self) -> None:
        complete = sorted((c for c, e in self.entries.items() if e.complete), reverse=True)
        if not complete:
            return
        keep = set(complete[: self.keep])
        for ckpt in [c for c, e in self.entries.items() if c < complete[0] and c not in keep and not e.pins]:
            self.drop(ckpt)

    def received(self) -> dict[CheckpointId, list[int]]:
        return {c: sorted(i for i, s in e.slots.items() if s.received) for c, e in self.entries.items()}
