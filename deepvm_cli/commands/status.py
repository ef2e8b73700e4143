"""`deepvm status`: what runs, where, and what it costs so far."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import typer

from deepvm_cli.render.cluster import render_cluster, up
from deepvm_cli.ui import console
from deepvm_cli.ui.cluster_choice import remember_cluster
from deepvm_cli.ui.ended import finish_ended_clusters
from provisioning.core.errors import NotFoundError

if TYPE_CHECKING:
    from training.shared.jobstore import JobRow


_PAST_JOBS = 5  # jobs of clusters that are down, in `deepvm status`


def _jobs(cluster: str, up: bool) -> list[JobRow]:
    """The cluster's jobs, newest first; managed jobs with the values their head reports now (when the
    cluster is up and its head answers), else as last heard."""
    from training.shared.jobstore import LOCAL, JobStatus, JobStore

    rows = JobStore().for_cluster(cluster)
    if up and any(r.controller != LOCAL and r.status is JobStatus.RUNNING for r in rows):
        from provisioning.clusters.handle import Cluster
        from provisioning.core.errors import DeepvmError
        from training.client.managed import head_of, jobs_on

        try:
            handle = Cluster.open_running(cluster)
            jobs_on(head_of(handle, handle.node_python))  # brings this machine's rows up to date
        except DeepvmError as exc:
            console.warning(f"{cluster}: managed jobs as last heard (the head node could not be asked: {exc})")
        rows = JobStore().for_cluster(cluster)
    return rows


def _job_state(job: JobRow, cluster_up: bool) -> str:
    """The stored status, except that a "running" job whose controller or cluster is gone says so."""
    from training.shared.jobstore import LOCAL, JobStatus, controller_running

    if job.status is not JobStatus.RUNNING:
        return job.status.value
    if not cluster_up:
        return f"ended with its cluster (last heard running at step {job.step})"
    if job.controller == LOCAL and not controller_running(job.cluster):
        return (
            f"interrupted (controller gone: `deepvm train {job.spec_path} --cluster {job.cluster} "
            "--controller local --resume` continues)"
        )
    return job.status.value


def _job_doc(job: JobRow, cluster_up: bool) -> dict[str, object]:
    return {**job.to_dict(), "state": _job_state(job, cluster_up), "cluster_up": cluster_up}


def render_jobs(jobs: list[JobRow], cluster_up: bool, limit: int = 3) -> None:
    """The newest jobs, one line each (and the recovery ladder's newest decision, while the job may still act
    on it); a cluster that is down: as this machine last recorded them."""
    from training.shared.jobstore import JobStatus, lost, reached

    for job in jobs[:limit]:
        loss = "-" if job.loss is None else f"{job.loss:.4f}"
        where = "" if cluster_up else f"  on {job.cluster} (down)"
        console.out.print(
            f"job {job.job_id}{where}  {_job_state(job, cluster_up)}  {reached(job.step, job.total_steps)}  loss {loss}"
            f"  trainers {job.world_size}  restarts {job.restarts}  {lost(job.lost_steps, job.lost_s)}  "
            f"{job.saved(time.time())}  ${job.cost_usd:.4f}",
            markup=False,
        )
        if job.ladder and job.status in (JobStatus.RUNNING, JobStatus.STOPPED) and cluster_up:
            console.out.print(f"  ladder: {job.ladder}", markup=False)


def status_command(
    name: str | None = typer.Argument(
        None, help="Cluster name (default: every cluster not terminated), or a managed job's id: its run summary."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print JSON: one cluster object, or {clusters: [...]}."),
) -> None:
    """Show clusters: nodes, roles, markets, states, uptime, $/h and cost so far; and their training jobs. Given a
    job's id: what the run cost, what on-demand would have cost, what it survived, why its cluster went down."""
    from provisioning.clusters.lifecycle import status

    finish_ended_clusters()
    if name is not None and _job_summary(name, as_json):
        return
    views = status(name)
    if name is not None:
        remember_cluster(name)
    past = [] if name else _jobs_of_clusters_down({v.cluster.name for v in views})
    if not as_json:
        for banner in dict.fromkeys(v.banner for v in views if v.banner):
            console.info(banner)
    if as_json:
        docs = [{**v.to_dict(), "jobs": [_job_doc(j, up(v)) for j in _jobs(v.cluster.name, up(v))]} for v in views]
        console.print_json(
            docs[0] if name else {"clusters": docs, "jobs_of_clusters_down": [_job_doc(j, False) for j in past]}
        )
        return
    if not views:
        console.info(_start_hint())
    for view in views:
        if not view.refreshed and up(view):
            console.warning(f"{view.cluster.name}: node states as last recorded (the cloud could not be asked)")
        render_cluster(view)
        render_jobs(_jobs(view.cluster.name, up(view)), up(view))
    if past:
        console.out.print(f"jobs of clusters that are down, as last recorded here ({len(past)}, newest first):")
        render_jobs(past, cluster_up=False, limit=_PAST_JOBS)
        if len(past) > _PAST_JOBS:
            console.out.print(f"({len(past) - _PAST_JOBS} older not shown)")


def _job_summary(name: str, as_json: bool) -> bool:
    """`deepvm status JOB`: the run's summary (training/shared/summary.py); False when `name` is no job id here."""
    from training.client.outputs import job_summary
    from training.shared.jobstore import LOCAL, JobStore

    row = JobStore().get(name)
    if row is None or row.controller == LOCAL:
        return False
    summary = job_summary(row)
    if summary is None:
        raise NotFoundError(f"job {name}'s summary is gone with its cluster {row.cluster} (it was not copied to S3)")
    if as_json:
        console.print_json(summary.to_dict())
        return True
    for line in summary.lines():
        console.out.print(line, markup=False, highlight=False)
    return True


def _jobs_of_clusters_down(live: set[str]) -> list[JobRow]:
    """Jobs this machine ran on clusters that are down now (not among `live`), newest first."""
    from training.shared.jobstore import JobStore

    return [job for job in JobStore().all() if job.cluster not in live]


def _start_hint() -> str:
    """What to run when there is no cluster: `up` launches the saved plan; without one, plan first."""
    from provisioning.core.home import saved_plan_path

    if saved_plan_path().exists():
        return "no clusters; `deepvm up` launches the saved plan (it shows it and asks first)"
    return "no clusters and no saved plan; `deepvm plan --max-price X` plans one for X USD/h, then `deepvm up`"


def register(app: typer.Typer) -> None:
    app.command("status")(status_command)
