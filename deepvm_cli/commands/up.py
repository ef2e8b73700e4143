"""`deepvm up`: launch the saved plan (or a given one, or a fresh one for a price) as a cluster.

`up` spends the user's money, so it never launches without a yes: it shows the nodes, their $/h, the
region and zone and the cloud, then asks on a terminal. `--yes` answers for scripts; without a terminal
and without `--yes` it refuses, before anything is created (CI and cron have no one to ask). `--dry-run`
shows what would be created and creates nothing. A plan file is validated before all of this
(provisioning/clusters/plan_choice.py).
"""

from __future__ import annotations

from pathlib import Path

import typer

from deepvm_cli.render.cluster import render_cluster
from deepvm_cli.render.up import node_count, render_dry_run, render_launch
from deepvm_cli.ui import console
from deepvm_cli.ui.cloud_progress import progress_reporter
from deepvm_cli.ui.cluster_choice import choose_cluster, remember_cluster
from deepvm_cli.ui.flags import DAY_S, MAX_PRICE, positive, region_list
from deepvm_cli.ui.user_config import Defaults
from provisioning.cloud.types import ShortagePolicy
from provisioning.core.errors import InputError
from provisioning.core.home import deepvm_home
from provisioning.planner.plan import Plan
from training.shared.guard import MAX_IDLE_MINUTES


def up_command(
    plan: Path | None = typer.Option(None, "--plan", help="Plan file (default: the plan `deepvm plan` saved)."),
    max_price: float | None = typer.Option(
        None, "--max-price", callback=positive(MAX_PRICE), help="Plan now for this USD/hour cap."
    ),
    name: str | None = typer.Option(
        None, "--name", help="Cluster name (default: the config file's cluster, else the last one used, else deepvm)."
    ),
    region: str | None = typer.Option(
        None,
        "--region",
        callback=region_list,
        help="Region (must match the plan's; with --max-price, the config file's region by default).",
    ),
    cloud: str | None = typer.Option(
        None, "--cloud", help="auto | aws | sandbox (auto, the default: sandbox without AWS keys)."
    ),
    on_shortage: ShortagePolicy = typer.Option(ShortagePolicy.FAIL, "--on-shortage", help="fail | accept | next-plan"),
    ssh_cidr: str | None = typer.Option(None, "--ssh-cidr", help="Who may reach SSH (default: this machine)."),
    ami: str | None = typer.Option(None, "--ami", help="AMI id (default: the Deep Learning AMI)."),
    subnet: str | None = typer.Option(None, "--subnet", help="Subnet id (default: the zone's default subnet)."),
    ssh_user: str | None = typer.Option(None, "--ssh-user", help="Login user of the image."),
    instance_profile: str | None = typer.Option(
        None,
        "--instance-profile",
        help="IAM instance profile (name or ARN) for the nodes: their AWS credentials, e.g. for checkpoints "
        "(DeepCheck L3) or data on S3.",
    ),
    controller_profile: str | None = typer.Option(
        None,
        "--controller-profile",
        help="Existing IAM instance profile (name or ARN) for the head node: the job controller's cloud "
        "rights. Default: deepvm creates a role and profile for the cluster, limited by its tag.",
    ),
    wait: bool = typer.Option(True, "--wait/--no-wait", help="Wait until every node answers over SSH."),
    timeout: float = typer.Option(
        900.0, "--timeout", callback=positive(DAY_S), help="Seconds to wait for running and reachable nodes."
    ),
    autodown: float | None = typer.Option(
        None,
        "--autodown",
        callback=positive(MAX_IDLE_MINUTES),
        help="Minutes without a job after which the cluster's head takes it down (a watch on "
        "the head; `deepvm status` then shows it ended).",
    ),
    yes: bool = typer.Option(False, "--yes", "-y", help="Launch without asking (scripts must pass it)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Show what would be created; create nothing."),
    as_json: bool = typer.Option(False, "--json", help="Print the cluster as JSON."),
) -> None:
    """Launch a cluster: key pair, security group, launch template, EC2 Fleet; wait for SSH."""
    from provisioning.clusters.lifecycle import UpRequest, up  # boto3 loads only for cloud commands
    from provisioning.clusters.target import resolve_target

    if plan is not None and max_price is not None:
        raise InputError("give --plan or --max-price, not both")
    defaults = Defaults()
    choice = choose_cluster(name, defaults, last=False)
    name = choice.name
    cloud = defaults.fill(cloud, "cloud") or "auto"
    if max_price is not None:
        region = defaults.fill(region, "region")  # a plan file carries its region; a plan made now takes the default
    defaults.announce()
    deepvm_home()  # keys, state and locks go there: a home that cannot be written fails before anything is shown
    target = resolve_target(cloud)
    if target.banner:
        console.info(target.banner)
    plans = _plans(plan, max_price, region, offline=not target.kind.bills)
    if region and plans[0].region != region:
        raise InputError(f"the plan is for {plans[0].region}, not {region}; plan again with --region {region}")
    choice.announce("--name NAME")
    launchable = plans if on_shortage is ShortagePolicy.NEXT_PLAN else plans[:1]
    crowded = target.check_capacity(max(node_count(p) for p in launchable))
    if crowded:
        console.warning(crowded)
    _warn_if_open_to_all(ssh_cidr)
    asking = not (yes or dry_run)
    if asking or not as_json:
        render_launch(launchable, target.kind)
    if dry_run:
        from provisioning.cloud.aws.provider import planned_resources

        render_dry_run(target.kind, name, launchable, planned_resources(name, plans[0]), as_json)
        return
    if asking:
        _confirm(plans[0])
    request = UpRequest(
        name=name,
        plans=plans,
        on_shortage=on_shortage,
        ssh_cidr=ssh_cidr,
        image_id=ami,
        subnet_id=subnet,
        ssh_user=ssh_user,
        instance_profile=instance_profile,
        controller_profile=controller_profile,
        wait_ssh=wait,
        timeout_s=timeout,
    )
    with progress_reporter(quiet=as_json) as report:
        result = up(target, request, report)
    remember_cluster(name)
    if autodown is not None:
        _start_idle_watch(name, autodown)
    if as_json:
        console.print_json(result.view.to_dict())
        return
    if not result.created:
        console.info(f"cluster {name} is already up; nothing launched (`deepvm down {name}` removes it)")
    elif result.plan_index:
        console.warning(f"launched alternative plan {result.plan_index + 1} after a capacity shortage")
    render_cluster(result.view)
    if result.created:
        console.info(f"next: `deepvm status {name}`, and `deepvm down {name}` when done")


def _start_idle_watch(name: str, minutes: float) -> None:
    """`--autodown N`: the head's watch that takes the cluster down after N minutes without a job."""
    from provisioning.clusters.handle import Cluster
    from training.client.idle_watch import start_idle_watch
    from training.shared.progress import JobReporter

    start_idle_watch(Cluster.open_running(name), minutes, JobReporter(note=console.info))


def _plans(path: Path | None, max_price: float | None, region: str | None, offline: bool) -> tuple[Plan, ...]:
    """The plans to launch, best first: planned now for --max-price, else read (and checked) from a file."""
    from provisioning.clusters.plan_choice import load_plans, plans_for_price  # pydantic loads only for `up`

    if max_price is not None:
        return plans_for_price(max_price, region, offline=offline)
    loaded = load_plans(path)
    for message in loaded.warnings:
        console.warning(message)
    return loaded.plans


def _warn_if_open_to_all(ssh_cidr: str | None) -> None:
    """One line when --ssh-cidr admits every address; a malformed range is refused here, before anything."""
    if ssh_cidr is None:
        return
    from provisioning.cloud.aws.network import check_cidr, world_open_warning

    warning = world_open_warning(check_cidr(ssh_cidr))
    if warning:
        console.warning(warning)


def _confirm(plan: Plan) -> None:
    """Ask before spending; refuse where no one can answer."""
    what = f"launch {node_count(plan)} nodes for ${plan.price_per_hour:.4f}/h"
    if not console.interactive():
        raise InputError(f"up would {what}; pass --yes to confirm (no terminal to ask on)")
    if not console.confirm(f"{what[0].upper()}{what[1:]}?"):
        console.info("nothing launched")
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command("up")(up_command)
