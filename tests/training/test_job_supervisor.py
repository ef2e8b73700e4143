"""The head's supervisor between crashes of the controller (training/head/job_supervisor.py)."""

from __future__ import annotations

from training.head.job_supervisor import _CRASH_WINDOW_S, _MAX_CRASHES, crash_line, restart_delay


def test_restarts_back_off_and_the_job_is_still_given_up_on_within_the_window():
    """Issue 40: a controller crashing on a full disk was restarted every second and given up on after 12 s."""
    delays = [restart_delay(n) for n in range(1, _MAX_CRASHES)]
    assert delays == [1.0, 2.0, 4.0, 8.0]
    assert restart_delay(20) == 60.0 and sum(delays) < _CRASH_WINDOW_S


def test_the_crash_is_told_by_the_last_line_the_controller_wrote(tmp_path):
    output = tmp_path / "service.out"
    assert crash_line(output) == ""  # none written yet
    output.write_text("x" * 9000 + "\nTraceback (most recent call last):\n  ...\nOSError: [Errno 28] No space left\n\n")
    assert crash_line(output) == "OSError: [Errno 28] No space left"
