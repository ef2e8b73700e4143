"""`deepvm jobs`, `logs`, `cancel` and `fetch`: managed jobs, whose controllers run on their clusters' head
nodes; and `run_managed`, what `deepvm train` does with the controller on the head.

Rendering only: the work is training.client.managed's.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from deepvm_cli import console
from deepvm_cli.cluster_choice import remember_cluster
from deepvm_cli.flags import at_least
from deepvm_cli.job_render import record_line
from provisioning.core.errors import CloudError
from training.shared.jobstore import JobStatus
from training.shared.progress import JobReporter
from training.shared.records import LogRecord

if TYPE_CHECKING:
    from provisioning.clusters.handle import Cluster
    from training.client.managed import Head
    from training.control.controller import TrainRequest

_DETACH_WAIT_S = 900.0  # `train --detach`: longest wait for the first attempt to start
MAX_RANK = 65_535  # `logs --rank`
MAX_TAIL = 10_000_000  # `logs --tail`: lines


def default_python(cluster: Cluster | None) -> str:
    """The nodes' Python: this interpreter in the sandbox (its hosts share this machine's files), else
    python3 (the Deep Learning AMI's)."""
    return sys.executable if cluster is not None and cluster.target.kind == "sandbox" else "python3"


def replay(report: JobReporter) -> Callable[[LogRecord], None]:
    """Show a managed job's log records through a reporter, as if its controller ran here."""

    def show(record: LogRecord) -> None:
        if record.kind == "log":
            report.log(record.source, record.text)
        elif record.kind == "progress" and record.progress is not None:
            report.progress(record.progress)
        elif record.kind == "push":
            report.push(record.source, record.done, record.total)
        else:
            report.note(record_line(record))

    return show


def _hints(job_id: str) -> None:
    console.info(f"  follow it: deepvm logs {job_id} -f")
    console.info(f"  stop it:   deepvm cancel {job_id}")


def run_managed(request: TrainRequest, report: JobReporter, detach: bool) -> dict[str, Any] | None:
    """Submit the job to the head and follow it to its end (its result), or until it runs (detach: None).
    Ctrl-C detaches: the job goes on."""
    from training.client.managed import fetch_outputs, find_head, follow, submit
    from training.control.controller import TrainingFailed

    job = submit(request, report)
    head = find_head(job.cluster, job.python)
    try:
        if detach:
            _wait_running(head, job.job_id, replay(report))
            console.info(f"job {job.job_id} runs on the cluster's head node {head.instance_id}; "
                         "nothing of it runs on this machine")  # fmt: skip
            _hints(job.job_id)
            return None
        end = follow(head, job.job_id, replay(report))
    except KeyboardInterrupt:
        console.info(f"detached: job {job.job_id} keeps running on the cluster's head node {head.instance_id}")
        _hints(job.job_id)
        return None
    if end.status is JobStatus.COMPLETED:
        result = fetch_outputs(head, job.job_id, Path(job.out_dir))
        if result is not None:
            return result
    if end.status is JobStatus.CANCELLED:
        console.info(f"job {job.job_id} was cancelled: {end.text}")
        return None
    if end.status is JobStatus.FAILED:
        raise TrainingFailed(end.text)
    raise CloudError(f"job {job.job_id}'s log ended without a result ({end.status}: {end.text or 'no word'}); "
                     f"`deepvm jobs {job.cluster}` shows what its head knows")  # fmt: skip


def _wait_running(head: Head, job_id: str, show: Callable[[LogRecord], None]) -> None:
    """Show the job's log until its first attempt starts (or it is over already)."""
    from training.client.managed import follow

    start, deadline = 0, time.monotonic() + _DETACH_WAIT_S
    started = False

    def watch(record: LogRecord) -> None:
        nonlocal started
        started = started or record.text.startswith("attempt ") or record.kind == "state"
        show(record)

    while time.monotonic() < deadline:
        end = follow(head, job_id, watch, start=start, keep_following=False)
        if started or end.status.final:
            return
        start = end.next_line
        time.sleep(1.0)


def jobs_command(
    cluster: str | None = typer.Argument(None, help="Cluster (default: every cluster that is up)."),
    as_json: bool = typer.Option(False, "--json", help="Print the jobs as JSON."),
) -> None:
    """List managed jobs as their clusters' head nodes know them: state, step, restarts, lost steps, cost."""
    from provisioning.clusters.handle import Cluster, running_clusters
    from training.client.managed import head_of, jobs_on

    found = []
    for name in [cluster] if cluster else running_clusters():
        handle = Cluster.open_running(name)
        found += jobs_on(head_of(handle, default_python(handle)))
    if cluster:
        remember_cluster(cluster)
    if as_json:
        console.print_json([s.to_dict() for s in found])
        return
    if not found:
        console.info("no managed jobs" + (f" on cluster {cluster}" if cluster else ""))
        return
    for s in found:
        running = s.status is JobStatus.RUNNING
        state = "running (controller not running)" if running and not s.controller_alive else s.status.value
        console.out.print(
            f"{s.job_id}  {state}  step {s.step}/{s.total_steps}  restarts {s.restarts}  "
            f"lost steps {s.lost_steps}  ${s.cost_usd:.4f}  cluster {s.cluster or '-'}",
            markup=False,
            highlight=False,
        )


def logs_command(
    job: str = typer.Argument(..., help="Job id (`deepvm jobs` lists them)."),
    follow_log: bool = typer.Option(False, "--follow", "-f", help="Keep following until the job ends."),
    rank: int | None = typer.Option(
        None, "--rank", callback=at_least(0, MAX_RANK), help="Only this MPI rank's output."
    ),
    tail: int | None = typer.Option(
        None, "--tail", callback=at_least(0, MAX_TAIL), help="Start with the last K lines."
    ),
) -> None:
    """Show a managed job's log from its head node; reattach to a running job with -f."""
    from training.client.managed import find_head, follow, managed_job

    row = managed_job(job)
    head = find_head(row.cluster, row.python)

    def show(record: LogRecord) -> None:
        if rank is None or (record.kind == "log" and record.rank == rank):
            console.out.print(record_line(record), markup=False, highlight=False)

    try:
        end = follow(head, job, show, tail=tail, keep_following=follow_log)
    except KeyboardInterrupt:
        return
    if follow_log and end.status.final:
        console.info(f"job {job} {end.status}")


def cancel_command(
    job: str = typer.Argument(..., help="Job id (`deepvm jobs` lists them)."),
    now: bool = typer.Option(False, "--now", help="Stop at once, without a last checkpoint."),
) -> None:
    """Stop a managed job after a checkpoint (or at once with --now), and wait until it has stopped."""
    from training.client.managed import cancel, find_head, follow, jobs_on, managed_job

    row = managed_job(job)
    head = find_head(row.cluster, row.python)
    cancel(head, job, now)
    console.info(f"cancelling {job}: " + ("stopping it now" if now else "it stops after a checkpoint"))
    follow(head, job, lambda record: None, tail=0)  # until the job is over
    final = next((s for s in jobs_on(head) if s.job_id == job), None)
    status = final.status if final else "unknown"
    console.info(f"job {job} {status}" + (f" at step {final.step}" if final else ""))


def fetch_command(
    job: str = typer.Argument(..., help="Job id (`deepvm jobs` lists them)."),
    out: Path | None = typer.Option(None, "--out", help="Where to put them (default: the job's out directory)."),
) -> None:
    """Copy a managed job's outputs (model.pt, metrics.json, a script's out directory) from its head node."""
    from training.client.managed import fetch_outputs, find_head, managed_job

    row = managed_job(job)
    head = find_head(row.cluster, row.python)
    where = out or Path(row.out_dir)
    result = fetch_outputs(head, job, where)
    partial = "" if result else " (the job has not completed: what it wrote so far)"
    console.info(f"outputs of {job} in {where}{partial}")


def register(app: typer.Typer) -> None:
    app.command("jobs")(jobs_command)
    app.command("logs")(logs_command)
    app.command("cancel")(cancel_command)
    app.command("fetch")(fetch_command)
