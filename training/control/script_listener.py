"""The controller's ear for a launched script (run.calls_step: false, training.node.launched): what only such a job
says, apart from the controller's own listening (training.control.controller).

- its trainers' Start: the script runs again, which is the end of a recovery for a script that reports no steps;
- an adapter's Resumed (training.integrations): the step its framework resumed at, and the job's total;
- its kept files (Kept): kept, they are what a relaunch resumes from, so the job's checkpoint; flushed, the
  recovery's checkpoint; put back, its restore, and the work since they were written is what the relaunch redoes;
- while it reports no steps, its progress as the controller knows it (training.control.script_view).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from training.control.attempts import progressed
from training.control.jobrecord import JobRecord
from training.control.recovery import RecoveryLog
from training.control.scalar_sink import MetricSinks
from training.control.script_view import ScriptView, kept_note
from training.control.session import AttemptEnd, AttemptRun
from training.shared.events import Event, Kept, KeptHow, Resumed
from training.shared.jobspec import JobSpec
from training.shared.progress import JobReporter, Progress, Recovery


class ScriptListener:
    """See the module docstring; every call is the controller's, from its listening thread."""

    def __init__(
        self,
        spec: JobSpec,
        job: JobRecord,
        recovery: RecoveryLog,
        scalars: MetricSinks,
        report: JobReporter,
        recovered: Callable[[Recovery], None],
    ) -> None:
        self.launches_script = not spec.calls_step
        self.job, self.recovery, self.scalars, self.report, self.recovered = job, recovery, scalars, report, recovered
        self.view = ScriptView()
        self.kept_in = 0  # the newest attempt that kept (or flushed) the script's files

    def launched(self) -> None:
        self.view.launched()

    def started(self, at: float, run: AttemptRun) -> None:
        """Trainer 0's Start at `at`."""
        if self.launches_script:
            self.view.started(at)
            if (recovery := self.recovery.script_running(run.number, run.trainers, at)) is not None:
                self.recovered(recovery)

    def heard(self, event: Event, at: float, run: AttemptRun) -> bool:
        """Whether `event` is one only a launched script's trainer 0 says (then taken here)."""
        if isinstance(event, Resumed) and event.rank == 0:
            self.resumed(event)
        elif isinstance(event, Kept) and event.rank == 0:
            self.kept(event, at, run)
        else:
            return False
        return True

    def resumed(self, event: Resumed) -> None:
        self.job.total_steps(event.total_steps)
        self.scalars.launched(event.step)
        if event.step:
            self.report.note(f"the script's framework resumed at step {event.step}")

    def kept(self, event: Kept, at: float, run: AttemptRun) -> None:
        self.view.kept_files(event)
        self.job.kept(event.newest, event.written_at)
        if (note := kept_note(event, time.time())) is not None:
            self.report.note(note)
        if event.how is KeptHow.RESTORED:
            self.recovery.put_back(at, event.seconds, event.written_at)
            return
        self.job.checkpointed(max(run.last_step, 0))
        self.kept_in = run.number
        if event.how is KeptHow.FLUSHED:
            self.recovery.checkpointed(at)

    def progressed(self, end: AttemptEnd) -> bool:
        """Whether the attempt made progress: trained a step, or, for a launched script, kept newer files of it (a
        script that reports no steps then made progress, and its failure is no failure without progress:
        attempts.decide gives up after max_failures of those in a row, and nodes lost hours apart, each after
        the script had saved, ended such a job)."""
        return progressed(end.first_step, end.last_step) or self.kept_in == end.number

    def tick(self, run: AttemptRun) -> None:
        """The progress record of a script that reports no steps (yet), when one is due."""
        if not self.launches_script or run.startup_s is not None:
            return
        script = self.view.due(run.last_line, time.monotonic(), time.time())
        if script is not None:
            row = self.job.row
            self.report.progress(
                Progress(
                    step=max(run.last_step, 0),
                    total_steps=row.total_steps,
                    epoch=None,
                    loss=float("nan"),
                    samples_per_s=0.0,
                    world_size=run.trainers,
                    cost_usd=row.cost_usd,
                    synthetic=False,
                    script=script,
                )
            )
