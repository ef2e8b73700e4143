"""`deepvm cost-report`: what every cluster ever recorded has cost, running and terminated, with totals.

Costs are the state store's (provisioning/clusters/cost.py): each node's planned price over the time it ran. The
cloud's bill is the authority (a Spot price that moved after planning is not followed); the sandbox's
clusters bill nothing, so their AWS-priced cost is totalled apart.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import typer
from rich import box
from rich.table import Table

from deepvm_cli.ui import console

if TYPE_CHECKING:
    from provisioning.cloud.types import CloudKind
    from provisioning.clusters.store import ClusterBill


@dataclass(frozen=True)
class CloudTotal:
    """One cloud's line under the table: its clusters, what they cost, what they bill per hour now."""

    cloud: CloudKind
    clusters: int
    usd: float
    usd_per_hour: float

    def to_dict(self) -> dict[str, object]:
        return {
            "cloud": self.cloud.value,
            "clusters": self.clusters,
            "cost_usd": round(self.usd, 6),
            "usd_per_hour": round(self.usd_per_hour, 6),
        }


def totals(bills: Sequence[ClusterBill]) -> list[CloudTotal]:
    """One total per cloud (AWS's money and the sandbox's make-believe are never added together)."""
    clouds = sorted({b.cloud for b in bills})
    return [
        CloudTotal(
            cloud,
            sum(1 for b in bills if b.cloud == cloud),
            sum(b.cost.usd for b in bills if b.cloud == cloud),
            sum(b.cost.usd_per_hour for b in bills if b.cloud == cloud),
        )
        for cloud in clouds
    ]


def render(bills: Sequence[ClusterBill]) -> None:
    """The table, then a total per cloud. Fits 80 columns: names and clouds wrap, numbers and times never."""
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 1, 0, 0))
    table.add_column("cluster", overflow="fold")
    table.add_column("cloud", overflow="fold")
    table.add_column("state", no_wrap=True)
    table.add_column("launched", no_wrap=True)
    table.add_column("runtime", no_wrap=True, justify="right")
    table.add_column("$/h", no_wrap=True, justify="right")
    table.add_column("total $", no_wrap=True, justify="right")
    for bill in bills:
        cost = bill.cost
        table.add_row(
            bill.name,
            f"{bill.cloud}\n{bill.region}",
            bill.status.value,
            cost.launched.strftime("%Y-%m-%d %H:%M") if cost.launched else "-",
            console.duration(cost.runtime_s),
            f"{cost.usd_per_hour:.4f}" if cost.billing else "-",
            f"{cost.usd:.4f}",
        )
    console.out.print(table)
    for total in totals(bills):
        now = f", billing ${total.usd_per_hour:.4f}/h now" if total.usd_per_hour else ""
        sandbox = " at AWS prices (the sandbox bills nothing)" if not total.cloud.bills else ""
        plural = "s" if total.clusters != 1 else ""
        console.out.print(f"total {total.cloud}: ${total.usd:.4f}{sandbox} for {total.clusters} cluster{plural}{now}")


def cost_report_command(
    as_json: bool = typer.Option(False, "--json", help="Print {clusters: [...], totals: [...]} as JSON."),
) -> None:
    """Show what every cluster ever recorded has cost, running or terminated, with a total per cloud."""
    from deepvm_cli.ui.ended import finish_ended_clusters
    from provisioning.clusters.lifecycle import cost_report

    finish_ended_clusters()  # a cluster its head took down ends at the head's time and cost, not now
    bills = cost_report()
    if as_json:
        console.print_json({"clusters": [b.to_dict() for b in bills], "totals": [t.to_dict() for t in totals(bills)]})
        return
    if not bills:
        console.info("no clusters recorded yet; `deepvm up` starts one")
        return
    render(bills)
    console.info("estimates at the plans' prices; the cloud's bill is the authority")


def register(app: typer.Typer) -> None:
    app.command("cost-report")(cost_report_command)
