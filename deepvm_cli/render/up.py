"""What `deepvm up` is about to buy, shown before it asks, and what `--dry-run` would create.

All of it goes to stderr except the dry run's own answer, so that `up --json` still prints exactly one
JSON document on stdout.
"""

from __future__ import annotations

from typing import Any

from rich.table import Table

from deepvm_cli.ui import console
from provisioning.planner.plan import Plan


def node_count(plan: Plan) -> int:
    return sum(g.count for g in plan.nodes)


def render_launch(plans: tuple[Plan, ...], cloud: str) -> None:
    """The first plan's nodes, $/h, region and zone, and cloud; the alternatives `up` may fall back to."""
    plan = plans[0]
    console.info(
        f"deepvm up launches on {cloud}, in {plan.region} ({plan.availability_zone}), a "
        f"{plan.architecture.value} cluster:"
    )
    table = Table(show_edge=False, pad_edge=False)
    for column in ("role", "market", "type", "count", "$/h each", "$/h"):
        table.add_column(column, justify="right" if column.startswith(("count", "$")) else "left")
    for g in plan.nodes:
        table.add_row(
            g.role.value,
            g.market.value,
            g.instance_type,
            str(g.count),
            f"{g.usd_per_hour:.4f}",
            f"{g.count * g.usd_per_hour:.4f}",
        )
    console.err.print(table)
    source = plan.catalog_source or "the plan"
    as_of = f", as of {plan.prices_as_of}" if plan.prices_as_of else ""
    console.info(f"{node_count(plan)} nodes, ${plan.price_per_hour:.4f}/h in all (prices: {source}{as_of})")
    if len(plans) > 1:
        dearest = max(p.price_per_hour for p in plans[1:])
        console.info(f"if capacity runs short: {len(plans) - 1} alternative plan(s), at most ${dearest:.4f}/h")


def render_dry_run(cloud: str, name: str, plans: tuple[Plan, ...], resources: list[str], as_json: bool) -> None:
    """What `up` would create, on stdout; nothing was created."""
    if as_json:
        document: dict[str, Any] = {
            "dry_run": True,
            "cloud": cloud,
            "name": name,
            "plans": [p.to_dict() for p in plans],
            "would_create": resources,
        }
        console.print_json(document)
        return
    for resource in resources:
        console.out.print(f"would create {resource}", soft_wrap=True, markup=False)
    console.info("dry run: nothing was created")
