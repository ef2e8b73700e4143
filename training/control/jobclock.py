"""The job's own limits in time, as the controller keeps them: `--idle` and `--max-duration`.

Why the controller and not a timer beside it: only the controller knows when a *step* was trained, and a
stuck job burns CPU (a loop waiting in an allreduce, a script that spins) while training nothing, so
idleness is measured in steps, never in load. The rules (tested in tests/training/test_jobclock.py, and
through the real controller in tests/training/test_controller.py):

- `--idle N` (minutes): no step for N minutes ends the job as failed. The clock runs from this
  controller's start (a restarted controller gives the job its N minutes again) and is reset by every step
  trainer 0 reports. It runs on through relaunches and through waiting for a replacement, so a job that
  cannot get nodes within the plan's cap, budget and deadline ends too, instead of billing its on-demand
  nodes while it waits; the stall watch (training/control/stall.py) restarts a hung attempt long before,
  and `--idle` is what ends a job that keeps not stepping.
- `--max-duration H` (hours): the job stops after H hours from its start, with a checkpoint flushed at its
  current step (as `deepvm cancel` does), as STOPPED: resumable, on this cluster or any other
  (`deepvm train JOB.yaml --resume JOB`). It counts from the job's start, across controller restarts.
- A limit reached while an attempt runs stops the attempt: max-duration cleanly (the trainers flush and
  leave), idle at once (a job that does not step cannot flush either; its newest checkpoint stands).
  Between attempts the job ends at once.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

from provisioning.core.errors import JobFailed
from training.shared.jobstore import JobStatus


class LimitKind(str, Enum):
    IDLE = "idle"  # no step for --idle minutes
    MAX_DURATION = "max-duration"  # the job ran --max-duration hours

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class JobTimers:
    """The limits a job runs under (None: none)."""

    idle_s: float | None = None
    max_duration_s: float | None = None
    started_wall: float | None = None  # time.time() at the job's start; None: this controller's start


@dataclass(frozen=True)
class LimitReached:
    """A limit the job reached: how it ends, and why in a person's words."""

    kind: LimitKind
    status: JobStatus  # FAILED (idle) or STOPPED (max-duration: resumable)
    text: str


class JobLimited(JobFailed):
    """The job failed at `--idle` (one stopped at `--max-duration` is resumable: it ends as stops.StoppedAtLimit,
    and exits as any stopped job does)."""

    def __init__(self, reached: LimitReached) -> None:
        super().__init__(reached.text)
        self.reached = reached


class JobClock:
    """The job's limits against the clocks; see the module docstring."""

    def __init__(
        self, timers: JobTimers, wall: Callable[[], float] = time.time, mono: Callable[[], float] = time.monotonic
    ) -> None:
        self.timers, self._wall, self._mono = timers, wall, mono
        self.started_wall = timers.started_wall if timers.started_wall is not None else wall()
        self.last_step = mono()

    def stepped(self) -> None:
        """Trainer 0 reported a step."""
        self.last_step = self._mono()

    def reached(self, waiting_for: str = "") -> LimitReached | None:
        """The limit reached now, if any (max-duration first: it ends the job resumable). `waiting_for`: what
        the controller waits for between attempts ("a trainer", "a checkpoint holder"), said in the reason."""
        max_s, idle_s = self.timers.max_duration_s, self.timers.idle_s
        if max_s is not None and self._wall() - self.started_wall >= max_s:
            return LimitReached(
                LimitKind.MAX_DURATION, JobStatus.STOPPED, f"stopped at its time limit (--max-duration {_hours(max_s)})"
            )
        if idle_s is not None and self._mono() - self.last_step >= idle_s:
            why = (
                f"no {waiting_for} could be bought within the plan's cap, budget and deadline"
                if waiting_for
                else "no step was trained"
            )
            return LimitReached(LimitKind.IDLE, JobStatus.FAILED, f"{why} for {_minutes(idle_s)} (--idle)")
        return None


def _hours(seconds: float) -> str:
    return f"{seconds / 3600:g} h"


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:g} min"
