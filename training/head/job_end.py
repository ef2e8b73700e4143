"""What the head does once a managed job is over, whatever ended it (completed, failed, cancelled, stopped at a
limit, or a controller that crashed too often): run by the job's supervisor after the service has exited,
so the job's log, row and result are final, and the service's hook has delivered its events.

1. the run's summary (training/head/summary.py) is written beside the log (summary.json);
2. the hook hears how the job ended (completion, failure, stopped, cancelled), with the summary;
3. with autodown, or a time limit, the job's outputs, log and newest checkpoint are copied to S3
   (training/head/outputs.py);
4. without autodown, the job's log says once what still bills and how to stop it, for a user who detached
   and never sees `deepvm train`'s own reminder; then END_MARK tells a follower of the log (`deepvm logs
   -f`, an attached `deepvm train`) that the job's end is done;
5. with autodown (`--down-when-done`) the head takes the cluster down (training/head/autodown.py).

Any step that fails is said in the job's log and the next ones still run: a failed copy must not keep the
cluster billing, and a cluster that cannot be taken down must say so.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path

from botocore.exceptions import BotoCoreError, ClientError

from provisioning.clusters.store import utc_now
from provisioning.core.atomicfile import write_text_atomic
from provisioning.core.errors import DeepvmError
from training.head.autodown import Autodown, take_down
from training.head.joblog import JobLog
from training.head.notify import Notifier, NotifyKind
from training.head.outputs import copy_job
from training.head.summary import run_summary
from training.shared.jobstore import JobRow, JobStatus, JobStore
from training.shared.layout import END_MARK
from training.shared.records import HeadJob
from training.shared.storage import job_key
from training.shared.summary import SUMMARY_FILE, RunSummary

ENDED = {
    JobStatus.COMPLETED: NotifyKind.COMPLETION,
    JobStatus.FAILED: NotifyKind.FAILURE,
    JobStatus.STOPPED: NotifyKind.STOPPED,
    JobStatus.CANCELLED: NotifyKind.CANCELLED,
}
_FAILURES = (DeepvmError, BotoCoreError, ClientError, OSError)


def finish(root: Path) -> None:
    """The job in `root` (its directory on the head) is over: see the module docstring."""
    job = HeadJob.from_json((root / "job.json").read_text())
    log = JobLog(root / "log.jsonl")
    notifier = Notifier.for_job(job.guard.notify, root, job.job_id, job.cluster.name, log.note)
    try:
        row = _final_row(job, log)
        down = _autodown(job, row)
        summary = run_summary(job, row, cluster_down=down.reason if down else "")
        write_text_atomic(root / SUMMARY_FILE, summary.to_json())
        notifier.post(ENDED.get(row.status, NotifyKind.FAILURE), row.message, summary)
        if job.guard.copies_outputs and job.guard.outputs_url:
            _step(log, "copying the job's outputs to S3", lambda: copy_job(root, job, log.note))
        if down is None:
            _billing_once(summary, log)
        (root / END_MARK).touch()  # a follower of the log stops here (training/head/query.py)
        if down is not None:
            _step(
                log,
                "taking the cluster down",
                lambda: take_down(down, log.note, notifier, summary, lambda: _upload_log(root, job, log)),
            )
    finally:
        notifier.close()
        log.close()


def _final_row(job: HeadJob, log: JobLog) -> JobRow:
    """The job's row as its controller left it; a controller that died before writing one failed the job."""
    row = JobStore().get(job.job_id)
    if row is not None:
        return row
    log.note("the job's controller stopped before it recorded the job")
    return JobRow(
        job_id=job.job_id,
        cluster=job.cluster.name,
        name=job.job_id,
        spec_path=job.job_file,
        status=JobStatus.FAILED,
        started_at=job.submitted_at,
        updated_at=utc_now(),
        step=0,
        total_steps=0,
        world_size=0,
        loss=None,
        restarts=0,
        lost_steps=0,
        checkpoint_step=-1,
        cost_base_usd=0.0,
        cost_usd=0.0,
        out_dir="",
        python=job.python,
        message="its controller stopped before it started",
    )


def _autodown(job: HeadJob, row: JobRow) -> Autodown | None:
    """The cluster goes down with the job when the job asked for it (any end: a failure must not bill on)."""
    if not job.guard.down_when_done:
        return None
    return Autodown(job.cluster.name, f"job {job.job_id} {row.status}", job.job_id, job.guard.cluster_bucket)


def _billing_once(summary: RunSummary, log: JobLog) -> None:
    """Without autodown, the one line a detached user reads in `deepvm logs` (and the hook's payload carries
    the same figure): what still bills, and how to stop it."""
    if summary.billing_usd_per_hour:
        log.note(
            f"the job is over and cluster {summary.cluster} still bills ${summary.billing_usd_per_hour:.4f}/h: "
            f"`deepvm down {summary.cluster}` stops it (`train --down-when-done` does it for the next job)"
        )


def _upload_log(root: Path, job: HeadJob, log: JobLog) -> None:
    """The log once more, with the autodown's own lines in it, just before the head ends itself."""
    if not job.guard.outputs_url:
        return
    import boto3

    bucket, key = job_key(job.guard.outputs_url, job.job_id, "log.jsonl")
    with contextlib.suppress(*_FAILURES):
        boto3.client("s3").upload_file(str(root / "log.jsonl"), bucket, key)


def _step(log: JobLog, what: str, run: Callable[[], object]) -> None:
    try:
        run()
    except _FAILURES as exc:
        log.note(f"{what} failed: {type(exc).__name__}: {exc}")
