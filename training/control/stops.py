"""How a job stops short of completing, as its controller finds out: `deepvm cancel` (a file the head's query
leaves), `--idle` and `--max-duration` (training/control/jobclock.py), the recovery ladder's budget stop, the
user's Ctrl-C, and the decisions after an attempt that end the job (attempts.decide). Each ends the job's row
with its status and raises what its callers (the CLI, the head's job service) tell apart.

The rule all share: while an attempt runs, a stop asks it to checkpoint and leave (or kills it: `cancel now`,
`--idle`, since a job that does not step cannot flush either) and the controller ends the job once it has;
between attempts, nothing runs that could checkpoint, so the job ends at once.
"""

from __future__ import annotations

import time

from provisioning.core.errors import JobFailed, StoppedByUser
from training.control.attempts import Action, CancelMode, Decision
from training.control.jobclock import JobClock, JobLimited, LimitKind, LimitReached
from training.control.jobrecord import JobRecord, TrainRequest
from training.control.nodes import ClusterNodes
from training.control.session import AttemptEnd, AttemptRun, AttemptSession
from training.shared.jobstore import JobStatus
from training.shared.progress import JobReporter


class TrainingStopped(StoppedByUser):
    """The user stopped the job (Ctrl-C); it can be resumed."""


class TrainingCancelled(StoppedByUser):
    """`deepvm cancel` stopped the job; it is final (a cancelled job is not resumed by its supervisor)."""

    exit_code = 0  # the job ended as its owner asked


class TrainingFailed(JobFailed):
    """The job cannot continue (no holder left, repeated failures without progress)."""


class StoppedAtLimit(TrainingStopped):
    """The job stopped with a checkpoint at a limit it was given (its budget, `--max-duration`): resumable, so it
    exits as any stopped job does (130, README "Exit codes"), whether its controller ran here or on its head
    (`ended_on_head`)."""


class BudgetReached(StoppedAtLimit):
    """The job stopped with a checkpoint before it would spend more than its budget; `--resume` continues."""


def ended_on_head(status: JobStatus, text: str) -> TrainingFailed | StoppedAtLimit:
    """What `deepvm train` raises for a managed job that its head ended failed or stopped (`text`: its log's
    last state), so that it exits as the same job under a local controller does: failed (`--idle` included)
    with JobFailed's 6, stopped at its budget or `--max-duration` with 130."""
    return StoppedAtLimit(text) if status is JobStatus.STOPPED else TrainingFailed(text)


class JobStops:
    """The stops asked of one job so far, and the checks that find them (see the module docstring)."""

    def __init__(
        self,
        request: TrainRequest,
        cluster: str,
        job: JobRecord,
        session: AttemptSession,
        nodes: ClusterNodes,
        report: JobReporter,
    ) -> None:
        self.request, self.cluster, self.job, self.session, self.nodes, self.report = (
            request,
            cluster,
            job,
            session,
            nodes,
            report,
        )
        self.clock = JobClock(request.timers)  # --idle, --max-duration
        self.cancel_mode: CancelMode | None = None  # once `deepvm cancel` asked
        self.limit: LimitReached | None = None  # once the job reached one of its limits
        self.budget: str | None = None  # the ladder's STOP (why), once asked of a running attempt

    @property
    def stopping(self) -> bool:
        """Whether the running attempt was asked to end for good (cancel, a limit): it is not relaunched."""
        return self.cancel_mode is not None or self.limit is not None

    def check_cancel(self, run: AttemptRun | None) -> None:
        """`deepvm cancel` leaves a file: stop as on Ctrl-C (checkpoint, then leave), or at once with "now"."""
        cancel_file = self.request.cancel_file
        if self.cancel_mode is not None or cancel_file is None or not cancel_file.exists():
            return
        self.cancel_mode = CancelMode.requested(cancel_file.read_text())
        self.report.note(f"cancel requested ({self.cancel_mode})")
        if run is None:  # between attempts: nothing runs that could checkpoint
            self.job.ended(JobStatus.CANCELLED, f"cancelled ({self.cancel_mode})")
            raise TrainingCancelled(f"cancelled at step {self.job.row.step}")
        if self.cancel_mode is CancelMode.NOW:
            self.session.kill_by_user(run)
        else:
            self.session.stop_by_user(run)

    def check_limits(self, run: AttemptRun | None, waiting_for: str = "") -> None:
        """--idle and --max-duration: a limit reached stops the running attempt (max-duration after a
        checkpoint, idle at once) or, between attempts, ends the job now."""
        if self.limit is not None or (reached := self.clock.reached(waiting_for)) is None:
            return
        self.limit = reached
        self.report.note(f"{reached.text}: ending the job")
        if run is None:
            self._limited(reached)
        elif reached.kind is LimitKind.MAX_DURATION:
            self.session.stop_by_user(run)
        else:
            self.session.kill_by_user(run)

    def budget_reached(self, why: str) -> BudgetReached:
        """The job stops before its budget (the stand-ins it holds go: they bill for its deadline only)."""
        self.nodes.release_stand_ins()
        row = self.job.row
        self.job.ended(JobStatus.STOPPED, f"stopped before its budget: {why}")
        return BudgetReached(
            f"stopped {row.stopped_at(time.time())} before the "
            f"budget: {why}; {self._resume_with(' --budget USD')} with more continues"
        )

    def after_attempt(self, decision: Decision, end: AttemptEnd) -> None:
        """Raise how the job ends, for the stops asked during the attempt and the decisions that end it here."""
        row, action = self.job.row, decision.action
        if self.budget is not None:
            raise self.budget_reached(self.budget)
        if action is Action.CANCEL and self.limit is not None:
            self._limited(self.limit)
        if action is Action.CANCEL:
            self.job.ended(JobStatus.CANCELLED, f"cancelled ({self.cancel_mode})")
            raise TrainingCancelled(f"cancelled {row.stopped_at(time.time())}")
        if action is Action.STOP:
            self.job.ended(JobStatus.STOPPED, "stopped by the user")
            raise TrainingStopped(f"stopped {row.stopped_at(time.time())}; {self._resume_with()} continues")
        if action is Action.GIVE_UP:
            raise TrainingFailed(end.error.given_up(end.error_node, decision.failures.count, decision.repeated))

    def _limited(self, reached: LimitReached) -> None:
        self.job.ended(reached.status, reached.text)
        if reached.status is JobStatus.STOPPED:
            raise StoppedAtLimit(reached.text)
        raise JobLimited(reached)

    def _resume_with(self, flags: str = "") -> str:
        """The command that continues the job where it stopped."""
        return f"`deepvm train {self.request.job_path} --cluster {self.cluster} --controller local --resume{flags}`"
