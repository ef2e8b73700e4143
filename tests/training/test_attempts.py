"""The controller's decision core (training/control/attempts.py), outcome by outcome, without SSH or mpirun."""

from __future__ import annotations

import pytest

from training.control.attempts import (
    Action,
    can_continue_without_holders,
    classify,
    decide,
    fold_in_now,
    nodes_to_buy,
    progressed,
)
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


def test_completed_finishes_and_resets_failures():
    assert decide(Outcome.COMPLETED, True, failures=2, max_failures=3, cancelling=False).action is Action.FINISH


@pytest.mark.parametrize(("cancelling", "action"), [(True, Action.CANCEL), (False, Action.STOP)])
def test_interrupted_stops_or_cancels_and_keeps_the_count(cancelling, action):
    decision = decide(Outcome.INTERRUPTED, False, failures=1, max_failures=3, cancelling=cancelling)
    assert decision.action is action and decision.failures == 1


def test_clean_stop_relaunches_at_once_even_without_progress():
    # a notice right after a relaunch: the trainers flushed before their first step; not a failure
    decision = decide(Outcome.STOPPED, made_progress=False, failures=2, max_failures=3, cancelling=False)
    assert decision.action is Action.RELAUNCH and decision.failures == 0


def test_failure_with_progress_recovers_and_resets_the_count():
    decision = decide(Outcome.FAILED, made_progress=True, failures=2, max_failures=3, cancelling=False)
    assert decision.action is Action.RECOVER and decision.failures == 0


def test_failures_without_progress_give_up_at_the_limit():
    failures, actions = 0, []
    for _ in range(3):
        decision = decide(Outcome.FAILED, made_progress=False, failures=failures, max_failures=3, cancelling=False)
        failures = decision.failures
        actions.append(decision.action)
    assert actions == [Action.RECOVER, Action.RECOVER, Action.GIVE_UP] and failures == 3


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


@pytest.mark.parametrize(
    ("planned", "usable", "coming", "expected"), [(3, 3, 0, 0), (3, 2, 0, 1), (3, 1, 1, 1), (3, 0, 5, 0), (1, 0, 0, 1)]
)
def test_nodes_to_buy(planned, usable, coming, expected):
    assert nodes_to_buy(planned, usable, coming) == expected


def test_without_holders_only_s3_keeps_the_checkpoints():
    assert can_continue_without_holders(["l1", "l2", "l3"])
    assert not can_continue_without_holders(["l1", "l2"])
