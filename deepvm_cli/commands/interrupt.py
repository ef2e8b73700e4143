"""`deepvm interrupt`: rehearse a Spot interruption of one node."""

from __future__ import annotations

import typer

from deepvm_cli.ui import console
from deepvm_cli.ui.flags import DAY_S, at_least


def interrupt_command(
    node: str = typer.Argument(..., help="Instance id of a spot node (see `deepvm status`)."),
    after: int = typer.Option(
        120, "--after", callback=at_least(0, DAY_S), help="Seconds between the notice and the interruption."
    ),
    fis_role_arn: str = typer.Option(
        "", "--fis-role-arn", envvar="DEEPVM_FIS_ROLE_ARN", help="AWS only: IAM role AWS FIS assumes."
    ),
    rebalance_only: bool = typer.Option(
        False, "--rebalance-only", help="Sandbox only: post a rebalance recommendation alone, and interrupt nothing."
    ),
) -> None:
    """Post a Spot interruption notice now and interrupt the node after --after seconds.

    Sandbox: the notice appears in the node's instance metadata and the sandbox terminates it on time.
    AWS: an AWS FIS experiment (aws:ec2:send-spot-instance-interruptions) does both. --rebalance-only posts
    the rebalance recommendation alone (sandbox only: FIS posts it with the notice).
    """
    from provisioning.clusters.handle import Cluster

    cluster, record = Cluster.of_node(node)
    if cluster.banner:
        console.info(cluster.banner)
    console.info(cluster.interrupt(record, after, fis_role_arn, rebalance_only))


def register(app: typer.Typer) -> None:
    app.command("interrupt")(interrupt_command)
