"""Holder side: receive shards into the RAM ring (L1), persist them on the lead's order (L2), upload
them (L3), and serve inventories and verified shard bytes to restoring trainers.

Disk and S3 work runs on worker threads; a ring entry is pinned while a worker reads its buffers. Every
shard handed to a restoring trainer is first checked against the manifest's size and digest, whatever
level it comes from.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from .errors import CorruptCheckpointError
from .manifest import CheckpointId, ShardInfo, verify_shard
from .protocol import (
    Commit,
    Complete,
    Durable,
    FetchReply,
    FetchRequest,
    Inventory,
    InventoryRequest,
    L1Report,
    Level,
    Persist,
    ShardAck,
    ShardHeader,
    ShardTrailer,
    Upload,
    Uploaded,
)
from .ringbuffer import Entry, Ring, Slot
from .service import Handler, Service
from .sharding import plan_shards
from .storage_disk import DiskStore
from .storage_s3 import S3Store
from .transport import TAG_DATA, TAG_FETCH, TAG_REPLY, post_chunks
from .worker import Worker

log = logging.getLogger("deepcheck")


class HolderPart:
    def __init__(
        self, svc: Service, disk: DiskStore, s3: S3Store | None, keep_ram: int, keep_disk: int, levels: frozenset[Level]
    ):
        self.svc = svc
        self.in_ram = Level.L1 in levels  # else RAM is only the way to disk: let go once durable, never served
        self.index = svc.world.holder_index
        self.disk = disk
        self.s3 = s3
        self.keep_disk = keep_disk
        self.ring = Ring(keep_ram)
        self.incoming: dict[tuple[CheckpointId, int], Slot] = {}
        self.persisted: dict[CheckpointId, list[int]] = {}  # shards on disk awaiting upload (L3 only)
        self.disk_worker = Worker("deepcheck-disk", svc.post)
        self.s3_worker = Worker("deepcheck-s3", svc.post) if s3 else None
        self.served: dict[tuple[CheckpointId, Level, int], Any] = {}  # verified shards of the restore in progress
        self.lead_manifests: Any = None  # set on the lead: callable returning its L1 manifests

    def handlers(self) -> dict[type, Handler]:
        return {
            ShardHeader: self._on_header,
            ShardTrailer: self._on_trailer,
            Complete: self._on_complete,
            Persist: self._on_persist,
            Commit: self._on_commit,
            Upload: self._on_upload,
        }

    def requests(self) -> dict[type, Handler]:
        return {InventoryRequest: self._on_inventory, FetchRequest: self._on_fetch}

    # ---- L1: receive -------------------------------------------------------------------------
    def _on_header(self, h: ShardHeader, src: int) -> None:
        self._forget_served()
        entry = self.ring.entries.get(h.ckpt)
        if entry is None:
            plan = plan_shards(h.total, h.n_trainers, h.n_holders)
            expected = frozenset(s.index for s in plan if s.holder == self.index)
            entry = self.ring.entries[h.ckpt] = Entry(h.ckpt, h.epoch, h.total, h.n_trainers, expected)
        info = ShardInfo(h.shard.index, h.shard.offset, h.shard.length, -1)
        buf = self.ring.buffer(h.shard.length)
        slot = Slot(info, src, buf, post_chunks(self.svc.comm, memoryview(buf), src, TAG_DATA, h.chunk, send=False))
        entry.slots[info.index] = slot
        if h.layout is not None:
            entry.layout = h.layout
        if h.rank_state is not None:
            entry.rank_states[h.rank_state[0]] = h.rank_state[1]
        self.incoming[(h.ckpt, info.index)] = slot

    def _on_trailer(self, t: ShardTrailer, src: int) -> None:
        slot = self.incoming[(t.ckpt, t.index)]
        slot.info = dataclasses.replace(slot.info, digest=t.digest)

    def poll(self) -> bool:
        moved = False
        for key, slot in list(self.incoming.items()):
            moved |= slot.advance()
            if not slot.finish():
                continue
            moved = True
            del self.incoming[key]
            self.svc.outbox.send(ShardAck(key[0], key[1]), slot.trainer_rank)
            entry = self.ring.entries.get(key[0])
            if entry is not None and not entry.reported and entry.locally_complete():
                entry.reported = True
                self.svc.outbox.send(self._report(entry), self.svc.world.lead)
        # With shared memory the receiver performs the copy inside MPI progress calls, and trainers post
        # every chunk up front: while chunks keep completing, the loop stays hot (no sleep in between).
        return moved

    def _report(self, e: Entry) -> L1Report:
        shards = [e.slots[i].info for i in sorted(e.expected)]
        return L1Report(e.ckpt, self.index, e.epoch, e.total, e.n_trainers, shards, e.layout, e.rank_states)

    def _on_complete(self, msg: Complete, src: int) -> None:
        entry = self.ring.entries.get(msg.ckpt)
        if msg.level == Level.L1 and entry is not None:
            entry.complete = True
            self.ring.retain()

    # ---- L2 / L3: persist and upload ---------------------------------------------------------------
    def _on_persist(self, msg: Persist, src: int) -> None:
        entry = self.ring.entries.get(msg.ckpt)
        if entry is None or not entry.locally_complete():
            self.svc.outbox.send(Durable(msg.ckpt, self.index, "shards are no longer in RAM"), src)
            return
        entry.pins += 1
        slots = [entry.slots[i] for i in sorted(entry.expected)]

        def write() -> None:
            self.disk.write_shards(msg.ckpt, [(slot.info.index, slot.buf) for slot in slots])

        def done(_: Any, error: BaseException | None) -> None:
            entry.pins -= 1
            if error is None and not self.in_ram and not entry.pins:
                self.ring.drop(msg.ckpt)
            self.ring.retain()
            if error is None and self.s3 is not None:
                self.persisted[msg.ckpt] = [s.info.index for s in slots]
            self.svc.outbox.send(Durable(msg.ckpt, self.index, None if error is None else repr(error)), src)

        self.disk_worker.submit(write, done)

    def _on_commit(self, msg: Commit, src: int) -> None:
        def commit() -> None:
            self.disk.commit(msg.manifest)
            self.disk.retain(self.keep_disk)

        self.disk_worker.submit(commit, lambda _r, _e: None)

    def _on_upload(self, msg: Upload, src: int) -> None:
        indices = self.persisted.pop(msg.ckpt, [])

        def upload() -> None:
            for i in indices:
                self.s3.upload_shard(msg.ckpt, i, self.disk.shard_path(msg.ckpt, i))

        def done(_: Any, error: BaseException | None) -> None:
            self.svc.outbox.send(Uploaded(msg.ckpt, self.index, None if error is None else repr(error)), src)

        self.s3_worker.submit(upload, done)

    # ---- restore --------------------------------------------------------------------------------
    def _on_inventory(self, msg: InventoryRequest, src: int) -> None:
        manifests = [(Level.L2, m) for m in self.disk.manifests()]
        if self.lead_manifests is not None and self.in_ram:
            manifests += [(Level.L1, m) for m in self.lead_manifests()]
        if self.lead_manifests is not None and self.s3 is not None:
            manifests += [(Level.L3, m) for m in self.s3.manifests()]
        ram = self.ring.received() if self.in_ram else {}
        inv = Inventory(self.svc.world.rank, self.s3 is not None, ram, self.disk.shard_sizes(), manifests)
        self.svc.replies.send(inv, src, TAG_REPLY)

    def _load(self, ckpt: CheckpointId, info: ShardInfo, level: Level) -> Any:
        if level == Level.L1:
            entry = self.ring.entries.get(ckpt)
            slot = entry.slots.get(info.index) if entry else None
            if slot is None or not slot.received:
                raise CorruptCheckpointError(f"shard {info.index} of {ckpt} is no longer in RAM")
            verify_shard(slot.buf, info, f"RAM of holder {self.index}")
            entry.pins += 1
            return slot.buf
        store = self.disk if level == Level.L2 else self.s3
        if store is None:
            raise CorruptCheckpointError(f"holder {self.index} has no {level.name} store")
        return store.read_shard(ckpt, info)

    def _forget_served(self) -> None:
        for ckpt, level, _ in self.served:
            entry = self.ring.entries.get(ckpt)
            if level == Level.L1 and entry is not None:
                entry.pins -= 1
        self.served.clear()
        self.ring.retain()

    def _on_fetch(self, req: FetchRequest, src: int) -> None:
        key = (req.ckpt, req.level, req.info.index)
        if key not in self.served:
            if any(k[0] != req.ckpt for k in self.served):
                self._forget_served()
            try:
                self.served[key] = self._load(req.ckpt, req.info, req.level)
            except CorruptCheckpointError as exc:
                log.warning("holder %d: %s", self.index, exc)
                self.svc.replies.send(FetchReply(str(exc)), src, TAG_REPLY)
                return
        self.svc.replies.send(FetchReply(None), src, TAG_REPLY)
        view = memoryview(self.served[key])[req.lo : req.hi]
        self.svc.replies.add(post_chunks(self.svc.rcomm, view, src, TAG_FETCH, req.chunk, send=True))

    def busy(self) -> bool:
        """Some shard has all its bytes and only its digest trailer is due."""
        return any(not slot.reqs for slot in self.incoming.values())

    def idle(self) -> bool:
        return not self.incoming and self.disk_worker.idle and (self.s3_worker is None or self.s3_worker.idle)

    def stopped(self) -> None:
        self.disk_worker.stop()
        if self.s3_worker is not None:
            self.s3_worker.stop()
