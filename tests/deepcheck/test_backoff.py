"""The service loop's backoff (deepcheck.transport.Backoff): how long a rank sleeps between polls."""

from __future__ import annotations

import pytest

from deepcheck import transport
from deepcheck.transport import BUSY_CAP, IDLE_CAP, REST_AFTER_S, REST_CAP, Backoff


class Clock:
    """time.monotonic for the module, and a bell whose sleep advances it and records each sleep."""

    def __init__(self) -> None:
        self.now = 100.0
        self.sleeps: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


@pytest.fixture
def clock(monkeypatch) -> Clock:
    clock = Clock()
    monkeypatch.setattr(transport.time, "monotonic", lambda: clock.now)
    return clock


def idle_until(backoff: Backoff, clock: Clock, seconds: float, cap: float = IDLE_CAP) -> None:
    end = clock.now + seconds
    while clock.now < end:
        backoff.pause(False, cap)


def test_a_resting_loop_sleeps_rest_cap_once_quiet_for_half_a_second_and_is_hot_again_after_progress(clock):
    backoff = Backoff(clock, rest=True)
    idle_until(backoff, clock, REST_AFTER_S)
    assert max(clock.sleeps) == IDLE_CAP and clock.sleeps[0] < IDLE_CAP  # grows from microseconds to 2 ms
    backoff.pause(False)
    assert clock.sleeps[-1] == REST_CAP
    backoff.pause(True)
    backoff.pause(False)
    assert clock.sleeps[-1] < IDLE_CAP  # progress: the next quiet spell starts hot again


def test_a_due_transfer_end_keeps_the_loop_hot_and_restarts_the_quiet_clock(clock):
    backoff = Backoff(clock, rest=True)
    idle_until(backoff, clock, REST_AFTER_S)
    backoff.pause(False, BUSY_CAP)
    assert clock.sleeps[-1] == BUSY_CAP
    backoff.pause(False)
    assert clock.sleeps[-1] == IDLE_CAP  # quiet again, but not for half a second yet


def test_without_rest_a_backoff_never_sleeps_past_its_cap(clock):
    backoff = Backoff(clock)
    idle_until(backoff, clock, 5 * REST_AFTER_S)
    assert max(clock.sleeps) == IDLE_CAP
