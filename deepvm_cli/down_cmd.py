"""`deepvm down`: delete a cluster and everything tagged with it."""

from __future__ import annotations

import sys

import typer

from deepvm_cli import console
from deepvm_cli.cloud_progress import progress_reporter
from provisioning.cloud.names import DEFAULT_CLUSTER_NAME
from provisioning.errors import InputError


def down_command(
    name: str = typer.Argument(DEFAULT_CLUSTER_NAME, help="Cluster name."),
    yes: bool = typer.Option(False, "--yes", "-y", help="Do not ask for confirmation."),
    cloud: str = typer.Option(
        "auto", "--cloud", help="Where to sweep when the cluster is not in the local state."
    ),
    region: str | None = typer.Option(
        None, "--region", help="Region to sweep when the cluster is not recorded."
    ),
    cancel_jobs: bool = typer.Option(
        False, "--cancel-jobs", help="Cancel the cluster's running managed jobs (after a checkpoint) first."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print what was deleted as JSON."),
) -> None:
    """Terminate the instances; delete fleet, launch template, security group, key pair; sweep by tag."""
    from provisioning.cloud.lifecycle import down
    from provisioning.sandbox.control import BANNER
    from provisioning.state import Store

    row = Store().cluster(name)
    if (row is not None and row.cloud == "sandbox") or (row is None and cloud == "sandbox"):
        console.info(BANNER)
    if not yes:
        if not sys.stdin.isatty():
            raise InputError(f"`deepvm down {name}` deletes the cluster; confirm with --yes")
        if not typer.confirm(f"Delete cluster {name} and everything tagged with it?"):
            raise typer.Exit(1)
    if row is not None and row.status == "up":
        _stop_running_jobs(name, cancel_jobs)
    with progress_reporter(quiet=as_json) as report:
        result = down(name, cloud=cloud, region=region, report=report)
    if as_json:
        console.print_json({"name": result.name, "deleted": result.deleted, "had_record": result.had_record})
        return
    for item in result.deleted:
        console.out.print(f"deleted {item}")
    console.info(f"cluster {name} is down" + ("" if result.deleted else " (nothing was left to delete)"))


def _stop_running_jobs(name: str, cancel_jobs: bool) -> None:
    """Refuse to take a running managed job's cluster away, unless told to cancel the job first. A head
    that cannot be asked (it died, or the job never started) holds nothing to wait for."""
    from deepvm_cli.jobs_cmd import default_python
    from provisioning.errors import DeepvmError
    from training.managed.client import cancel, find_head, follow, running_jobs

    try:
        head = find_head(name, default_python(name))
        running = running_jobs(head)
    except DeepvmError as exc:
        console.warning(f"could not ask the head node of {name} about running jobs ({exc})")
        return
    if not running:
        return
    ids = ", ".join(s.job_id for s in running)
    if not cancel_jobs:
        raise InputError(
            f"cluster {name} has a running job ({ids}); `deepvm cancel {running[0].job_id}` stops it, "
            f"or `deepvm down {name} --cancel-jobs` cancels it and deletes the cluster"
        )
    for job in running:
        console.info(f"cancelling {job.job_id} (after a checkpoint)")
        cancel(head, job.job_id, now=False)
        follow(head, job.job_id, lambda record: None, tail=0)


def register(app: typer.Typer) -> None:
    app.command("down")(down_command)
