"""Following a managed job's log from this machine (training.client.managed.follow), the head's side played by
the lines its query prints."""

from __future__ import annotations

from pathlib import Path

import pytest

from provisioning.cloud.types import HostSpec
from training.client import managed
from training.shared.jobstore import JobStatus
from training.shared.records import JobSummary, LogKind, LogRecord
from training.shared.transport import OutputLine

HEAD = managed.Head("c", "i-h0000000", HostSpec("head", "127.0.0.2", Path("/k"), Path("/known")), "python3")
COMPLETED = LogRecord(kind=LogKind.STATE, at=1.0, status=JobStatus.COMPLETED, text="done")
BILLS = LogRecord(kind=LogKind.NOTE, at=2.0, text="the job is over and cluster c still bills")


def _summary(status: JobStatus, message: str) -> JobSummary:
    return JobSummary("job-1", "c", "tiny", status, 40, 40, 0.5, 2, 40, 0, 0, 0.1, "", "", message, False)


@pytest.mark.parametrize(("printed", "asked_the_row"), [([COMPLETED, BILLS], False), ([BILLS], True)],
                         ids=["whole-log", "tail-1"])  # fmt: skip
def test_a_log_followed_to_the_jobs_end_says_how_it_ended_even_from_after_its_end(monkeypatch, printed,
                                                                                   asked_the_row):  # fmt: skip
    """`deepvm logs JOB -f --tail 1` of a job that completed shows the note of what still bills, its last line:
    it said nothing of the end (the state record is before the tail), and the e2e test that followed a paced
    job's end so saw no `job completed` when the job ended before the follower began. The head's row says it."""
    rows: list[str] = []

    def run_command(host, script, on_line):
        for record in printed:
            on_line(OutputLine("head", "stdout", record.to_json()))
        return 0

    def jobs_on(head):
        rows.append(head.instance_id)
        return [_summary(JobStatus.COMPLETED, "done")]

    monkeypatch.setattr(managed, "run_command", run_command)
    monkeypatch.setattr(managed, "jobs_on", jobs_on)
    shown: list[LogRecord] = []
    end = managed.follow(HEAD, "job-1", shown.append, tail=len(printed))
    assert (end.status, end.text, shown) == (JobStatus.COMPLETED, "done", printed)
    assert rows == (["i-h0000000"] if asked_the_row else [])


def test_a_log_read_to_its_current_end_asks_no_row(monkeypatch):
    monkeypatch.setattr(managed, "run_command", lambda host, script, on_line: 0)
    monkeypatch.setattr(managed, "jobs_on", lambda head: pytest.fail("a log read without --follow asked the row"))
    assert managed.follow(HEAD, "job-1", lambda record: None, keep_following=False).status is JobStatus.RUNNING
