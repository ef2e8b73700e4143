"""The controller's decision core (training/control/attempts.py), outcome by outcome, without SSH or mpirun."""

from __future__ import annotations

import pytest

from training.control.attempts import (
    Action,
    Failures,
    classify,
    decide,
    fold_in_now,
    progressed,
)
from training.control.scripterror import ScriptError
from training.shared.events import EndStatus
from training.shared.progress import Outcome


@pytest.mark.parametrize(
    ("returncode", "end_status", "user_stopped", "expected"),
    [
        (0, EndStatus.COMPLETED, False, Outcome.COMPLETED),
        (0, EndStatus.COMPLETED, True, Outcome.COMPLETED),  # it finished before the stop took effect
        (0, EndStatus.STOPPED, True, Outcome.INTERRUPTED),  # the user's stop wins over the ranks' clean stop
        (137, None, True, Outcome.INTERRUPTED),  # a second Ctrl-C (or cancel --now) killed it
        (0, EndStatus.STOPPED, False, Outcome.STOPPED),  # a notice or a fold-in: trainers flushed and left
        (0, None, False, Outcome.FAILED),  # mpirun exited 0 but trainer 0 never said how it ended
        (1, EndStatus.STOPPED, False, Outcome.FAILED),  # a rank failed while stopping
        (255, None, False, Outcome.FAILED),  # lost the connection to the head
        (143, EndStatus.COMPLETED, False, Outcome.FAILED),  # killed after trainer 0 finished: outputs unsure
    ],
)
def test_classify(returncode, end_status, user_stopped, expected):
    assert classify(returncode, end_status, user_stopped) is expected


TWO = Failures(2, ScriptError(0, ("ValueError: bad batch",), 1))  # two failures in a row before this attempt
EXIT_3 = ScriptError(0, ("deepvm rank: exit3.py exited with 3",), 3)


def test_completed_finishes_and_resets_failures():
    decision = decide(Outcome.COMPLETED, True, failures=TWO, max_failures=3, cancelling=False)
    assert decision.action is Action.FINISH and decision.failures == Failures()


@pytest.mark.parametrize(("cancelling", "action"), [(True, Action.CANCEL), (False, Action.STOP)])
def test_interrupted_stops_or_cancels_and_keeps_the_count(cancelling, action):
    decision = decide(Outcome.INTERRUPTED, False, failures=TWO, max_failures=3, cancelling=cancelling)
    assert decision.action is action and decision.failures == TWO


def test_clean_stop_relaunches_at_once_even_without_progress():
    # a notice right after a relaunch: the trainers flushed before their first step; not a failure
    decision = decide(Outcome.STOPPED, made_progress=False, failures=TWO, max_failures=3, cancelling=False)
    assert decision.action is Action.RELAUNCH and decision.failures == Failures()


def test_failure_with_progress_recovers_and_resets_the_count():
    decision = decide(
        Outcome.FAILED, made_progress=True, failures=TWO, max_failures=3, cancelling=False, error=TWO.last
    )
    assert decision.action is Action.RECOVER and decision.failures == Failures()


def _row(*errors: ScriptError | None, max_failures: int = 3) -> list[tuple[Action, int, bool]]:
    """(action, failures in a row, repeated) after each of a row of failures without progress."""
    failures, seen = Failures(), []
    for error in errors:
        decision = decide(Outcome.FAILED, False, failures, max_failures, cancelling=False, error=error)
        failures = decision.failures
        seen.append((decision.action, failures.count, decision.repeated))
    return seen


def test_the_same_failure_twice_in_a_row_without_progress_gives_up_at_once():
    """Issue 23 point 2: `sys.exit(3)` at step 0 was tried three times."""
    assert _row(EXIT_3, EXIT_3) == [(Action.RECOVER, 1, False), (Action.GIVE_UP, 2, True)]
    same_again = ScriptError(0, ("deepvm rank: exit3.py exited with 3",), 3)  # read from another attempt's lines
    assert _row(EXIT_3, same_again)[-1] == (Action.GIVE_UP, 2, True)


def test_the_same_failure_from_another_rank_is_the_same():
    """Every rank of a script that exits at once fails alike; which reaches MPI_Abort first is a race."""
    assert _row(EXIT_3, ScriptError(1, EXIT_3.last_lines, 3))[-1] == (Action.GIVE_UP, 2, True)


def test_different_failures_are_retried_up_to_the_limit():
    other_code = ScriptError(0, EXIT_3.last_lines, 1)
    other_words = ScriptError(0, ("deepvm rank: exit3.py exited with 4",), 3)
    lost = ScriptError(None, ("ORTE has lost communication with a remote daemon.",), 1)
    assert _row(EXIT_3, other_code, other_words) == [
        (Action.RECOVER, 1, False),
        (Action.RECOVER, 2, False),
        (Action.GIVE_UP, 3, False),
    ]
    hang = ScriptError.of_hang("no progress within 60s", 137)
    assert _row(ScriptError(None, hang.last_lines, 137), hang)[-1] == (Action.RECOVER, 2, False)
    assert [a for a, _, _ in _row(lost, EXIT_3, lost, EXIT_3, max_failures=5)] == [Action.RECOVER] * 4
    assert _row(None, None)[-1] == (Action.RECOVER, 2, False)  # a cause not read is no evidence of sameness


def test_progress_or_a_clean_stop_between_two_same_failures_starts_the_row_again():
    failures = decide(Outcome.FAILED, False, Failures(), 3, cancelling=False, error=EXIT_3).failures
    failures = decide(Outcome.FAILED, True, failures, 3, cancelling=False, error=EXIT_3).failures  # it trained
    assert failures == Failures()
    decision = decide(Outcome.FAILED, False, failures, 3, cancelling=False, error=EXIT_3)
    assert decision.action is Action.RECOVER and decision.failures == Failures(1, EXIT_3)
    failures = decide(Outcome.STOPPED, False, decision.failures, 3, cancelling=False).failures
    assert decide(Outcome.FAILED, False, failures, 3, cancelling=False, error=EXIT_3).action is Action.RECOVER


def test_a_given_up_job_leads_with_the_scripts_own_cause_in_one_short_line():
    line = EXIT_3.given_up("trainer-5f5c0279", 2, repeated=True)
    assert line == (
        "exit3.py exited with 3 (rank 0 on trainer-5f5c0279, mpirun exit 3): the same failure in 2 "
        "attempts in a row, without a step: not retried"
    )
    long = ScriptError(None, ("x" * 700,), 1).given_up(None, 3, repeated=False)
    assert long.startswith("x" * 119 + "… (mpirun, mpirun exit 1): 3 attempts in a row failed") and len(long) < 200
    assert ScriptError(None, (), 137).cause == "no error output"


@pytest.mark.parametrize(
    ("first", "last", "expected"), [(-1, -1, False), (0, 0, False), (10, 10, False), (10, 11, True), (0, 5, True)]
)
def test_progressed(first, last, expected):
    assert progressed(first, last) is expected


@pytest.mark.parametrize(
    ("first", "last", "in_flight", "expected"),
    [
        (10, 12, False, True),  # training: fold the replacement in now
        (10, 10, False, False),  # still starting: wait for its first step
        (-1, -1, False, False),  # not started
        (10, 12, True, False),  # a recovery is in flight: one at a time
    ],
)
def test_fold_in_now(first, last, in_flight, expected):
    assert fold_in_now(first, last, in_flight) is expected
