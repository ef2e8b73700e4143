"""How one cluster reads on the screen: its name, state and cost line, then a table of its nodes that fits
80 columns (`deepvm status`, and `deepvm up` once it has launched)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich import box
from rich.table import Table

from deepvm_cli.ui import console

if TYPE_CHECKING:
    from provisioning.clusters.handle import ClusterView


def _clock(timestamp: str) -> str:
    """ "2026-11-23 14:02" from an ISO timestamp (UTC, as stored): the minute is what a reader needs."""
    return timestamp.replace("T", " ")[:16] if timestamp else "-"


def up(view: ClusterView) -> bool:
    from provisioning.clusters.store import ClusterStatus

    return view.cluster.status is ClusterStatus.UP


def _cost(view: ClusterView) -> str:
    """While it bills: its $/h, cost so far and time up; once down: how long it ran, when it ended and what
    it cost in all (no $/h: it bills nothing)."""
    cost = view.cost
    if up(view) or cost.billing:
        return f"${view.usd_per_hour:.4f}/h  cost so far ${cost.usd:.4f}  up {console.duration(cost.runtime_s)}"
    ended = f" to {_clock(cost.ended.isoformat())}" if cost.ended else ""
    return f"ran {console.duration(cost.runtime_s)}{ended}  cost ${cost.usd:.4f} in all"


def render_cluster(view: ClusterView) -> None:
    c = view.cluster
    # two lines: at 80 columns a long name wraps the first, never the figures of the second
    console.out.print(
        f"[bold]{c.name}[/]  {c.status.value}  {c.cloud}  {c.availability_zone}  {c.plan.architecture.value}"
    )
    console.out.print(_cost(view), markup=False)
    # Fits 80 columns: ids, addresses and prices never wrap or get cut; role, market and type share a cell.
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=0)
    for column in ("instance", "node", "state", "address", "$/h", "launched"):
        table.add_column(column, no_wrap=column != "node", justify="right" if column == "$/h" else "left")
    for n in view.nodes:
        table.add_row(
            n.instance_id,
            f"{n.market.value} {n.role.value}\n{n.instance_type}",
            n.state,
            n.address or "-",
            f"{n.usd_per_hour:.4f}",
            _clock(n.launched_at),
        )
    console.out.print(table)
    if c.plan.prices_as_of:
        console.out.print(f"prices as planned ({c.plan.catalog_source or 'catalog'}, as of {c.plan.prices_as_of})")
