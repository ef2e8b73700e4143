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
    with progress_reporter(quiet=as_json) as report:
        result = down(name, cloud=cloud, region=region, report=report)
    if as_json:
        console.print_json({"name": result.name, "deleted": result.deleted, "had_record": result.had_record})
        return
    for item in result.deleted:
        console.out.print(f"deleted {item}")
    console.info(f"cluster {name} is down" + ("" if result.deleted else " (nothing was left to delete)"))


def register(app: typer.Typer) -> None:
    app.command("down")(down_command)
