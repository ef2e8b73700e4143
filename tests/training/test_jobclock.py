"""The job's limits in time (training/control/jobclock.py): --idle counts from the last step, --max-duration from
the job's start, max-duration wins, and the reason says what was waited for."""

from __future__ import annotations

from training.control.jobclock import JobClock, JobTimers, LimitKind
from training.shared.jobstore import JobStatus


class Clocks:
    """A wall and a monotonic clock that only the test moves (both at once)."""

    def __init__(self) -> None:
        self.wall, self.mono = 1_000_000.0, 50.0

    def advance(self, seconds: float) -> None:
        self.wall += seconds
        self.mono += seconds


def _clock(clocks: Clocks, **timers: float) -> JobClock:
    return JobClock(JobTimers(**timers), wall=lambda: clocks.wall, mono=lambda: clocks.mono)


def test_no_limits_never_end_the_job():
    clocks = Clocks()
    clock = _clock(clocks)
    clocks.advance(10**7)
    assert clock.reached() is None


def test_idle_counts_from_the_last_step_and_ends_the_job_as_failed():
    clocks = Clocks()
    clock = _clock(clocks, idle_s=600)
    clocks.advance(599)
    assert clock.reached() is None
    clock.stepped()
    clocks.advance(599)
    assert clock.reached() is None
    clocks.advance(1)
    reached = clock.reached()
    assert reached is not None and (reached.kind, reached.status) == (LimitKind.IDLE, JobStatus.FAILED)
    assert reached.text == "no step was trained for 10 min (--idle)"


def test_idle_while_waiting_for_a_node_says_nothing_could_be_bought():
    clocks = Clocks()
    clock = _clock(clocks, idle_s=120)
    clocks.advance(120)
    reached = clock.reached(waiting_for="trainer")
    assert reached is not None
    assert reached.text == "no trainer could be bought within the plan's cap, budget and deadline for 2 min (--idle)"


def test_max_duration_counts_from_the_jobs_start_across_restarts_and_stops_it_resumable():
    clocks = Clocks()
    started = clocks.wall - 3000  # the job began 50 minutes before this (restarted) controller
    clock = _clock(clocks, max_duration_s=3600, started_wall=started, idle_s=60)
    clocks.advance(599)
    assert clock.reached() is not None and clock.reached().kind is LimitKind.IDLE  # idle first: 599 s > 60 s
    clock.stepped()
    clocks.advance(1)
    reached = clock.reached()
    assert reached is not None and (reached.kind, reached.status) == (LimitKind.MAX_DURATION, JobStatus.STOPPED)
    assert reached.text == "stopped at its time limit (--max-duration 1 h)"


def test_max_duration_wins_over_idle_when_both_are_reached():
    clocks = Clocks()
    clock = _clock(clocks, max_duration_s=60, idle_s=60)
    clocks.advance(61)
    assert clock.reached().kind is LimitKind.MAX_DURATION
