"""`deepvm down`: delete a cluster and everything tagged with it."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import typer

from deepvm_cli import console
from deepvm_cli.cloud_progress import progress_reporter
from provisioning.cloud.names import DEFAULT_CLUSTER_NAME
from provisioning.errors import InputError

if TYPE_CHECKING:
    from provisioning.cloud.cluster import Cluster
    from provisioning.cloud.lifecycle import DownResult


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
    from provisioning.cloud.lifecycle import down, recorded_cluster
    from provisioning.sandbox.control import BANNER

    found = recorded_cluster(name)
    banner = found.banner if found is not None else BANNER if cloud == "sandbox" else ""
    if banner:
        console.info(banner)
    if not yes:
        if not sys.stdin.isatty():
            raise InputError(f"`deepvm down {name}` deletes the cluster; confirm with --yes")
        if not typer.confirm(f"Delete cluster {name} and everything tagged with it?"):
            raise typer.Exit(1)
    if found is not None and found.is_up:
        _stop_running_jobs(found, cancel_jobs)
    with progress_reporter(quiet=as_json) as report:
        result = down(name, cloud=cloud, region=region, report=report)
    if result.unreadable_state:
        console.warning(f"{result.unreadable_state}: cluster {name} was found by its tags alone; move the file "
                        "aside (with its -wal and -shm files) before the next command")  # fmt: skip
    _summary(result, as_json)


def _summary(result: DownResult, as_json: bool) -> None:
    """What was deleted, and what the cluster cost in all and how long it ran (from its record)."""
    from provisioning.cost import cost_fields

    if as_json:
        console.print_json({"name": result.name, "deleted": result.deleted, "had_record": result.had_record,
                            **cost_fields(result.cost)})  # fmt: skip
        return
    for item in result.deleted:
        console.out.print(f"deleted {item}")
    line = f"cluster {result.name} is down" + ("" if result.deleted else " (nothing was left to delete)")
    if result.cost is not None:
        line += f": ran {console.duration(result.cost.runtime_s)}, cost ${result.cost.usd:.4f}"
        line += " at AWS prices (the sandbox bills nothing)" if result.cloud == "sandbox" else ""
    console.info(line)


def _stop_running_jobs(cluster: Cluster, cancel_jobs: bool) -> None:
    """Refuse to take a running managed job's cluster away, unless told to cancel the job first. A head
    that cannot be asked (it died, or the job never started) holds nothing to wait for."""
    from deepvm_cli.jobs_cmd import default_python
    from provisioning.errors import DeepvmError
    from training.client.managed import cancel, follow, head_of, running_jobs

    name = cluster.name
    try:
        head = head_of(cluster, default_python(cluster))
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
