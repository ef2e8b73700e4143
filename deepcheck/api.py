"""The public face of DeepCheck: `init()` and the `DeepCheck` object it returns.

Threading model (MPI_THREAD_MULTIPLE, which mpi4py requests by default): DeepCheck works on its own
duplicates of the user's communicator. After `init()` all checkpoint traffic is driven by one background
service thread per rank; the training thread calls MPI only inside the collective calls `init()`,
`restore()`, `should_flush()` and `close()`, on communicators the service thread never receives on.
"""

from __future__ import annotations

import logging
import os
import random
import threading
import time
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mpi4py import MPI

from . import codec
from .agree import check_agreement, check_failed
from .errors import CheckpointTimeout, ConfigError, DeepCheckError, StateError
from .holder import HolderPart
from .lead import LeadPart
from .manifest import CheckpointId, new_run_id
from .protocol import Level
from .restore import CheckpointInfo, Restorer
from .service import Service
from .sharding import plan_shards, trainer_range
from .snapshot import BufferPool, capture_rng, copy_range, needs_pinned, restore_rng
from .storage_disk import DiskStore
from .storage_s3 import S3Config, S3Store
from .trainer import SaveJob, TrainerPart
from .transport import DEFAULT_CHUNK, MAX_CHUNK, any_each
from .world import ROLES, World, discover

log = logging.getLogger("deepcheck")


@dataclass(frozen=True)
class SaveHandle:
    ckpt: CheckpointId
    step: int
    stall_s: float  # how long save() blocked the caller (L0 snapshot, including waiting for a free buffer)
    nbytes: int  # size of the whole state stream
    share_bytes: int  # bytes this trainer copied and sends


@dataclass(frozen=True)
class FlushReport:
    step: int
    level: Level  # level reached when flush_now() returned
    seconds: float  # from the call to a safe checkpoint
    stall_s: float  # the part of it spent in the L0 snapshot


@dataclass(frozen=True)
class Failure:
    """A checkpoint that will never be complete at `level`, and why (DeepCheck.failed)."""

    ckpt: CheckpointId
    level: Level
    reason: str  # e.g. "holder 0: [Errno 28] No space left on device: '...'"


@dataclass
class Restored:
    info: CheckpointInfo
    state: Any  # the tree given to save(), tensors as CPU tensors
    rank_state: Any  # this trainer's rank_state at save time (None if the old world had fewer trainers)
    fallbacks: list[str]  # newer checkpoints skipped because they failed verification, and why


def init(
    comm: MPI.Comm,
    role: str,
    *,
    directory: str | os.PathLike | None = None,
    keep: int = 2,
    keep_ram: int = 2,
    s3: S3Config | None = None,
    l0_buffers: int = 2,
    chunk_bytes: int = DEFAULT_CHUNK,
    timeout: float | None = 600.0,
    levels: Collection[Level] | None = None,
) -> DeepCheck:
    """Collective over `comm`: start DeepCheck on every rank.

    role: "trainer", "holder" or "both" (alias "anchor": a Single Anchor rank that trains and holds).
    directory: the holder's L2 directory (required for holders; several holders may share one).
    keep / keep_ram: complete checkpoints kept on disk and in S3 / in holder RAM; the newest always stays.
    s3: optional L3 target. l0_buffers: snapshots that may be in flight before save() waits.
    chunk_bytes: size of each MPI buffer message. timeout: default for waits (None waits forever).
    levels: where checkpoints are kept, exactly (default L1 and L2, and L3 with `s3`): without L1 a holder's RAM
    is only the way to its disk (let go once the shards are durable, never restored from); without L2 nothing
    is written to disk; L3 uploads from the holders' disks, so it needs L2. flush_now() returns once the
    checkpoint is safe at the lowest of them.
    """
    if MPI.Query_thread() < MPI.THREAD_MULTIPLE:
        raise ConfigError(
            "DeepCheck needs MPI initialized with MPI_THREAD_MULTIPLE (mpi4py's default); "
            "do not lower mpi4py.rc.thread_level, and use an MPI build with thread support"
        )
    for name, value in (("keep", keep), ("keep_ram", keep_ram), ("l0_buffers", l0_buffers)):
        if not isinstance(value, int) or value < 1:
            raise ConfigError(f"{name} must be an integer >= 1, got {value!r}")
    if not 1 <= chunk_bytes <= MAX_CHUNK:
        raise ConfigError(f"chunk_bytes must be between 1 and {MAX_CHUNK} (well below MPI's 2 GiB limit)")
    if ROLES.get(role, (False, False))[1] and directory is None:
        raise ConfigError(f"rank {comm.Get_rank()} is a holder and needs directory= for its L2 checkpoint files")
    kept = _levels(levels, s3)
    world = discover(comm, role)
    return DeepCheck(
        comm,
        world,
        Path(directory) if directory else None,
        keep,
        keep_ram,
        s3,
        l0_buffers,
        chunk_bytes,
        timeout,
        kept,
    )


def _levels(levels: Collection[Level] | None, s3: S3Config | None) -> frozenset[Level]:
    if levels is None:
        return frozenset({Level.L1, Level.L2} | ({Level.L3} if s3 is not None else set()))
    kept = frozenset(Level(level) for level in levels)
    if not kept:
        raise ConfigError("levels: name at least one of L1, L2, L3")
    if Level.L3 in kept and (s3 is None or Level.L2 not in kept):
        raise ConfigError("level L3 needs s3= and L2 (it uploads from the holders' disks)")
    if s3 is not None and Level.L3 not in kept:
        raise ConfigError("s3= is given but L3 is not among the levels")
    return kept


class DeepCheck:
    """Asynchronous multilevel checkpointing for one rank. Build it with `deepcheck.init()`."""

    def __init__(self, comm, world: World, directory, keep, keep_ram, s3, l0_buffers, chunk_bytes, timeout, levels):
        self.world = world
        self.levels: frozenset[Level] = levels
        self.chunk = chunk_bytes
        self.timeout = timeout
        self.comm = comm.Dup()
        self.rcomm = comm.Dup()
        self.tcomm = comm.Split(0 if world.is_trainer else MPI.UNDEFINED, world.rank)
        self.run = comm.bcast(new_run_id(random.getrandbits(16)) if comm.Get_rank() == 0 else None, root=0)
        self.svc = Service(self.comm, self.rcomm, world)
        self.pool = BufferPool(l0_buffers)
        self.trainer = TrainerPart(self.svc, self.pool) if world.is_trainer else None
        if world.is_holder:
            disk = DiskStore(directory)
            store = S3Store(s3) if s3 is not None else None
            holder = HolderPart(self.svc, disk, store, keep_ram, keep, levels)
            self.svc.add(holder, holder.requests())
            if world.rank == world.lead:
                lead = LeadPart(self.svc, disk, store, keep_ram, keep, levels)
                holder.lead_manifests = lead.manifests
                self.svc.add(lead)
        if self.trainer is not None:
            self.svc.add(self.trainer)
        self.last_step = -1
        self.flush_flag = threading.Event()
        self.closed = False
        self.svc.start()

    # ---- helpers ---------------------------------------------------------------------------------
    def _need_trainer(self, what: str) -> TrainerPart:
        if self.closed:
            raise DeepCheckError(f"{what}() called after close()")
        if self.trainer is None:
            raise ConfigError(f"{what}() is for trainer ranks; rank {self.world.rank} is a holder (use serve())")
        self.svc.check()
        return self.trainer

    def _read_trainer(self, what: str) -> TrainerPart:
        """The trainer's part for a call that only reads what the holders said (allowed after close())."""
        if self.trainer is None:
            raise ConfigError(f"{what}() is for trainer ranks; rank {self.world.rank} is a holder (use serve())")
        return self.trainer

    def _timeout(self, timeout: float | None) -> float | None:
        return self.timeout if timeout is None else timeout

    # ---- saving ----------------------------------------------------------------------------------
    def save(
        self,
        state: Any,
        step: int,
        *,
        epoch: int | None = None,
        rank_state: Any = None,
        owners: Sequence[int] | None = None,
    ) -> SaveHandle:
        """Snapshot `state` (L0) and return; shipping, persisting and uploading continue in the background.

        Collective over trainers: every trainer calls it for the same steps with the same state layout
        (replicated model/optimizer/scheduler state, data position, extras), and if they differ every
        trainer raises StateError. Per-rank data goes in `rank_state`; RNG states are captured per rank
        automatically. Steps must increase.

        `owners`, for a state whose bulk leaves live on different trainers: the trainer that holds each leaf,
        in the order the leaves are met (sorted: each trainer's leaves together), the same on every trainer.
        Each trainer then sends exactly its own leaves and passes `codec.Elsewhere(nbytes)` for the others',
        so no leaf is copied to every trainer first (sharding.plan_shards' `split`). A restore gives every
        trainer the whole state, as always.
        """
        trainer = self._need_trainer("save")
        t0 = time.perf_counter()
        try:
            if not isinstance(step, int) or step < 0:
                raise ConfigError(f"step must be a non-negative integer, got {step!r}")
            if step <= self.last_step:
                raise ConfigError(f"step {step} is not after the previous save ({self.last_step}); steps must increase")
            flat = codec.flatten(state)
            split = None if owners is None else _split(flat, owners, len(self.world.trainers), self.world.trainer_index)
            if split is None and None in flat.sources:
                raise StateError("a state with codec.Elsewhere leaves needs save()'s owners")
        except DeepCheckError:
            check_failed(self.tcomm, self._timeout(None))  # take part in the exchange, so the others raise too
            raise
        check_agreement(self.tcomm, step, flat.total, flat.layout_crc(), self._timeout(None))
        mine = codec.flatten({"rng": capture_rng(), "user": rank_state}, inline=True).skeleton
        shards = plan_shards(flat.total, len(self.world.trainers), len(self.world.holders), split)
        t = self.world.trainer_index
        lo, hi = trainer_range(shards, t)
        buf = self.pool.acquire(hi - lo, needs_pinned(flat), self._timeout(None))
        try:
            event = copy_range(flat, lo, hi, buf)
        except BaseException:
            self.pool.release(buf)
            raise
        ckpt = CheckpointId(step, self.run)
        trainer.submit(
            SaveJob(
                ckpt,
                epoch,
                [s for s in shards if s.trainer == t],
                lo,
                flat.total,
                len(self.world.trainers),
                len(self.world.holders),
                flat.layout() if t == 0 else None,
                (t, mine),
                buf,
                event,
                self.chunk,
            )
        )
        self.last_step = step
        return SaveHandle(ckpt, step, time.perf_counter() - t0, flat.total, hi - lo)

    def completed(self, level: Level = Level.L1) -> CheckpointId | None:
        """The newest checkpoint of this run announced complete at `level`, without waiting; after close() too,
        when the last checkpoint has settled at every level."""
        trainer = self._read_trainer("completed")
        with trainer.cond:
            return trainer.newest.get(Level(level))

    def failed(self, level: Level) -> Failure | None:
        """The newest checkpoint of this run the lead said will never be complete at `level`, and why (a
        holder's disk full, an upload refused), without waiting; None when none failed there. A later
        checkpoint may still reach the level: compare with completed(level). After close() too."""
        trainer = self._read_trainer("failed")
        with trainer.cond:
            msg = trainer.failed.get(Level(level))
        return None if msg is None else Failure(msg.ckpt, msg.level, msg.reason)

    def wait(self, level: Level = Level.L1, *, step: int | None = None, timeout: float | None = None) -> CheckpointId:
        """Block until a checkpoint of step >= `step` (default: the last saved) is complete at `level`.

        Newer checkpoints supersede older ones at L2/L3 when the disk is slower than training, hence ">=".
        """
        trainer = self._need_trainer("wait")
        level = Level(level)
        step = self.last_step if step is None else step
        if step < 0:
            raise ConfigError("wait() before any save(): nothing to wait for")

        def settled() -> bool:
            done = trainer.newest.get(level)
            return (done is not None and done.step >= step) or trainer.is_stopped

        with trainer.cond:
            if not trainer.cond.wait_for(settled, self._timeout(timeout)):
                raise CheckpointTimeout(f"step {step} did not reach {level.name} within {self._timeout(timeout)}s")
            done = trainer.newest.get(level)
            if done is not None and done.step >= step:
                return done
        self.svc.check()
        raise DeepCheckError(f"DeepCheck stopped before step {step} reached {level.name}")

    # ---- emergency ---------------------------------------------------------------------------------
    def request_flush(self) -> None:
        """Note an interruption notice (thread-safe; e.g. from a metadata watcher thread)."""
        self.flush_flag.set()

    @property
    def flush_requested(self) -> bool:
        """Whether request_flush() was called on this rank (local: should_flush() is the collective that
        agrees; a caller that agrees on several flags in one collective reads this one)."""
        return self.flush_flag.is_set()

    def should_flush(self) -> bool:
        """Collective over trainers, once per step: True on all of them if any trainer got request_flush()."""
        self._need_trainer("should_flush")
        return any_each(self.tcomm, self.flush_flag.is_set())[0]

    def flush_now(
        self,
        state: Any,
        step: int,
        *,
        epoch: int | None = None,
        rank_state: Any = None,
        owners: Sequence[int] | None = None,
        timeout: float | None = None,
    ) -> FlushReport:
        """Checkpoint now (as save() does); return once it is safe on the holders at the lowest of the levels
        (init's). Collective over trainers."""
        t0 = time.perf_counter()
        handle = self.save(state, step, epoch=epoch, rank_state=rank_state, owners=owners)
        self.wait(min(self.levels), step=step, timeout=timeout)
        self.flush_flag.clear()
        with self.trainer.cond:
            level = max(lv for lv, c in self.trainer.newest.items() if c.step >= step)
        return FlushReport(step, level, time.perf_counter() - t0, handle.stall_s)

    # ---- restoring ---------------------------------------------------------------------------------
    def _restorer(self) -> Restorer:
        return Restorer(self.rcomm, self.tcomm, self.world, self.chunk, self._timeout(None))

    def latest(self) -> CheckpointInfo | None:
        """Collective over trainers: the newest complete checkpoint at any level (not yet verified)."""
        self._need_trainer("latest")
        cands = self._restorer().candidates()
        return cands[0].info() if cands else None

    def restore(self, *, rng: bool = True) -> Restored | None:
        """Collective over trainers: load the newest checkpoint that verifies; None if there is none.

        Falls back to older checkpoints (logging why) when shards are missing or corrupt, and raises
        CorruptCheckpointError if every complete checkpoint fails. With rng=True this rank's RNG states are
        set to the saved ones (when the saving world had a trainer of this index).
        """
        trainer = self._need_trainer("restore")
        with trainer.cond:
            trainer.cond.wait_for(lambda: trainer.undelivered == 0 or trainer.is_stopped, self._timeout(None))
        found = self._restorer().restore()
        if found is None:
            return None
        cand, flat, fallbacks = found
        m = cand.manifest
        state = codec.unflatten(m.skeleton, list(m.leaves), flat)
        t = self.world.trainer_index
        saved = m.rank_states[t] if t < len(m.rank_states) else None
        mine = codec.unflatten(saved, []) if saved is not None else None
        if mine is not None and rng:
            restore_rng(mine["rng"])
        return Restored(cand.info(), state, None if mine is None else mine["user"], fallbacks)

    # ---- shutdown ----------------------------------------------------------------------------------
    def serve(self, timeout: float | None = None) -> None:
        """Holder ranks: serve until every trainer has closed and the last checkpoint settled, then close."""
        if self.world.is_trainer:
            raise ConfigError("serve() is for holder-only ranks; trainers (and 'both' ranks) call close()")
        self.close(timeout)

    def close(self, timeout: float | None = None) -> None:
        """Collective over all ranks: deliver every pending save, drain L2/L3, stop the background thread."""
        if self.closed:
            return
        limit = self._timeout(timeout)
        if self.trainer is not None:
            trainer = self.trainer
            with trainer.cond:
                if not trainer.cond.wait_for(lambda: trainer.undelivered == 0 or trainer.is_stopped, limit):
                    raise CheckpointTimeout(f"pending checkpoints were not delivered within {limit}s")
            self.svc.check()
            bye = trainer.bye()
            self.svc.post(lambda: self.svc.outbox.send(bye, self.world.lead))
        if not self.svc.done.wait(limit):
            raise CheckpointTimeout(f"DeepCheck did not shut down within {limit}s (are all trainers closing?)")
        self.closed = True
        self.svc.check()
        for c in (self.tcomm, self.rcomm, self.comm):
            if c != MPI.COMM_NULL:
                c.Free()


def _split(flat: codec.Flattened, owners: Sequence[int], n_trainers: int, me: int) -> tuple[int, ...]:
    """Where each trainer's range of the stream begins (plan_shards' `split`): at its first leaf, so that the
    padding after a leaf goes with it; checks that `owners` is one sorted trainer index per leaf and that this
    trainer holds every leaf it owns."""
    if (
        len(owners) != len(flat.leaves)
        or list(owners) != sorted(owners)
        or not all(0 <= o < n_trainers for o in owners)
    ):
        raise StateError(f"owners must give one trainer (0-{n_trainers - 1}) per bulk leaf, sorted: {list(owners)}")
    if any(o == me and src is None for o, src in zip(owners, flat.sources, strict=True)):
        raise StateError(f"trainer {me} owns a leaf it passed as codec.Elsewhere")
    firsts = [
        next((leaf.offset for leaf, o in zip(flat.leaves, owners) if o >= t), flat.total) for t in range(n_trainers)
    ]
    return (0, *firsts[1:], flat.total)
