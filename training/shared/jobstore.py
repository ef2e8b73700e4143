"""Training jobs in deepvm's state database: what `deepvm status` shows, what `train --resume` continues.

The jobs table lives in the same SQLite file as the clusters (provisioning/core/db.py: WAL mode, one
transaction per call), so a kill -9 of the controller leaves the last committed row, and `status` reads it
while a controller writes. It belongs to the training layer: the provisioning store neither reads nor
writes it. Recovery events go to the cluster's event log (provisioning.clusters.store.Store.add_event) beside the
cloud's own.

One controller per cluster at a time: it holds `train_lock(cluster)` (provisioning.core.db.exclusive_lock),
so "is a controller running" is a lock test, not a pid guess.
"""

from __future__ import annotations

import sqlite3
from contextlib import AbstractContextManager
from dataclasses import dataclass, fields, replace
from enum import Enum
from pathlib import Path

from provisioning.clusters.store import utc_now
from provisioning.core.db import AddedColumn, Database, Schema, exclusive_lock, lock_held
from provisioning.core.errors import CloudError
from training.shared.timespan import duration

_JOBS = """
CREATE TABLE IF NOT EXISTS jobs (
    job_id TEXT PRIMARY KEY,
    cluster TEXT NOT NULL,
    name TEXT NOT NULL,
    spec_path TEXT NOT NULL,          -- the job YAML on the controller's machine
    status TEXT NOT NULL,             -- JobStatus
    started_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    step INTEGER NOT NULL,            -- newest step reached
    total_steps INTEGER NOT NULL,
    world_size INTEGER NOT NULL,      -- trainers in the current (or last) launch
    loss REAL,
    restarts INTEGER NOT NULL,        -- relaunches after a notice, a dead node or a controller crash
    lost_steps INTEGER NOT NULL,      -- steps trained twice because a run ended past its checkpoint
    checkpoint_step INTEGER NOT NULL, -- newest step checkpointed (-1: none yet)
    cost_base_usd REAL NOT NULL,      -- the cluster's cost so far when the job started
    cost_usd REAL NOT NULL,           -- what the cluster cost while the job ran
    out_dir TEXT NOT NULL,            -- where the final model and metrics are fetched to
    python TEXT NOT NULL,             -- the nodes' interpreter
    message TEXT NOT NULL,
    controller TEXT NOT NULL DEFAULT 'local', -- where the controller runs: local, or the head's instance id
    outputs_url TEXT NOT NULL DEFAULT '',  -- where the head copies the job's outputs at its end ('': nowhere)
    down_when_done INTEGER NOT NULL DEFAULT 0,  -- the job's end takes its cluster down (autodown)
    ladder TEXT NOT NULL DEFAULT '',  -- the recovery ladder's newest decision and why ('': none yet)
    lost_s REAL NOT NULL DEFAULT 0,  -- a launched script without steps: seconds of work done twice
    kept_file TEXT NOT NULL DEFAULT '',  -- a launched script: the newest of its kept files ('': none kept yet)
    kept_at REAL NOT NULL DEFAULT 0  -- ... when it was written (time.time() on its node)
)"""
SCHEMA = Schema(
    name="jobs",
    version=4,  # 2: outputs_url, down_when_done (issue 25); 3: ladder (the recovery ladder run live); 4: lost_s,
    # kept_file, kept_at (a launched script's progress is its files, its loss time: issue 36)
    statements=(_JOBS, "CREATE INDEX IF NOT EXISTS jobs_by_cluster ON jobs(cluster)"),
    # a state.db from before managed training, from before the money guard, from before the live ladder, from
    # before launched scripts
    added_columns=(
        AddedColumn("jobs", "controller", "TEXT NOT NULL DEFAULT 'local'"),
        AddedColumn("jobs", "outputs_url", "TEXT NOT NULL DEFAULT ''"),
        AddedColumn("jobs", "down_when_done", "INTEGER NOT NULL DEFAULT 0"),
        AddedColumn("jobs", "ladder", "TEXT NOT NULL DEFAULT ''"),
        AddedColumn("jobs", "lost_s", "REAL NOT NULL DEFAULT 0"),
        AddedColumn("jobs", "kept_file", "TEXT NOT NULL DEFAULT ''"),
        AddedColumn("jobs", "kept_at", "REAL NOT NULL DEFAULT 0"),
    ),
)

LOCAL = "local"


class JobStatus(str, Enum):
    """A job's state, as its controller keeps it (the jobs table; `status --json` and `jobs --json` show
    the value). RUNNING is the only state that is not final."""

    RUNNING = "running"  # a controller runs it (or ran it and died: `deepvm status` says so)
    COMPLETED = "completed"
    CANCELLED = "cancelled"  # `deepvm cancel`: final, not resumed
    STOPPED = "stopped"  # the user stopped it (Ctrl-C with --controller local): `train --resume` continues it
    FAILED = "failed"  # it cannot go on (no holder left, repeated failures); `train --resume` may retry it

    @property
    def final(self) -> bool:
        return self is not JobStatus.RUNNING

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class JobRow:
    """One training job as stored."""

    job_id: str
    cluster: str
    name: str
    spec_path: str
    status: JobStatus
    started_at: str
    updated_at: str
    step: int
    total_steps: int
    world_size: int
    loss: float | None
    restarts: int
    lost_steps: int
    checkpoint_step: int
    cost_base_usd: float
    cost_usd: float
    out_dir: str
    python: str
    message: str
    controller: str = LOCAL  # "local" (this machine), or the instance id of the head that runs the job
    outputs_url: str = ""  # s3://... where the head copies the job's outputs, log and checkpoint at its end
    down_when_done: bool = False  # its end takes its cluster down: its outputs are then in S3, not on the head
    ladder: str = ""  # the recovery ladder's newest decision and why, e.g. "repair: ... refused lately: ..."
    lost_s: float = 0.0  # a launched script without steps: work done twice, in seconds (its lost_steps stay 0)
    kept_file: str = ""  # a launched script: the newest of its kept files (job/REL, checkpoint_dir/REL); "" none
    kept_at: float = 0.0  # when that file was written (time.time() on its node)

    def saved(self, now: float) -> str:
        """What of it is safe, in words: `checkpoint at step 12` (or none yet), or for a launched script, whose
        checkpoint is its own files, the newest of them and its age at `now` (time.time())."""
        if self.kept_file:
            return f"kept {self.kept_file}, written {duration(max(0.0, now - self.kept_at))} ago"
        return f"checkpoint at step {self.checkpoint_step}" if self.checkpoint_step >= 0 else "no checkpoint yet"

    def stopped_at(self, now: float) -> str:
        """Where a job that stops now stands: `at step 12 (checkpoint at step 12)`, or for a launched script
        without steps only what is safe: `(kept job/snapshot.pt, written 40s ago)`."""
        at = f"at step {self.step} " if self.total_steps or self.step else ""
        return f"{at}({self.saved(now)})"

    def to_dict(self) -> dict[str, object]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


def reached(step: int, total_steps: int) -> str:
    """How far a job got, in words: `step 12/40`, or, for a launched script that reports no steps (it has none
    of deepvm's: 0 of 0), that it reports none (`status`, `jobs`, the controller's stops)."""
    return f"step {step}/{total_steps}" if total_steps or step else "no steps reported"


def lost_in_time(lost_steps: int, lost_s: float) -> bool:
    """Whether the work a job did twice is told in time: a launched script without steps, whose lost steps are
    always 0 and say nothing of the work it redid."""
    return bool(lost_s) and not lost_steps


def lost(lost_steps: int, lost_s: float) -> str:
    """The work a job did twice, as a row's field: `lost steps 3`, or `lost work 3m07s` (lost_in_time)."""
    return f"lost work {duration(lost_s)}" if lost_in_time(lost_steps, lost_s) else f"lost steps {lost_steps}"


_COLUMNS = [f.name for f in fields(JobRow)]


class JobStore:
    """The jobs table; every method is one committed transaction."""

    def __init__(self, path: Path | None = None) -> None:
        self._db = Database(SCHEMA, path)

    def put(self, row: JobRow) -> JobRow:
        """Insert or replace the row (updated_at set now); returns it as stored."""
        row = replace(row, updated_at=utc_now())
        marks = ",".join("?" for _ in _COLUMNS)
        with self._db.transaction() as db:
            db.execute(
                f"INSERT OR REPLACE INTO jobs ({','.join(_COLUMNS)}) VALUES ({marks})",
                [row.status.value if c == "status" else getattr(row, c) for c in _COLUMNS],
            )
        return row

    def get(self, job_id: str) -> JobRow | None:
        found = self._db.read_one("SELECT * FROM jobs WHERE job_id = ?", (job_id,))
        return None if found is None else _job_row(found)

    def all(self) -> list[JobRow]:
        """Every job, newest first."""
        rows = self._db.read("SELECT * FROM jobs ORDER BY started_at DESC, rowid DESC")
        return [_job_row(r) for r in rows]

    def for_cluster(self, cluster: str) -> list[JobRow]:
        """The cluster's jobs, newest first."""
        rows = self._db.read("SELECT * FROM jobs WHERE cluster = ? ORDER BY started_at DESC, rowid DESC", (cluster,))
        return [_job_row(r) for r in rows]


def _job_row(row: sqlite3.Row) -> JobRow:
    return JobRow(
        **{
            **{c: row[c] for c in _COLUMNS},
            "status": JobStatus(row["status"]),
            "down_when_done": bool(row["down_when_done"]),
        }
    )


class ControllerBusy(CloudError):
    """Another controller holds the cluster's training lock."""


def train_lock(cluster: str) -> AbstractContextManager[None]:
    """Hold the cluster's training lock for the controller's life; a second controller fails at once."""
    busy = ControllerBusy(
        f"a `deepvm train` controller is already running on cluster {cluster}; wait for it, or stop it with Ctrl-C"
    )
    return exclusive_lock(f"train-{cluster}", busy)


def controller_running(cluster: str) -> bool:
    """True while some process holds the cluster's training lock."""
    return lock_held(f"train-{cluster}")
