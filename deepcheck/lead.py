"""The lead holder: decides when a checkpoint is complete at each level and commits its manifest.

L1: once every holder reports its shards in RAM, the lead assembles the manifest (the trainers agreed on
the layout in save()) and announces L1. L2: one persist round at a time, always of the newest
L1-complete checkpoint (older pending ones are skipped, so a slow disk lags but never falls further
behind). While the holders write their shard files, the lead writes and fsyncs the manifest under a
temporary name; only when every holder has fsynced its shards does it rename the manifest into place –
last, and then only a rename and a directory fsync stand between the shards and L2 – tell the other
holders to write their copies and announce L2. L3 works the same way with S3.
Retention runs right after each commit (after the announcement, off the critical path), so the newest
complete checkpoint is never deleted.
"""

from __future__ import annotations

import logging
from typing import Any

from .codec import Leaf
from .manifest import CheckpointId, Manifest
from .protocol import (
    Bye,
    Commit,
    Complete,
    Durable,
    Failed,
    L1Report,
    Level,
    Persist,
    Shutdown,
    Upload,
    Uploaded,
)
from .service import Handler, Service
from .sharding import plan_shards
from .storage_disk import DiskStore
from .storage_s3 import S3Store
from .worker import Worker

log = logging.getLogger("deepcheck")


class LeadPart:
    def __init__(
        self, svc: Service, disk: DiskStore, s3: S3Store | None, keep_ram: int, keep_disk: int, levels: frozenset[Level]
    ):
        self.svc = svc
        self.to_disk = Level.L2 in levels  # else no persist round: nothing is written to disk
        self.world = svc.world
        self.disk = disk
        self.s3 = s3
        self.keep_ram = keep_ram
        self.keep_disk = keep_disk
        self.worker = Worker("deepcheck-commit", svc.post)
        self.reports: dict[CheckpointId, dict[int, L1Report]] = {}
        self.l1: dict[CheckpointId, Manifest] = {}
        self.pending: Manifest | None = None  # newest L1-complete checkpoint not yet persisted
        self.persisting: Manifest | None = None
        self.durable: set[int] = set()
        self.uploading: dict[CheckpointId, tuple[Manifest, set[int]]] = {}
        self.byes: dict[int, CheckpointId | None] = {}
        self.shutdown_sent = False

    def handlers(self) -> dict[type, Handler]:
        return {
            L1Report: self._on_report,
            Durable: self._on_durable,
            Uploaded: self._on_uploaded,
            Bye: self._on_bye,
        }

    def manifests(self) -> list[Manifest]:
        return sorted(self.l1.values(), key=lambda m: m.ckpt, reverse=True)

    def _send_all(self, msg: Any, ranks: tuple[int, ...]) -> None:
        for r in ranks:
            self.svc.outbox.send(msg, r)

    # ---- L1 --------------------------------------------------------------------------------------
    def _on_report(self, r: L1Report, src: int) -> None:
        got = self.reports.setdefault(r.ckpt, {})
        got[r.holder] = r
        plan = plan_shards(r.total, r.n_trainers, len(self.world.holders))
        if len(got) < len({s.holder for s in plan}):
            return
        del self.reports[r.ckpt]
        layout = next(x.layout for x in got.values() if x.layout is not None)  # trainers agreed in save()
        rank_states: dict[int, Any] = {}
        for x in got.values():
            rank_states.update(x.rank_states)
        manifest = Manifest(
            ckpt=r.ckpt,
            epoch=r.epoch,
            total_bytes=r.total,
            n_trainers=r.n_trainers,
            n_holders=len(self.world.holders),
            shards=tuple(sorted((s for x in got.values() for s in x.shards), key=lambda s: s.index)),
            leaves=tuple(Leaf.from_json(x) for x in layout["leaves"]),
            skeleton=layout["skeleton"],
            rank_states=tuple(rank_states.get(t) for t in range(r.n_trainers)),
        )
        self.l1[r.ckpt] = manifest
        for old in sorted(self.l1)[: -self.keep_ram]:
            del self.l1[old]
        self._send_all(Complete(r.ckpt, Level.L1), self.world.everyone)
        if self.to_disk and (self.pending is None or self.pending.ckpt < r.ckpt):
            self.pending = manifest
        self._next_persist()

    # ---- L2 --------------------------------------------------------------------------------------
    def _next_persist(self) -> None:
        if self.persisting is not None or self.pending is None:
            return
        self.persisting, self.pending = self.pending, None
        self.durable = set()
        self._send_all(Persist(self.persisting.ckpt), self._holders_of(self.persisting))
        manifest = self.persisting
        self.worker.submit(lambda: self.disk.stage(manifest), lambda _r, _e: None)  # commit falls back to a write

    def _holders_of(self, m: Manifest) -> tuple[int, ...]:
        plan = plan_shards(m.total_bytes, m.n_trainers, len(self.world.holders))
        return tuple(self.world.holders[h] for h in sorted({s.holder for s in plan}))

    def _on_durable(self, d: Durable, src: int) -> None:
        manifest = self.persisting
        if manifest is None or d.ckpt != manifest.ckpt:
            return
        ckpt = manifest.ckpt
        if d.error is not None:
            log.error("checkpoint %s cannot reach L2: holder %d failed to persist it: %s", ckpt, d.holder, d.error)
            self._send_all(Failed(ckpt, Level.L2, f"holder {d.holder}: {d.error}"), self.world.trainers)
            self.worker.submit(lambda: self.disk.unstage(ckpt), lambda _r, _e: None)
            self.persisting = None
            self._next_persist()
            return
        self.durable.add(src)
        if self.durable != set(self._holders_of(manifest)):
            return

        self.worker.submit(lambda: self.disk.commit(manifest), lambda _r, e: self._committed(manifest, e))

    def _committed(self, manifest: Manifest, error: BaseException | None) -> None:
        ckpt = manifest.ckpt
        self.persisting = None
        if error is None:
            for r in self._holders_of(manifest):
                if r != self.world.rank:
                    self.svc.outbox.send(Commit(manifest), r)
            self._send_all(Complete(ckpt, Level.L2), self.world.trainers)
            self.worker.submit(lambda: self.disk.retain(self.keep_disk), lambda _r, _e: None)
            if self.s3 is not None:
                self.uploading[ckpt] = (manifest, set())
                self._send_all(Upload(ckpt), self._holders_of(manifest))
        else:
            log.error("checkpoint %s cannot reach L2: writing its manifest failed: %r", ckpt, error)
            self._send_all(Failed(ckpt, Level.L2, f"writing its manifest: {error}"), self.world.trainers)
        self._next_persist()

    # ---- L3 --------------------------------------------------------------------------------------
    def _on_uploaded(self, u: Uploaded, src: int) -> None:
        if u.ckpt not in self.uploading:
            return
        manifest, done = self.uploading[u.ckpt]
        if u.error is not None:
            log.error("checkpoint %s cannot reach L3: holder %d failed to upload it: %s", u.ckpt, u.holder, u.error)
            self._send_all(Failed(u.ckpt, Level.L3, f"holder {u.holder}: {u.error}"), self.world.trainers)
            del self.uploading[u.ckpt]
            return
        done.add(src)
        if done != set(self._holders_of(manifest)):
            return

        def commit() -> None:
            self.s3.commit(manifest)
            self.s3.retain(self.keep_disk)

        self.worker.submit(commit, lambda _r, e: self._uploaded(manifest, e))

    def _uploaded(self, manifest: Manifest, error: BaseException | None) -> None:
        del self.uploading[manifest.ckpt]
        if error is None:
            self._send_all(Complete(manifest.ckpt, Level.L3), self.world.trainers)
        else:
            log.error("checkpoint %s cannot reach L3: uploading its manifest failed: %r", manifest.ckpt, error)
            reason = f"uploading its manifest: {error}"
            self._send_all(Failed(manifest.ckpt, Level.L3, reason), self.world.trainers)

    # ---- shutdown ----------------------------------------------------------------------------------
    def _on_bye(self, b: Bye, src: int) -> None:
        self.byes[b.trainer] = b.last

    def _maybe_shutdown(self) -> None:
        """Once every trainer said bye, drain: the last checkpoint must settle at every level first."""
        if self.shutdown_sent or len(self.byes) < len(self.world.trainers):
            return
        sent = [c for c in self.byes.values() if c is not None]
        last = max(sent) if sent else None
        if last is not None and last not in self.l1 and (not self.l1 or max(self.l1) < last):
            return
        if self.persisting is not None or self.pending is not None or self.uploading or not self.worker.idle:
            return
        self.shutdown_sent = True
        self._send_all(Shutdown(), self.world.everyone)

    def poll(self) -> bool:
        self._maybe_shutdown()  # checked every round: byes, commits and uploads can finish in any order
        return False

    def busy(self) -> bool:
        return bool(self.reports)

    def idle(self) -> bool:
        return self.worker.idle

    def stopped(self) -> None:
        self.worker.stop()
