"""A job's checkpoint plan: its `checkpoint:` read once, into the one record every stage asks.

training.shared.jobspec checks the job file's words; this says what they mean, in one place, so that no
stage asks "has it L3?" its own way:

- the CLI grants the S3 area L3 writes before the job starts (training.shared.storage,
  training.client.storage);
- the controller knows whether the checkpoints outlive every holder (training.control.nodes);
- the head mirrors the job's log beside L3 (training.head.job_service);
- every rank builds DeepCheck from it (training.node.rank): the holders write, and the lead persists, exactly
  the levels named, in the RAM slots and the S3 place it gives;
- a trainer saves when one is due (training.node.checkpointing, training.node.launched) what the plan keeps:
  the state tree of a step loop (deepvm's worker, a script calling ctx.step) or the files a launched script
  writes itself (training.node.keptfiles).

The plan is built from a JobSpec (`spec.checkpoint_plan`, computed once per spec), never from a part of one:
what it keeps depends on the `run:` beside `checkpoint:`.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING

from deepcheck.protocol import Level
from deepcheck.storage_s3 import S3Config
from training.shared.s3url import split_s3_url

if TYPE_CHECKING:
    from training.shared.jobspec import JobSpec

L3_DEFAULT_PREFIX = "deepcheck"  # the key prefix of L3 when s3_prefix names only a bucket


class Kept(str, Enum):
    """What a checkpoint of the job holds."""

    STATE = "state"  # the tree a step loop gives DeepCheck at each save (deepvm's worker, ctx.step)
    FILES = "files"  # a launched script's own files, kept as they are closed (run.calls_step: false)


@dataclass(frozen=True)
class L3Place:
    """Where DeepCheck's L3 writes: the job file's s3_prefix, and the bucket and key prefix it names."""

    url: str  # as the job file gives it: the job's log mirror and outputs go beside it
    bucket: str
    prefix: str  # never empty: L3_DEFAULT_PREFIX when the url names only a bucket

    @classmethod
    def of(cls, url: str) -> L3Place:
        bucket, prefix = split_s3_url(url)
        return cls(url, bucket, prefix or L3_DEFAULT_PREFIX)

    def s3_config(self) -> S3Config:
        return S3Config(bucket=self.bucket, prefix=self.prefix)


@dataclass(frozen=True)
class CheckpointPlan:
    """When a checkpoint is due, what it keeps, and the levels it is kept at (see the module docstring)."""

    kept: Kept
    levels: frozenset[Level]  # exactly these are written: L1 the holders' RAM, L2 their disks, L3 S3
    every_steps: int | None  # due every this many steps and/or
    every_seconds: float | None  # every this many seconds, whichever comes first
    ram_slots: int  # checkpoints a holder's RAM ring holds
    l3: L3Place | None  # None: the job has no L3
    files: tuple[str, ...] = ()  # Kept.FILES: the paths, directories or globs kept (training.node.keptfiles)

    @classmethod
    def of(cls, spec: JobSpec) -> CheckpointPlan:
        checkpoint = spec.checkpoint
        levels = frozenset(Level[name.upper()] for name in checkpoint.levels)
        return cls(
            kept=Kept.STATE if spec.calls_step else Kept.FILES,
            levels=levels,
            every_steps=checkpoint.every_steps,
            every_seconds=checkpoint.every_seconds,
            ram_slots=checkpoint.buffer_slots,
            # the spec requires s3_prefix with l3; one given without l3 is not used
            l3=L3Place.of(checkpoint.s3_prefix) if Level.L3 in levels and checkpoint.s3_prefix else None,
            files=tuple(checkpoint.files),
        )

    @property
    def safe_level(self) -> Level:
        """The level a claim that the job is checkpointed rests on: the holders' disks when the job writes
        them (their RAM does not outlive a relaunch of the job's ranks), else their RAM."""
        return Level.L2 if Level.L2 in self.levels else Level.L1

    @property
    def lasting_levels(self) -> tuple[Level, ...]:
        """The levels a checkpoint may fail to reach after L1 took it (a disk full, an upload refused)."""
        return tuple(level for level in (Level.L2, Level.L3) if level in self.levels)

    @property
    def outlives_holders(self) -> bool:
        """Checkpoints live on the holders (RAM, disk); without any, only L3 (S3) still has them."""
        return self.l3 is not None

    def s3_config(self) -> S3Config | None:
        """DeepCheck's S3 store for L3, or None without L3."""
        return None if self.l3 is None else self.l3.s3_config()
