"""`deepvm jobs`, `logs`, `cancel` and `fetch`: managed jobs, whose controllers run on their clusters' head
nodes.

Rendering only: the work is training.client.managed's.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from deepvm_cli.render.job import leftover_lines, record_line
from deepvm_cli.ui import console
from deepvm_cli.ui.cluster_choice import remember_cluster
from deepvm_cli.ui.ended import finish_ended_clusters
from deepvm_cli.ui.flags import at_least, writable_folder
from provisioning.core.errors import NotFoundError
from training.shared.jobstore import JobStatus, lost, reached
from training.shared.records import LogKind, LogRecord

if TYPE_CHECKING:
    from training.client.outputs import OutputsPlace

MAX_RANK = 65_535  # `logs --rank`
MAX_TAIL = 10_000_000  # `logs --tail`: lines


def jobs_command(
    cluster: str | None = typer.Argument(None, help="Cluster (default: every cluster that is up)."),
    as_json: bool = typer.Option(False, "--json", help="Print the jobs as JSON."),
) -> None:
    """List managed jobs as their clusters' head nodes know them: state, step, restarts, lost steps, cost."""
    from provisioning.clusters.handle import Cluster, running_clusters
    from training.client.managed import head_of, jobs_on

    finish_ended_clusters()
    found = []
    for name in [cluster] if cluster else running_clusters():
        handle = Cluster.open_running(name)
        found += jobs_on(head_of(handle, handle.node_python))
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
            f"{s.job_id}  {state}  {reached(s.step, s.total_steps)}  restarts {s.restarts}  "
            f"{lost(s.lost_steps, s.lost_s)}  ${s.cost_usd:.4f}  cluster {s.cluster or '-'}",
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
    """Show a managed job's log from its head node (from S3 once its cluster is gone); reattach with -f."""
    from training.client.managed import find_head, follow, follow_across, job_on, managed_job
    from training.client.outputs import Where, job_outputs, s3_log

    finish_ended_clusters()
    row = managed_job(job)
    place = job_outputs(row)  # the head, or S3 once the cluster is gone
    width = console.out.width if console.out.is_terminal else None  # a progress line never wraps on a screen

    def show(record: LogRecord) -> None:
        if rank is None or (record.kind is LogKind.LOG and record.rank == rank):
            console.verbatim(record_line(record, width))

    if place.where is not Where.HEAD:
        if place.where is Where.NOWHERE:
            raise NotFoundError(f"job {job}'s log is gone: {place.why}")
        records = s3_log(place)
        for record in records[-tail:] if tail else records if tail is None else []:
            show(record)
        console.info(f"job {job}'s log as its head copied it to {place.url} (its cluster {row.cluster} is down)")
        return
    head = find_head(row.cluster, row.python)

    try:
        if follow_log:  # on the new head after a hand-over
            end, head = follow_across(head, job, show, tail=tail)
        else:
            end = follow(head, job, show, tail=tail, keep_following=False)
    except KeyboardInterrupt:
        return
    if not follow_log:
        return
    status = end.status
    if not status.final:  # the lines shown began after the job's end (--tail): they say nothing of it
        final = job_on(head, job)
        status = final.status if final is not None else status
    if status.final:
        console.info(f"job {job} {status}")


def cancel_command(
    job: str = typer.Argument(..., help="Job id (`deepvm jobs` lists them)."),
    now: bool = typer.Option(False, "--now", help="Stop at once, without a last checkpoint."),
) -> None:
    """Stop a managed job after a checkpoint (or at once with --now), and wait until it has stopped."""
    from training.client.managed import cancel, find_head, follow, job_on, managed_job

    row = managed_job(job)
    head = find_head(row.cluster, row.python)
    cancel(head, job, now)
    console.info(f"cancelling {job}: " + ("stopping it now" if now else "it stops after a checkpoint"))
    follow(head, job, lambda record: None, tail=0)  # until the job is over
    final = job_on(head, job)
    status = final.status if final else "unknown"
    console.info(f"job {job} {status}" + (f" at step {final.step}" if final else ""))


def fetch_command(
    job: str = typer.Argument(..., help="Job id (`deepvm jobs` lists them)."),
    out: str | None = typer.Option(None, "--out", help="Where to put them (default: the job's out directory)."),
) -> None:
    """Copy a managed job's outputs (model.pt, metrics.json, a script's out directory) from its head node, with its
    log and TensorBoard files whatever its state, or from S3 once its cluster is gone; of a cancelled or failed
    job, what it left on the nodes (metrics, its newest checkpoint, how to go on)."""
    from provisioning.clusters.handle import Cluster
    from training.client.managed import fetch_outputs, fetch_run_record, head_of, job_on, managed_job
    from training.client.outputs import Where, job_outputs
    from training.control.leftovers import collect

    where = None if out is None else writable_folder("--out", out)  # before any node is asked
    finish_ended_clusters()
    row = managed_job(job)
    where = where or writable_folder("the job's out directory", row.out_dir)
    place = job_outputs(row)
    if place.where is not Where.HEAD:
        _fetch_from_s3(place, where)
        return
    cluster = Cluster.open_running(row.cluster)
    head = head_of(cluster, row.python)
    record = fetch_run_record(head, job, where)
    board = where / "tensorboard"
    if any(p.parent == board for p in record):
        console.info(f"TensorBoard files of {job} in {board}: `tensorboard --logdir {board}` shows them")
    if fetch_outputs(head, job, where) is not None:
        console.info(f"outputs of {job} in {where}")
        return
    summary = job_on(head, job)
    if summary is not None and summary.status is JobStatus.RUNNING:
        console.info(
            f"job {job} is still running (step {summary.step}/{summary.total_steps}): `deepvm logs {job} "
            f"-f` follows it, and `deepvm fetch {job}` brings its outputs once it completes"
        )
        return
    cluster.refresh()  # nodes the head bought, and those gone since
    for text, verbatim in leftover_lines(collect(cluster, summary, job, where), row, where):
        console.plain(text) if verbatim else console.err.print(text, markup=False, highlight=False)


def _fetch_from_s3(place: OutputsPlace, where: Path) -> None:
    """What the head copied to S3 at the job's end: its out directory, and what became of the job."""
    from training.client.outputs import Where, remember, s3_checkpoint, s3_fetch, s3_summary

    if place.where is Where.NOWHERE:
        raise NotFoundError(f"job {place.job_id}'s outputs are gone: {place.why}")
    fetched = s3_fetch(place, where)
    summary = s3_summary(place)
    if summary is not None:
        remember(place, summary)
    console.info(
        f"{len(fetched)} file(s) of job {place.job_id} from {place.url} in {where}"
        + (f" ({summary.status} at step {summary.step}/{summary.total_steps})" if summary else "")
    )
    if summary is not None and summary.status is not JobStatus.COMPLETED:
        found = s3_checkpoint(place)
        if found is not None:
            console.info(
                f"its checkpoint of step {found[1]} is in {found[0]}: `deepvm train "
                f"{place.row.spec_path} --resume` continues it on any cluster"
            )


def register(app: typer.Typer) -> None:
    app.command("jobs")(jobs_command)
    app.command("logs")(logs_command)
    app.command("cancel")(cancel_command)
    app.command("fetch")(fetch_command)
