"""Who sends which bytes to whom.

A checkpoint is one flat byte stream (see `codec`). It is cut into equal shards. Every trainer owns a
contiguous run of shards, so at L0 it copies one contiguous range and never the whole state, and every
shard goes to exactly one holder. With S = lcm(n, m) shards each of n trainers sends S/n shards and each
of m holders keeps S/m, so the load is exactly balanced; when lcm(n, m) would make too many tiny shards
we fall back to ceil(m/n) shards per trainer, which is balanced to within one shard.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar

from .errors import ConfigError

MAX_SHARDS = 1024
T = TypeVar("T")


@dataclass(frozen=True)
class Shard:
    index: int  # position of the shard in the stream
    trainer: int  # trainer index (not MPI rank) that sends it
    holder: int  # holder index (not MPI rank) that keeps it
    offset: int  # first byte in the stream
    length: int  # number of bytes

    @property
    def end(self) -> int:
        return self.offset + self.length


def even_split(total: int, parts: int) -> list[tuple[int, int]]:
    """`parts` contiguous [lo, hi) ranges covering [0, total), sizes differing by at most one byte."""
    if parts < 1:
        raise ConfigError(f"cannot split into {parts} parts; need at least 1")
    if total < 0:
        raise ConfigError(f"cannot split a negative size ({total})")
    base, extra = divmod(total, parts)
    bounds, lo = [], 0
    for i in range(parts):
        hi = lo + base + (1 if i < extra else 0)
        bounds.append((lo, hi))
        lo = hi
    return bounds


def plan_shards(total: int, n_trainers: int, n_holders: int, split: tuple[int, ...] | None = None) -> tuple[Shard, ...]:
    """Cut `total` bytes into shards for `n_trainers` senders and `n_holders` keepers.

    `split`, when given, is where each trainer's range begins, and the stream's end: trainer t sends
    [split[t], split[t + 1]), cut into its shards as evenly as a trainer's range is otherwise. It is for a state
    whose parts live on different trainers (a launched script's kept files, each on the trainer that read it:
    training.node.launched), so that each part is sent by the one trainer that has it and never copied to the
    others first. A trainer with an empty range sends empty shards.
    """
    if n_trainers < 1 or n_holders < 1:
        raise ConfigError(
            f"need at least one trainer and one holder, got {n_trainers} trainer(s) and {n_holders} holder(s)"
        )
    per_trainer = n_holders // math.gcd(n_trainers, n_holders)
    if n_trainers * per_trainer > MAX_SHARDS:
        per_trainer = -(-n_holders // n_trainers)
    if split is None:
        bounds = even_split(total, n_trainers * per_trainer)
    else:
        if len(split) != n_trainers + 1 or split[0] != 0 or split[-1] != total or list(split) != sorted(split):
            raise ConfigError(f"a split of {total} bytes over {n_trainers} trainers must rise from 0 to it: {split}")
        bounds = [(lo + a, lo + b) for lo, hi in itertools.pairwise(split) for a, b in even_split(hi - lo, per_trainer)]
    return tuple(
        Shard(index=i, trainer=i // per_trainer, holder=i % n_holders, offset=lo, length=hi - lo)
        for i, (lo, hi) in enumerate(bounds)
    )


def trainer_range(shards: tuple[Shard, ...], trainer: int) -> tuple[int, int]:
    """The one contiguous byte range a trainer sends."""
    own = [s for s in shards if s.trainer == trainer]
    if not own:
        raise ConfigError(f"trainer {trainer} owns no shard in this plan")
    return own[0].offset, own[-1].end


def overlaps(shards: Sequence[T], lo: int, hi: int) -> list[tuple[T, int, int]]:
    """(shard, a, b) for every shard (anything with offset, length) meeting [lo, hi); [a, b) = overlap."""
    out = []
    for s in shards:
        a, b = max(lo, s.offset), min(hi, s.offset + s.length)
        if a < b:
            out.append((s, a, b))
    return out
