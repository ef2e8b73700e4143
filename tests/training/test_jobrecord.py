"""Which job a controller runs (training/control/jobrecord.py: choose_job), pure: a new one, the one a user
resumes, or the one a restarted controller finds; and the job's row as it changes."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from provisioning.core.errors import InputError
from training.control.jobrecord import JobRecord, TrainRequest, choose_job, fresh_row
from training.shared.jobstore import JobRow, JobStatus, JobStore
from training.shared.progress import RecoveryReason

REQUEST = TrainRequest(Path("/jobs/fake.yaml"), "c1", "python3")


def _row(job_id: str, status: JobStatus, step: int = 12, restarts: int = 0, name: str = "fake") -> JobRow:
    return replace(fresh_row(REQUEST, name, 40, "c1", job_id, 0.5), status=status, step=step, restarts=restarts)


def _new(job_id: str) -> JobRow:
    return fresh_row(REQUEST, "fake", 40, "c1", job_id, 0.5)


def test_a_new_job_starts_afresh_and_names_an_unfinished_earlier_run():
    earlier = _row("fake-1", JobStatus.STOPPED)
    choice = choose_job(REQUEST, "fake", None, [earlier], _new)
    assert choice.resumed is None and choice.row.status is JobStatus.RUNNING and choice.row.step == 0
    assert choice.row.job_id.startswith("fake-2") and choice.row.total_steps == 40
    assert choice.note == (
        "an earlier run of fake (fake-1) ended at step 12; starting afresh (`--resume` would continue it)"
    )
    assert choose_job(REQUEST, "fake", None, [_row("fake-1", JobStatus.COMPLETED)], _new).note == ""


def test_a_job_id_given_by_the_client_is_used():
    choice = choose_job(replace(REQUEST, job_id="fake-7"), "fake", None, [], _new)
    assert choice.row.job_id == "fake-7" and choice.resumed is None


def test_a_stored_job_of_the_given_id_was_a_controller_that_restarted():
    known = _row("fake-7", JobStatus.RUNNING, step=30, restarts=2)
    choice = choose_job(replace(REQUEST, job_id="fake-7"), "fake", known, [known], _new)
    assert choice.resumed is RecoveryReason.CONTROLLER_RESTART
    assert (choice.row.restarts, choice.row.step, choice.row.message) == (3, 30, "resumed after a controller restart")
    assert choice.note == "controller restarted: resuming job fake-7 from its newest checkpoint (last at step 30)"


@pytest.mark.parametrize(
    ("status", "reason", "restarts"),
    [
        (JobStatus.STOPPED, RecoveryReason.USER_RESUME, 1),  # the user stopped it: going on is no restart
        (JobStatus.FAILED, RecoveryReason.CONTROLLER_RESTART, 2),
        (JobStatus.RUNNING, RecoveryReason.CONTROLLER_RESTART, 2),  # its controller died
    ],
)
def test_resume_continues_the_newest_unfinished_run_of_the_name(status, reason, restarts):
    runs = [
        _row("fake-3", status, restarts=1),
        _row("fake-2", JobStatus.FAILED),
        _row("other-1", JobStatus.FAILED, name="other"),
    ]
    choice = choose_job(replace(REQUEST, resume=True, python="python3.11"), "fake", None, runs, _new)
    assert (choice.row.job_id, choice.resumed, choice.row.restarts) == ("fake-3", reason, restarts)
    assert choice.row.python == "python3.11" and choice.row.status is JobStatus.RUNNING


def test_resume_with_nothing_unfinished_is_one_line():
    with pytest.raises(InputError, match="nothing to resume: no unfinished job named 'fake' on cluster c1"):
        choose_job(replace(REQUEST, resume=True), "fake", None, [_row("fake-1", JobStatus.COMPLETED)], _new)


def test_progress_is_saved_at_most_every_two_seconds_and_every_other_change_at_once():
    costs = iter([0.75, 1.0, 1.25, 1.5])
    record = JobRecord(JobStore(), _new("fake-1"), lambda: next(costs))
    record.progressed(5, 2.0)
    assert JobStore().get("fake-1").step == 0 and record.row.step == 5  # kept, not yet written
    record.checkpointed(5)
    stored = JobStore().get("fake-1")
    assert (stored.step, stored.checkpoint_step, stored.cost_usd) == (5, 5, 0.25)  # the cluster's cost since the start
    record.progressed(3, 2.5)  # a relaunch from an older checkpoint never moves the step back
    assert record.row.step == 5
    record.ended(JobStatus.STOPPED, "stopped by the user")
    assert JobStore().get("fake-1").status is JobStatus.STOPPED
