"""Trainer side of L1: ship this trainer's shards of each snapshot to holders, track completion notices.

Jobs are handed over by `save()` after the L0 copy and sent one checkpoint at a time, in order. All of a
shard's chunks are Isend'ed at once, right after its header, so the holder can pull the bytes back to back.
The digest (checksum.py) of the read-only L0 buffer keeps pace with the holder: chunk k is summed once
the send of chunk k-1 has completed, i.e. while the holder pulls chunk k, and the digest goes in a trailer
after the last chunk. So the checksum never holds up the transfer and ends with it; and where trainers share cores with
the holder (one node), this thread sleeps while the holder serves other trainers instead of competing with
the copy that is the critical path. The L0 buffer returns to the pool when its sends complete and every
shard is summed; the job counts as delivered when every holder acknowledged it.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from mpi4py import MPI

from .checksum import Digest
from .manifest import CheckpointId
from .protocol import Bye, Complete, Failed, Level, ShardAck, ShardHeader, ShardTrailer
from .service import Handler, Service
from .sharding import Shard
from .snapshot import BufferPool, HostBuffer
from .transport import TAG_DATA, post_chunks, spans


@dataclass
class SaveJob:
    ckpt: CheckpointId
    epoch: int | None
    shards: list[Shard]  # this trainer's shards, contiguous from `lo`
    lo: int
    total: int
    n_trainers: int
    n_holders: int
    layout: dict[str, Any] | None  # trainer 0 only
    rank_state: tuple[int, Any]
    buf: HostBuffer
    event: Any  # CUDA event to wait for before reading `buf`, or None
    chunk: int


@dataclass
class _ShardSend:
    shard: Shard
    dest: int  # holder rank
    view: memoryview
    spans: list[tuple[int, int]]
    reqs: list[MPI.Request]  # every chunk, posted up front
    summed: int = 0  # chunks checksummed so far
    digest: Digest = field(default_factory=Digest)
    trailed: bool = False

    def checksum_next(self) -> bool:
        """Fold the next chunk into the digest once the holder has pulled the one before it (so, while it pulls
        this one); False if there is none to sum yet."""
        k = self.summed
        if k == len(self.spans) or (k > 0 and not self.reqs[k - 1].Test()):
            return False
        a, b = self.spans[k]
        self.digest.update(self.view[a:b])  # reads only, while the holder pulls the same bytes
        self.summed += 1
        return True

    @property
    def summed_all(self) -> bool:
        return self.summed == len(self.spans)


class TrainerPart:
    def __init__(self, svc: Service, pool: BufferPool):
        self.svc = svc
        self.pool = pool
        self.cond = threading.Condition()
        self.queue: deque[SaveJob] = deque()
        self.job: SaveJob | None = None
        self.sends: list[_ShardSend] = []
        self.unacked: dict[CheckpointId, set[int]] = {}
        self.l1_due: set[CheckpointId] = set()  # sent, not yet announced complete at L1
        self.undelivered = 0  # jobs submitted and not yet acknowledged by all holders
        self.last_sent: CheckpointId | None = None
        self.newest: dict[Level, CheckpointId] = {}
        self.failed: dict[Level, Failed] = {}  # the newest checkpoint the lead said never reaches each level
        self.is_stopped = False

    def handlers(self) -> dict[type, Handler]:
        return {ShardAck: self._on_ack, Complete: self._on_complete, Failed: self._on_failed}

    def submit(self, job: SaveJob) -> None:
        with self.cond:
            self.queue.append(job)
            self.undelivered += 1
        self.svc.bell.ring()

    def _start(self, job: SaveJob) -> None:
        if job.event is not None:
            job.event.synchronize()
        self.job = job
        self.unacked[job.ckpt] = {s.index for s in job.shards}
        self.l1_due.add(job.ckpt)
        holders = self.svc.world.holders
        for i, shard in enumerate(job.shards):
            dest = holders[shard.holder]
            view = job.buf.view[shard.offset - job.lo : shard.end - job.lo]
            self.svc.outbox.send(
                ShardHeader(
                    job.ckpt,
                    job.epoch,
                    shard,
                    job.total,
                    job.n_trainers,
                    job.n_holders,
                    job.chunk,
                    job.layout if shard.index == 0 else None,
                    job.rank_state if i == 0 else None,
                ),
                dest,
            )
            reqs = post_chunks(self.svc.comm, view, dest, TAG_DATA, job.chunk, send=True)
            self.sends.append(_ShardSend(shard, dest, view, spans(shard.length, job.chunk), reqs))

    def poll(self) -> bool:
        if self.job is None:
            with self.cond:
                if not self.queue:
                    return False
                job = self.queue.popleft()
            self._start(job)
        job = self.job
        moved = False
        for send in self.sends:
            if send.checksum_next():
                moved = True
            elif send.summed_all and not send.trailed:
                self.svc.outbox.send(ShardTrailer(job.ckpt, send.shard.index, send.digest.value()), send.dest)
                send.trailed = moved = True
        if not all(s.trailed for s in self.sends) or not MPI.Request.Testall([r for s in self.sends for r in s.reqs]):
            return moved
        self.sends = []
        self.job = None
        self.pool.release(job.buf)
        return True

    def _on_ack(self, msg: ShardAck, src: int) -> None:
        waiting = self.unacked[msg.ckpt]
        waiting.discard(msg.index)
        if waiting:
            return
        del self.unacked[msg.ckpt]
        with self.cond:
            self.undelivered -= 1
            self.last_sent = msg.ckpt
            self.cond.notify_all()

    def _on_complete(self, msg: Complete, src: int) -> None:
        if msg.level == Level.L1:
            self.l1_due = {c for c in self.l1_due if c > msg.ckpt}
        with self.cond:
            if msg.ckpt > self.newest.get(msg.level, CheckpointId(-1, "")):
                self.newest[msg.level] = msg.ckpt
            self.cond.notify_all()

    def _on_failed(self, msg: Failed, src: int) -> None:
        with self.cond:
            known = self.failed.get(msg.level)
            if known is None or msg.ckpt > known.ckpt:
                self.failed[msg.level] = msg
            self.cond.notify_all()

    def bye(self) -> Bye:
        return Bye(self.svc.world.trainer_index, self.last_sent)

    def busy(self) -> bool:
        """Every trailer is out and the acks / Complete(L1) are due (not while holders are still pulling)."""
        return bool(self.l1_due) and all(s.trailed for s in self.sends)

    def idle(self) -> bool:
        return self.job is None and not self.queue and not self.unacked

    def stopped(self) -> None:
        with self.cond:
            self.is_stopped = True
            self.cond.notify_all()
