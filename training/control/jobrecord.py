"""The job a controller runs, on its own: what was asked (TrainRequest), which job that is (choose_job: a
new one, one the user resumes, or the one a restarted controller finds), and its row in the jobs table
while it runs (JobRecord), down to its result (train_result).

choose_job is pure (it is handed the stored rows and returns the row to store, with what to tell the user
and how the job resumes), so its rules are tested without a database (tests/training/test_jobrecord.py):

- a controller given a job id that is stored already was restarted (a crash, a reboot of the head): it
  carries on from the newest checkpoint, and that counts as a restart;
- `--resume` continues the newest unfinished run of the job's name on the cluster (or, given its id, the
  stopped job seeded from another cluster: training/head/resume.py); a job the user stopped (Ctrl-C, a time
  limit) continues as asked, which is no restart, a crashed one's resume is one;
- otherwise the job is new (an unfinished earlier run is named, with how to continue it instead).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path

from provisioning.clusters.store import utc_now
from provisioning.core.errors import InputError
from provisioning.core.home import deepvm_home
from provisioning.ladder.offers import MarketOffers
from training.control.jobclock import JobTimers
from training.shared.jobstore import JobRow, JobStatus, JobStore
from training.shared.limits import JobLimits
from training.shared.metrics import RunMetrics
from training.shared.progress import AttemptRecord, Recovery, RecoveryReason, TrainResult

SAVE_EVERY_S = 2.0  # how often progress is written to the jobs table
_UNFINISHED = (JobStatus.RUNNING, JobStatus.STOPPED, JobStatus.FAILED)


@dataclass(frozen=True)
class TrainRequest:
    """What `deepvm train` was asked to do."""

    job_path: Path
    cluster: str
    python: str  # the interpreter on the nodes (with torch, mpi4py, pyyaml, pydantic)
    resume: bool = False  # continue the newest unfinished job of this name on this cluster
    out_dir: Path | None = None  # default: DEEPVM_HOME/jobs/JOB_ID
    replace_nodes: bool = True  # buy a spot node for each one lost, within the plan's count
    max_failures: int = 3  # consecutive attempts that fail without progress before giving up
    stall_timeout_s: float | None = None  # silence after the first step that counts as a hang; None: the file's
    startup_grace_s: float | None = None  # from a launch to its first step; None: the file's (training/control/stall)
    # set when the controller runs on the cluster's head node (training.head.job_service):
    job_id: str | None = None  # the job's id, chosen by the client; a stored job of this id is resumed
    node_env: dict[str, str] | None = None  # the ranks' AWS settings, as the user's machine computed them
    cancel_file: Path | None = None  # once it exists, the job is cancelled ("now" in it: without a checkpoint)
    inside_cluster: bool = False  # reach nodes at their private addresses (the head is inside the VPC)
    limits: JobLimits = field(default_factory=JobLimits)  # deadline, budget, the fallback's cap (the ladder's)
    # the pools the recovery ladder may buy from, priced where the plan's catalog is (the user's machine);
    # None: from the plan's catalog here (training.control.market.job_offers)
    market: MarketOffers | None = None
    timers: JobTimers = field(default_factory=JobTimers)  # --idle, --max-duration (training/control/jobclock.py)
    # set by a hand-over of control to a new head (training.control.handover):
    head: str | None = None  # the instance this controller runs on (None: head_node's rule, when inside_cluster)
    handed_from: str | None = None  # the head that handed the job over: terminated before the pool is read


@dataclass(frozen=True)
class JobChoice:
    """The job a controller runs: its row to store, and how it starts."""

    row: JobRow
    resumed: RecoveryReason | None  # how it continues from its newest checkpoint; None: a fresh start
    note: str  # what to tell the user about it ("": nothing)


def new_job_id(name: str) -> str:
    """A job's id: its name and the UTC time it was started."""
    return f"{name}-{datetime.now(timezone.utc).strftime('%Y%m%dT%H%M%S')}"


def fresh_row(
    request: TrainRequest, name: str, total_steps: int, cluster: str, job_id: str, cost_base_usd: float
) -> JobRow:
    """A new job's row, before anything ran; `cost_base_usd`: what the cluster has cost so far."""
    out = request.out_dir or deepvm_home() / "jobs" / job_id
    return JobRow(
        job_id=job_id,
        cluster=cluster,
        name=name,
        spec_path=str(request.job_path.resolve()),
        status=JobStatus.RUNNING,
        started_at=utc_now(),
        updated_at="",
        step=0,
        total_steps=total_steps,
        world_size=0,
        loss=None,
        restarts=0,
        lost_steps=0,
        checkpoint_step=-1,
        cost_base_usd=cost_base_usd,
        cost_usd=0.0,
        out_dir=str(out),
        python=request.python,
        message="starting",
    )


def choose_job(
    request: TrainRequest, name: str, known: JobRow | None, previous: Sequence[JobRow], new_row: Callable[[str], JobRow]
) -> JobChoice:
    """Which job `request` (of the job spec named `name`) runs (see the module docstring). `known`: the
    stored job of the request's id; `previous`: the cluster's jobs, newest first; `new_row(job_id)`: a
    fresh job's row."""
    if known is not None and not (request.resume and known.status is JobStatus.STOPPED):
        row = replace(
            known, status=JobStatus.RUNNING, restarts=known.restarts + 1, message="resumed after a controller restart"
        )
        note = (
            f"controller restarted: resuming job {known.job_id} from its newest checkpoint (last at step {known.step})"
        )
        return JobChoice(row, RecoveryReason.CONTROLLER_RESTART, note)
    unfinished = [j for j in previous if j.name == name and j.status in _UNFINISHED]
    if known is not None:  # stopped elsewhere and seeded here to be resumed (training/head/resume.py)
        unfinished = [known]
    if request.resume:
        if not unfinished:
            raise InputError(
                f"nothing to resume: no unfinished job named {name!r} on cluster {request.cluster}; "
                "run without --resume to start it"
            )
        job = unfinished[0]
        asked = job.status is JobStatus.STOPPED  # the user stopped it: going on is no restart
        row = replace(
            job,
            status=JobStatus.RUNNING,
            spec_path=str(request.job_path.resolve()),
            python=request.python,
            restarts=job.restarts + (0 if asked else 1),
            message="resumed",
        )
        reason = RecoveryReason.USER_RESUME if asked else RecoveryReason.CONTROLLER_RESTART
        return JobChoice(row, reason, f"resuming job {job.job_id} (last at step {job.step}, {job.status})")
    note = ""
    if unfinished:
        note = (
            f"an earlier run of {name} ({unfinished[0].job_id}) ended at step {unfinished[0].step}; "
            "starting afresh (`--resume` would continue it)"
        )
    return JobChoice(new_row(request.job_id or new_job_id(name)), None, note)


@dataclass(frozen=True)
class JobState:
    """What the recovery ladder needs of the job's row: the steps left and what it has cost so far."""

    steps_left: int
    spent_usd: float


class JobRecord:
    """The job's row in the jobs table while a controller runs it: every change is saved at once, but
    progress at most every SAVE_EVERY_S (the newest is kept and saved with the next change)."""

    def __init__(self, jobs: JobStore, row: JobRow, cluster_usd: Callable[[], float]) -> None:
        self._jobs, self._cluster_usd = jobs, cluster_usd  # what the cluster has cost so far
        self.row = jobs.put(row)
        self._saved_at = time.monotonic()

    @property
    def job_id(self) -> str:
        return self.row.job_id

    def _save(self, row: JobRow) -> None:
        cost = self._cluster_usd() - row.cost_base_usd
        self.row = self._jobs.put(replace(row, cost_usd=max(cost, 0.0)))
        self._saved_at = time.monotonic()

    def save(self) -> None:
        """Write the row now (its cost as of now)."""
        self._save(self.row)

    def state(self) -> JobState:
        """The steps left and the job's cost now (the row's is saved every few seconds: a budget needs now)."""
        spent = self._cluster_usd() - self.row.cost_base_usd
        return JobState(self.row.total_steps - self.row.step, max(spent, 0.0))

    def save_if_due(self) -> None:
        if time.monotonic() - self._saved_at > SAVE_EVERY_S:
            self.save()

    def attempt_started(self, number: int, trainers: int) -> None:
        self._save(replace(self.row, world_size=trainers, message=f"attempt {number} running"))

    def total_steps(self, total: int) -> None:
        self._save(replace(self.row, total_steps=total))

    def progressed(self, step: int, loss: float) -> None:
        self.row = replace(self.row, step=max(step, self.row.step), loss=loss)
        self.save_if_due()

    def checkpointed(self, step: int) -> None:
        self._save(replace(self.row, checkpoint_step=step))

    def kept(self, newest: str, written_at: float) -> None:
        """A launched script's files were kept or put back: the newest of them is what of its work is safe."""
        if newest:
            self._save(replace(self.row, kept_file=newest, kept_at=written_at))

    def recovered(self, recovery: Recovery) -> None:
        self._save(
            replace(
                self.row,
                lost_steps=self.row.lost_steps + recovery.lost_steps,
                lost_s=round(self.row.lost_s + (recovery.lost_s or 0.0), 3),
            )
        )

    def ladder_said(self, text: str) -> None:
        """The recovery ladder's newest decision and why (`deepvm status` shows it)."""
        self._save(replace(self.row, ladder=text))

    def handing_over(self, text: str) -> None:
        """Control passes to a new head (training.control.handover): the row it takes says so."""
        self._save(replace(self.row, message=text))

    def relaunched(self) -> None:
        self._save(replace(self.row, restarts=self.row.restarts + 1))

    def ended(self, status: JobStatus, message: str) -> None:
        """The job stopped, failed or was cancelled: final (a stopped or failed one may be resumed)."""
        self._save(replace(self.row, status=status, message=message))

    def completed(self, metrics: RunMetrics, out: Path) -> None:
        self._save(
            replace(
                self.row,
                status=JobStatus.COMPLETED,
                step=metrics.steps,
                loss=metrics.final_loss,
                message=f"completed; model and metrics in {out}",
            )
        )


def train_result(
    row: JobRow,
    cluster: str,
    metrics: RunMetrics,
    attempts: list[AttemptRecord],
    recoveries: list[Recovery],
    wall_s: float,
) -> TrainResult:
    """A completed job's result, from its row, its last run's metrics and what its controller recorded."""
    return TrainResult(
        job_id=row.job_id,
        cluster=cluster,
        status=JobStatus.COMPLETED,
        steps=metrics.steps,
        total_steps=metrics.total_steps,
        final_loss=metrics.final_loss,
        synthetic=metrics.synthetic,
        restarts=row.restarts,
        lost_steps=row.lost_steps,
        cost_usd=round(row.cost_usd, 6),
        wall_s=round(wall_s, 2),
        out_dir=row.out_dir,
        attempts=attempts,
        recoveries=recoveries,
        lost_s=row.lost_s,
    )
