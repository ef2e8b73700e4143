"""The stall watch: when silence from a running job means a node hangs, or the job hangs before its first step."""

from __future__ import annotations

from training.control.stall import Limit, Stall, StallWatch
from training.shared.stallspec import DEFAULT_STARTUP_GRACE_S, StallSpec


def test_startup_gets_its_own_limit_before_the_first_step():
    watch = StallWatch(startup_s=300.0)
    watch.started(1000.0)
    assert watch.stalled(1000.0 + 299.0) is None
    assert watch.stalled(1000.0 + 301.0) == Stall(301.0, 300.0, Limit.STARTUP)


def test_adaptive_limit_follows_the_slowest_recent_gap_with_a_floor():
    watch = StallWatch(floor_s=60.0, factor=10.0)
    watch.started(0.0)
    for step, at in enumerate((5.0, 7.0, 9.0, 11.0), start=1):  # 2 s between progress reports
        watch.progressed(at, step)
    assert watch.limit_s() == 60.0  # 10 x 2 s is below the floor
    assert watch.stalled(11.0 + 59.0) is None and watch.stalled(11.0 + 61.0) is not None
    watch.progressed(20.0, 5)  # one 9 s gap (a checkpoint save): the limit grows with it
    assert watch.limit_s() == 90.0
    assert watch.stalled(20.0 + 85.0) is None


def test_old_gaps_leave_the_window():
    watch = StallWatch(floor_s=1.0, factor=10.0, window=3)
    watch.started(0.0)
    watch.progressed(0.0, 1)
    watch.progressed(30.0, 2)  # a slow first gap
    for step, at in enumerate((31.0, 32.0, 33.0), start=3):
        watch.progressed(at, step)
    assert watch.limit_s() == 10.0


def test_the_stall_timeout_and_the_startup_grace_are_independent_and_a_relaunch_starts_over():
    """`--stall-timeout 20` used to leave a hang before the first step to a fixed 900 s (issue 23 point 1)."""
    watch = StallWatch(fixed_s=15.0, startup_s=40.0)
    watch.started(0.0)
    assert watch.limit_s() == 40.0 and watch.stalled(41.0) == Stall(41.0, 40.0, Limit.STARTUP)
    watch.progressed(30.0, 1)
    assert watch.stalled(44.0) is None and watch.stalled(46.0) == Stall(16.0, 15.0, Limit.PROGRESS)
    watch.started(200.0)  # relaunched: startup again, from the launch
    assert watch.stalled(239.0) is None and watch.limit_s() == 40.0
    assert StallWatch(fixed_s=600.0, startup_s=30.0).limit_s() == 30.0  # a long stall timeout lends it nothing


def test_progress_is_a_newer_step_and_a_checkpoint_counts_only_as_the_step_it_was_taken_at():
    """A restored attempt that only flushes its restored step, or repeats a step it reported, is not training."""
    watch = StallWatch(startup_s=50.0, fixed_s=10.0)
    watch.started(0.0)
    watch.resumes_at(20)  # trainer 0 restored step 20
    watch.progressed(30.0, 20)  # a flush of the restored step (a notice before the first step): no step trained
    assert not watch.stepping and watch.stalled(51.0) is not None
    watch.progressed(40.0, 25)  # a checkpoint of step 25 before step 25 was reported: progress
    assert watch.stepping and watch.stalled(49.0) is None
    watch.progressed(45.0, 25)  # the report of step 25, and a flush of it (a stop, a recommendation)
    assert watch.stalled(51.0) == Stall(11.0, 10.0, Limit.PROGRESS)


def test_the_job_files_stall_section_with_the_flags_in_its_place():
    assert StallWatch.of(StallSpec(), None, None).startup_s == DEFAULT_STARTUP_GRACE_S == 300.0
    in_file = StallSpec(timeout=120, startup_grace=600)
    watch = StallWatch.of(in_file, None, None)
    assert (watch.fixed_s, watch.startup_s) == (120, 600)
    watch = StallWatch.of(in_file, 30.0, 45.0)
    assert (watch.fixed_s, watch.startup_s) == (30.0, 45.0)
    assert StallWatch.of(StallSpec(), None, None).silence_s is None  # output silence is opt-in
    assert StallWatch.of(StallSpec(silence=1800), None, None).silence_s == 1800


def test_a_stall_says_whether_the_job_never_stepped():
    assert Stall(301.4, 300.0, Limit.STARTUP).text() == (
        "no first step 301s after the launch (start-up grace 300s): the job hangs before training; stopping the "
        "job (stall.startup_grace or --startup-grace allows a slower start)"
    )
    assert Stall(61.0, 60.0, Limit.PROGRESS).text() == "no progress for 61s (limit 60s): a node hangs; stopping the job"
    # its cause names the limit, not the seconds it was found at: two hangs alike are the same failure
    assert (
        Stall(301.4, 300.0, Limit.STARTUP).cause
        == Stall(302.9, 300.0, Limit.STARTUP).cause
        == ("no first step within the start-up grace of 300s")
    )


def test_once_trainer_0_ended_its_run_the_job_has_the_leave_grace_to_exit_whatever_its_steps_took():
    """CI once killed a completed run 60 s after its last step (10 x its gaps, at the floor): after End no step
    comes, and the last checkpoint's L2 and L3 settle before the ranks leave, which the steps' pace says nothing of."""
    watch = StallWatch(floor_s=60.0, factor=10.0, ending_s=120.0)
    watch.started(0.0)
    for step in range(1, 11):
        watch.progressed(float(step), step)  # 1 s a step: the limit is 60 s
    watch.ended(12.0)
    watch.ended(50.0)  # a second End (another trainer's, a repeat) moves nothing
    assert watch.limit_s() == 120.0 and watch.stalled(12.0 + 119.0) is None
    assert watch.stalled(12.0 + 121.0) == Stall(121.0, 120.0, Limit.LEAVING)
    watch.started(200.0)  # a relaunch trains again: the steps' limits again
    assert watch.ended_at is None and watch.limit_s() == watch.startup_s


def test_a_stall_on_the_way_out_says_so():
    stall = Stall(121.0, 120.0, Limit.LEAVING)
    assert stall.text() == (
        "no exit 121s after trainer 0 ended its run (limit 120s): a node hangs on the way out; stopping the job"
    )
    assert stall.cause == Stall(130.0, 120.0, Limit.LEAVING).cause == "no exit within 120s of the run's end"


def test_a_script_without_ctx_step_meets_no_step_limit_its_job_file_did_not_ask_for():
    """Issue 36 finding 1: every unchanged torchrun script (`run: {calls_step: false}`) was killed at 300 s, by the
    start-up grace of a first step it never takes."""
    watch = StallWatch.of(StallSpec(), None, None, calls_step=False)
    watch.started(0.0)
    assert watch.limit_s() is None and watch.stalled(DEFAULT_STARTUP_GRACE_S + 1.0) is None
    assert watch.stalled(7 * 86_400.0) is None  # a silent week: nothing asked, nothing kills
    for step, at in enumerate((10.0, 11.0, 12.0), start=1):  # an adapter's steps: a pace the script never promised
        watch.progressed(at, step)
    assert watch.limit_s() is None and watch.stalled(12.0 + 86_400.0) is None
    watch.ended(100_000.0)  # the leave grace still applies
    assert watch.stalled(100_000.0 + 121.0) == Stall(121.0, 120.0, Limit.LEAVING)
    asked = StallWatch.of(StallSpec(timeout=120, startup_grace=600), None, None, calls_step=False)
    assert (asked.startup_s, asked.fixed_s) == (600, 120)  # what its job file asks for applies
    flags = StallWatch.of(StallSpec(), 30.0, 45.0, calls_step=False)
    assert (flags.startup_s, flags.fixed_s) == (45.0, 30.0)  # and so do deepvm train's flags


def test_the_output_silence_limit_counts_from_the_launch_or_any_ranks_last_line():
    watch = StallWatch.of(StallSpec(silence=1800), None, None, calls_step=False)
    watch.started(0.0)
    assert watch.stalled(1800.0) is None and watch.stalled(1801.0) == Stall(1801.0, 1800.0, Limit.SILENCE)
    watch.heard(1000.0)
    watch.heard(990.0)  # a line read before it (another stream's reader) sets no clock back
    assert watch.stalled(2800.0) is None and watch.stalled(2801.0) == Stall(1801.0, 1800.0, Limit.SILENCE)
    watch.started(5000.0)  # a relaunch: silence from its own launch
    assert watch.stalled(6799.0) is None
    watch.ended(6700.0)  # after End only the leave grace: the last checkpoint may settle without a line
    assert watch.stalled(6700.0 + 119.0) is None
    assert watch.stalled(6700.0 + 121.0) == Stall(121.0, 120.0, Limit.LEAVING)


def test_beside_the_step_limits_the_output_silence_limit_applies_and_the_first_to_run_out_is_said():
    watch = StallWatch.of(StallSpec(silence=100), None, None)  # deepvm's worker keeps its step limits
    watch.started(0.0)
    watch.heard(250.0)
    assert watch.stalled(301.0) == Stall(301.0, 300.0, Limit.STARTUP)  # 51 s of silence is within its limit
    watch.started(1000.0)
    assert watch.stalled(1101.0) == Stall(101.0, 100.0, Limit.SILENCE)  # silence ran out long before the grace
    assert watch.stalled(1400.0) == Stall(400.0, 100.0, Limit.SILENCE)  # both over: silence ran out first
    watch.heard(1390.0)
    assert watch.stalled(1400.0) == Stall(400.0, 300.0, Limit.STARTUP)


def test_a_silence_stall_says_no_rank_printed_and_which_key_allows_more():
    stall = Stall(1801.4, 1800.0, Limit.SILENCE)
    assert stall.text() == (
        "no output line from any rank for 1801s (stall.silence 1800s): the script or a node hangs; "
        "stopping the job (a larger stall.silence allows a longer one)"
    )
    assert stall.cause == Stall(1830.0, 1800.0, Limit.SILENCE).cause == "no output line within stall.silence of 1800s"
