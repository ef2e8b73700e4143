"""The stall watch: when silence from a running job means a node hangs."""

from __future__ import annotations

from training.control.stall import StallWatch


def test_startup_gets_its_own_long_limit_before_the_first_step():
    watch = StallWatch(startup_s=300.0)
    watch.started(1000.0)
    assert watch.stalled(1000.0 + 299.0) is None
    assert watch.stalled(1000.0 + 301.0) == 301.0


def test_adaptive_limit_follows_the_slowest_recent_gap_with_a_floor():
    watch = StallWatch(floor_s=60.0, factor=10.0)
    watch.started(0.0)
    for at in (5.0, 7.0, 9.0, 11.0):  # 2 s between progress reports
        watch.progressed(at)
    assert watch.limit_s() == 60.0  # 10 x 2 s is below the floor
    assert watch.stalled(11.0 + 59.0) is None and watch.stalled(11.0 + 61.0) is not None
    watch.progressed(20.0)  # one 9 s gap (a checkpoint save): the limit grows with it
    assert watch.limit_s() == 90.0
    assert watch.stalled(20.0 + 85.0) is None


def test_old_gaps_leave_the_window():
    watch = StallWatch(floor_s=1.0, factor=10.0, window=3)
    watch.started(0.0)
    watch.progressed(0.0)
    watch.progressed(30.0)  # a slow first gap
    for at in (31.0, 32.0, 33.0):
        watch.progressed(at)
    assert watch.limit_s() == 10.0


def test_a_fixed_limit_applies_after_the_first_step_and_a_new_attempt_restarts_the_clock():
    watch = StallWatch(fixed_s=15.0, startup_s=600.0)
    watch.started(0.0)
    assert watch.limit_s() == 600.0
    watch.progressed(100.0)
    assert watch.stalled(114.0) is None and watch.stalled(116.0) == 16.0
    watch.started(200.0)  # relaunched: startup again, from the launch
    assert watch.stalled(700.0) is None and watch.limit_s() == 600.0
