"""`deepvm down`: delete a cluster and everything tagged with it.

Before it asks, `down` finds what it would delete (the record, or what is tagged with the name in the
cloud), so nobody confirms deleting a cluster that is not there; the question names the cluster (and
where its name came from when the user gave none), its running nodes, their $/h and its running jobs.
With --yes nothing is asked, so --yes needs the cluster's name: a default never deletes anything.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING

import typer

from deepvm_cli.ui import console
from deepvm_cli.ui.cloud_progress import progress_reporter
from deepvm_cli.ui.cluster_choice import ClusterChoice, Source, choose_cluster, forget_cluster
from deepvm_cli.ui.ended import finish_ended_clusters
from deepvm_cli.ui.user_config import Defaults
from provisioning.core.errors import InputError

if TYPE_CHECKING:
    from provisioning.clusters.handle import Cluster
    from provisioning.clusters.lifecycle import DownPreview, DownResult
    from training.client.managed import Head
    from training.shared.records import JobSummary


@dataclass(frozen=True)
class RunningJobs:
    """The cluster's managed jobs that run now, as its head node says (known False: it could not be asked)."""

    head: Head | None
    jobs: tuple[JobSummary, ...]
    known: bool

    def text(self, cancel_jobs: bool) -> str:
        if not self.known:
            return "running jobs unknown (its head node did not answer)"
        if not self.jobs:
            return "no running jobs"
        ids = ", ".join(j.job_id for j in self.jobs)
        return f"running job {ids}" + (" (cancelled first, after a checkpoint)" if cancel_jobs else "")


NONE_RUNNING = RunningJobs(None, (), True)


def down_command(
    name: str | None = typer.Argument(
        None, help="Cluster name (default: the config file's cluster, else the last one used, else deepvm)."
    ),
    yes: bool = typer.Option(False, "--yes", "-y", help="Do not ask for confirmation (needs NAME)."),
    cloud: str | None = typer.Option(
        None, "--cloud", help="Where to sweep when the cluster is not in the local state (default: auto)."
    ),
    region: str | None = typer.Option(None, "--region", help="Region to sweep when the cluster is not recorded."),
    cancel_jobs: bool = typer.Option(
        False, "--cancel-jobs", help="Cancel the cluster's running managed jobs (after a checkpoint) first."
    ),
    keep_outputs: bool = typer.Option(
        False,
        "--keep-outputs",
        help="Keep the cluster's outputs bucket (its jobs' outputs, logs and checkpoints in "
        "S3); by default it is deleted with the cluster.",
    ),
    cluster_id: str = typer.Option(
        "",
        "--cluster-id",
        help="Which cluster of that name to sweep when it is not recorded here and several "
        "are tagged (their ids are listed then).",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print what was deleted as JSON."),
) -> None:
    """Terminate the instances; delete fleet, launch template, security group, key pair; sweep by tag."""
    from provisioning.cloud.types import CloudKind
    from provisioning.clusters.lifecycle import down, down_preview
    from provisioning.sandbox.control import BANNER

    finish_ended_clusters()  # what a head that took its cluster down left: said first
    defaults = Defaults(tolerant=True)  # a broken config file never stops a teardown
    choice = choose_cluster(name, defaults)
    if yes and choice.source is not Source.GIVEN:
        raise InputError(
            f"down --yes deletes without asking, so it needs the cluster's name: `deepvm down "
            f"{choice.name} --yes` deletes {choice.name} ({choice.origin()})"
        )
    name = choice.name
    cloud = defaults.fill(cloud, "cloud") or "auto"
    region = defaults.fill(region, "region")
    preview = down_preview(name, cloud, region, cluster_id)
    found = preview.cluster
    if found is None:
        defaults.announce()  # the file's cloud and region chose where the sweep looked
    banner = found.banner if found is not None else BANNER if cloud == CloudKind.SANDBOX else ""
    if banner:
        console.info(banner)
    if not yes and not console.interactive():
        raise InputError(
            f"down would delete cluster {name}; `deepvm down {name} --yes` confirms (no terminal to ask on)"
        )
    running = _running_jobs(found, cancel_jobs) if found is not None and found.is_up else NONE_RUNNING
    if not yes:
        _confirm(choice, preview, running, cancel_jobs)
    if running.head is not None:
        _cancel(running.head, running.jobs)
    with progress_reporter(quiet=as_json) as report:
        result = down(name, cloud=cloud, region=region, report=report, cluster_id=cluster_id, keep_outputs=keep_outputs)
    forget_cluster(name)
    if result.unreadable_state:
        console.warning(
            f"{result.unreadable_state}: cluster {name} was found by its tags alone; move the file "
            "aside (with its -wal and -shm files) before the next command"
        )
    _summary(result, as_json)


def _summary(result: DownResult, as_json: bool) -> None:
    """What was deleted, and what the cluster cost in all and how long it ran (from its record)."""
    from provisioning.clusters.cost import cost_fields

    if as_json:
        console.print_json(
            {
                "name": result.name,
                "deleted": result.deleted,
                "had_record": result.had_record,
                **cost_fields(result.cost),
                "outputs_kept": result.outputs_kept or None,
            }
        )
        return
    for item in result.deleted:
        console.out.print(f"deleted {item}")
    line = f"cluster {result.name} is down" + ("" if result.deleted else " (nothing was left to delete)")
    if result.cost is not None:
        line += f": ran {console.duration(result.cost.runtime_s)}, cost ${result.cost.usd:.4f}"
        line += " at AWS prices (the sandbox bills nothing)" if result.cloud and not result.cloud.bills else ""
    if result.outputs_kept:
        line += f"; its outputs stay in s3://{result.outputs_kept} (`deepvm down {result.name}` deletes them)"
    console.info(line)


def _confirm(choice: ClusterChoice, preview: DownPreview, running: RunningJobs, cancel_jobs: bool) -> None:
    """Ask, naming what would be deleted."""
    name = choice.name
    origin = choice.origin("`deepvm down NAME`")
    named = f"{name} ({origin})" if origin else name
    if not console.confirm(f"Delete {_what(named, preview, running, cancel_jobs)}?"):
        console.info("nothing deleted")
        raise typer.Exit(1)


def _what(named: str, preview: DownPreview, running: RunningJobs, cancel_jobs: bool) -> str:
    """What the question says is deleted: the cluster's nodes, $/h and jobs; or what is tagged with it."""
    from provisioning.clusters.handle import RUNNING

    cluster = preview.cluster
    if cluster is None:
        kinds = Counter(item.kind for item in preview.tagged)
        listed = ", ".join(f"{count} {kind}{'s' * (count > 1)}" for kind, count in kinds.items())
        return f"what is tagged with cluster {named} (it is not in the local state): {listed}"
    view = cluster.view(refresh=False)
    if not cluster.is_up:
        return f"cluster {named}, {view.cluster.status.value} (and whatever is still tagged with it)"
    nodes = Counter(n.market.value for n in view.nodes if n.state == RUNNING)
    shown = " + ".join(f"{count} {market}" for market, count in sorted(nodes.items(), reverse=True))
    total = sum(nodes.values())
    return (
        f"cluster {named}: {total} node{'s' * (total != 1)} ({shown or 'none running'}), "
        f"${view.usd_per_hour:.4f}/h, {running.text(cancel_jobs)}"
    )


def _running_jobs(cluster: Cluster, cancel_jobs: bool) -> RunningJobs:
    """The cluster's running managed jobs; a refusal when there are some and --cancel-jobs was not given (a
    running job's cluster is not taken away). A head that cannot be asked (it died, or no job ever ran)
    holds nothing to wait for."""
    from provisioning.core.errors import DeepvmError
    from training.client.managed import head_of, running_jobs

    name = cluster.name
    try:
        with console.stages(f"asking the head node of {name} about running jobs"):  # up to SSH's timeout
            head = head_of(cluster, cluster.node_python)
            running = tuple(running_jobs(head))
    except DeepvmError as exc:
        console.warning(f"could not ask the head node of {name} about running jobs ({exc})")
        return RunningJobs(None, (), known=False)
    if running and not cancel_jobs:
        raise InputError(
            f"cluster {name} has a running job ({', '.join(s.job_id for s in running)}); "
            f"`deepvm cancel {running[0].job_id}` stops it, "
            f"or `deepvm down {name} --cancel-jobs` cancels it and deletes the cluster"
        )
    return RunningJobs(head, running, known=True)


def _cancel(head: Head, jobs: tuple[JobSummary, ...]) -> None:
    """Cancel each job after a checkpoint, and wait until it has stopped."""
    from training.client.managed import cancel, follow

    for job in jobs:
        console.info(f"cancelling {job.job_id} (after a checkpoint)")
        cancel(head, job.job_id, now=False)
        follow(head, job.job_id, lambda record: None, tail=0)


def register(app: typer.Typer) -> None:
    app.command("down")(down_command)
