"""Finding and reading back the newest complete checkpoint (runs on the trainers' own threads).

Trainer 0 asks every holder for an inventory and ranks the complete checkpoints newest first (a
checkpoint is a candidate when some level has its manifest and every shard has at least one copy
somewhere); the trainers then try them in order. Each trainer fetches only its 1/n of the stream, for
the current n, which need not be the n at save time; holders verify every shard's size and digest
before sending any byte of it. A corrupt copy makes the trainer try the next copy (RAM, disk, S3); when
no copy of some shard is good, all trainers agree to fall back to the previous checkpoint and log why.
Finally the trainers exchange their pieces (chunked broadcasts) so each holds the whole state.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from mpi4py import MPI

from .errors import CorruptCheckpointError
from .manifest import CheckpointId, Manifest
from .protocol import FetchReply, FetchRequest, Inventory, InventoryRequest, Level
from .sharding import even_split, overlaps
from .transport import TAG_FETCH, TAG_REPLY, TAG_REQ, post_chunks, spans, wait_message, wait_requests
from .world import World

log = logging.getLogger("deepcheck")


@dataclass(frozen=True)
class CheckpointInfo:
    ckpt: CheckpointId
    step: int
    epoch: int | None
    levels: tuple[Level, ...]  # levels where it is complete
    total_bytes: int


@dataclass
class Candidate:
    manifest: Manifest
    levels: set[Level]
    sources: dict[int, list[tuple[int, Level]]]  # shard index -> (holder rank, level), preferred first

    def info(self) -> CheckpointInfo:
        m = self.manifest
        return CheckpointInfo(m.ckpt, m.ckpt.step, m.epoch, tuple(sorted(self.levels)), m.total_bytes)


def candidates(inventories: list[Inventory]) -> list[Candidate]:
    """Complete checkpoints that have a copy of every shard, newest first."""
    manifests: dict[CheckpointId, Manifest] = {}
    levels: dict[CheckpointId, set[Level]] = {}
    for inv in inventories:
        for level, m in inv.manifests:
            manifests.setdefault(m.ckpt, m)
            levels.setdefault(m.ckpt, set()).add(level)
    s3_ranks = [inv.rank for inv in inventories if inv.has_s3]
    out = []
    for ckpt in sorted(manifests, reverse=True):
        m = manifests[ckpt]
        sources: dict[int, list[tuple[int, Level]]] = {}
        for info in m.shards:
            src = [(inv.rank, Level.L1) for inv in inventories if info.index in inv.ram.get(ckpt, ())]
            src += [(inv.rank, Level.L2) for inv in inventories if info.index in inv.disk.get(ckpt, {})]
            if Level.L3 in levels[ckpt] and s3_ranks:
                k = info.index % len(s3_ranks)
                src += [(r, Level.L3) for r in s3_ranks[k:] + s3_ranks[:k]]
            if not src:
                log.info("checkpoint %s is not restorable here: no copy of shard %d", ckpt, info.index)
                break
            sources[info.index] = src
        else:
            out.append(Candidate(m, levels[ckpt], sources))
    return out


@dataclass
class Restorer:
    rcomm: MPI.Comm  # shared with the holders' service threads
    tcomm: MPI.Comm  # trainers only
    world: World
    chunk: int
    timeout: float | None
    notes: list[str] = field(default_factory=list)

    def inventories(self) -> list[Inventory]:
        for h in self.world.holders:
            self.rcomm.send(InventoryRequest(), dest=h, tag=TAG_REQ)
        return [
            wait_message(self.rcomm, h, TAG_REPLY, self.timeout, f"inventory of rank {h}") for h in self.world.holders
        ]

    def candidates(self) -> list[Candidate]:
        """Collective over trainers: the same ranked list on every trainer."""
        found = candidates(self.inventories()) if self.world.trainer_index == 0 else None
        return self.tcomm.bcast(found, root=0)

    def _fetch_piece(self, cand: Candidate, flat: bytearray, index: int, a: int, b: int) -> str | None:
        info = next(s for s in cand.manifest.shards if s.index == index)
        errors = []
        sources = cand.sources[index]
        k = self.world.trainer_index % len(sources)
        for rank, level in sources[k:] + sources[:k]:
            req = FetchRequest(cand.manifest.ckpt, info, level, a - info.offset, b - info.offset, self.chunk)
            self.rcomm.send(req, dest=rank, tag=TAG_REQ)
            reply: FetchReply = wait_message(
                self.rcomm, rank, TAG_REPLY, self.timeout, f"shard {index} from rank {rank}"
            )
            if reply.error is not None:
                errors.append(f"{level.name} copy on rank {rank}: {reply.error}")
                continue
            reqs = post_chunks(self.rcomm, memoryview(flat)[a:b], rank, TAG_FETCH, self.chunk, send=False)
            wait_requests(reqs, self.timeout, f"shard {index} bytes from rank {rank}")
            if errors:
                self.notes.append(f"{cand.manifest.ckpt}: used another copy of shard {index} ({'; '.join(errors)})")
            return None
        return f"shard {index}: " + "; ".join(errors)

    def _fetch_mine(self, cand: Candidate, flat: bytearray) -> str | None:
        lo, hi = even_split(cand.manifest.total_bytes, self.tcomm.Get_size())[self.tcomm.Get_rank()]
        for shard, a, b in overlaps(cand.manifest.shards, lo, hi):
            error = self._fetch_piece(cand, flat, shard.index, a, b)
            if error is not None:
                return error
        return None

    def _share(self, flat: bytearray) -> None:
        view = memoryview(flat)
        for root, (lo, hi) in enumerate(even_split(len(flat), self.tcomm.Get_size())):
            for a, b in spans(hi - lo, self.chunk):
                self.tcomm.Bcast([view[lo + a : lo + b], MPI.BYTE], root=root)

    def restore(self) -> tuple[Candidate, bytearray, list[str]] | None:
        """Collective over trainers: newest checkpoint that verifies, its flat stream, fallbacks taken."""
        cands = self.candidates()
        failures = []
        for cand in cands:
            flat = bytearray(cand.manifest.total_bytes)
            errors = sorted({e for e in self.tcomm.allgather(self._fetch_mine(cand, flat)) if e})
            notes = self.tcomm.gather(self.notes, root=0)
            self.notes = []
            if self.world.trainer_index == 0:
                for note in (n for ns in notes for n in ns):
                    log.warning("restore: %s", note)
            if not errors:
                self._share(flat)
                return cand, flat, failures
            msg = (
                f"checkpoint {cand.manifest.ckpt} failed verification ({' | '.join(errors)}); "
                "falling back to the previous complete checkpoint"
            )
            if self.world.trainer_index == 0:
                log.warning(msg)
            failures.append(msg)
        if failures:
            raise CorruptCheckpointError("no complete checkpoint passed verification:\n" + "\n".join(failures))
        return None
