"""`deepvm logs JOB` and `deepvm logs JOB -f` from this machine (deepvm_cli.commands.jobs), run in-process, the
head's side played by the records its log holds and the job row it reports (training.client.managed's follow,
follow_across and job_on)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from deepvm_cli.commands import jobs
from training.client import managed, outputs
from training.shared.jobstore import JobStatus
from training.shared.records import JobSummary, LogKind, LogRecord

COMPLETED = LogRecord(kind=LogKind.STATE, at=1.0, status=JobStatus.COMPLETED, text="done")
BILLS = LogRecord(kind=LogKind.NOTE, at=2.0, text="the job is over and cluster c still bills $0.5/h")


def _summary(status: JobStatus) -> JobSummary:
    return JobSummary("job-1", "c", "tiny", status, 40, 40, 0.5, 2, 40, 0, 0, 0.1, "", "", "done", False)


@pytest.fixture
def head_log(monkeypatch):
    """The job's log on its head (set `records`), and the heads asked for the job's row (`asked`)."""
    side = {"records": [], "asked": []}

    def follow_across(head, job_id, on_record, tail=None):
        records = side["records"][-tail:] if tail else side["records"]
        for record in records:
            on_record(record)
        status = next((r.status for r in reversed(records) if r.kind is LogKind.STATE), JobStatus.RUNNING)
        return managed.FollowEnd(status, "", len(records)), head

    def job_on(head, job_id):
        side["asked"].append(job_id)
        return _summary(JobStatus.COMPLETED)

    monkeypatch.setattr(jobs, "finish_ended_clusters", lambda: None)
    monkeypatch.setattr(managed, "managed_job", lambda job: SimpleNamespace(cluster="c", python="python3"))
    monkeypatch.setattr(outputs, "job_outputs", lambda row: outputs.OutputsPlace(outputs.Where.HEAD, row))
    monkeypatch.setattr(managed, "find_head", lambda cluster, python: "head")
    monkeypatch.setattr(managed, "follow_across", follow_across)
    monkeypatch.setattr(
        managed,
        "follow",
        lambda head, job_id, on_record, tail=None, keep_following=True: follow_across(head, job_id, on_record, tail)[0],
    )
    monkeypatch.setattr(managed, "job_on", job_on)
    return side


@pytest.mark.parametrize(("tail", "asked"), [(None, []), ("1", ["job-1"])], ids=["whole-log", "tail-1"])
def test_a_log_followed_to_the_jobs_end_says_how_it_ended_even_from_after_its_end(cli, head_log, tail, asked):
    """`deepvm logs JOB -f --tail 1` of a job that completed shows the note of what still bills, its last line:
    it said nothing of the end (the state record is before the tail), and the e2e test that followed a paced
    job's end so saw no `job completed` when the job ended before the follower began. The head's row says it;
    a follower that read the end asks no row."""
    head_log["records"] = [COMPLETED, BILLS]
    result = cli("logs", "job-1", "-f", *(["--tail", tail] if tail else []))
    assert result.returncode == 0 and "job job-1 completed" in result.stderr, result
    assert "still bills" in result.stdout and head_log["asked"] == asked


# what a script may print: longer than any terminal, tabs, what rich reads as markup and emoji, trailing blanks
SCRIPT_LINE = "epoch 3\t[bold]loss[/bold] 0.25 :thumbs_up: " + "x" * 150 + "  "


@pytest.mark.parametrize("follow", [[], ["-f"]], ids=["log", "follow"])
def test_a_log_into_a_pipe_has_each_line_as_the_script_printed_it(cli, head_log, follow):
    """`deepvm logs JOB | grep ...` found nothing: rich wrapped the script's lines at the width (80 columns
    without a terminal), expanded its tabs and turned `:thumbs_up:` into an emoji. Into a pipe or a file each
    line is the script's, after the rank's prefix."""
    head_log["records"] = [LogRecord(kind=LogKind.LOG, at=1.0, source="node-1 r0", rank=0, text=SCRIPT_LINE), COMPLETED]
    result = cli("logs", "job-1", *follow, env={"COLUMNS": "80"})
    assert result.returncode == 0, result
    assert result.stdout.splitlines() == [f"[node-1 r0] {SCRIPT_LINE}", "job completed: done"]


def test_a_log_on_a_terminal_is_as_rich_shows_it(cli, head_log):
    """On a screen a line still wraps at its width (rich's, as before): only a pipe or a file gets it verbatim."""
    head_log["records"] = [LogRecord(kind=LogKind.LOG, at=1.0, source="node-1 r0", rank=0, text=SCRIPT_LINE)]
    result = cli("logs", "job-1", env={"COLUMNS": "80", "TTY_COMPATIBLE": "1"})
    assert result.returncode == 0 and max(len(line) for line in result.stdout.splitlines()) <= 80, result
