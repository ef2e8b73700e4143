"""`deepvm plan`: what cluster to rent for a price cap (or a deadline), and save it for `deepvm up`."""

from __future__ import annotations

from enum import Enum
from pathlib import Path

import typer

from deepvm_cli import console
from deepvm_cli.flags import MAX_PRICE, at_least, positive, region_list
from provisioning.errors import InputError
from provisioning.planner.plan_document import MAX_PLANS

MAX_HOURS = 100_000.0  # --deadline: eleven years
MAX_WORK_PFLOP = 1e12  # --work: a thousand times the largest published training run
MAX_CHECKPOINT_GIB = 100_000.0  # --checkpoint-size
MAX_BUFFER_SLOTS = 64
MAX_NODES = 4096  # --node-limit: the planner's own bound on nodes of one type (planner/options.py)


class ObjectiveChoice(str, Enum):
    deepvm = "deepvm"
    throughput = "throughput"
    cost = "cost"


def plan(
    max_price: float = typer.Option(
        None, "--max-price", callback=positive(MAX_PRICE), help="Price cap for the cluster, USD per hour."
    ),
    region: str = typer.Option(
        None, "--region", callback=region_list, help="Region, comma-separated regions, or 'all'."
    ),
    catalog_file: Path = typer.Option(None, "--catalog", help="Plan on this catalog file alone (no AWS)."),
    objective: ObjectiveChoice = typer.Option(ObjectiveChoice.deepvm, "--objective", help="What 'best' means."),
    deadline: float = typer.Option(
        None, "--deadline", callback=positive(MAX_HOURS), help="Hours: the cheapest plan that finishes --work."
    ),
    work: float = typer.Option(
        None, "--work", callback=positive(MAX_WORK_PFLOP), help="Training work in PFLOP (with --deadline)."
    ),
    checkpoint_size: float = typer.Option(
        0.5, "--checkpoint-size", callback=at_least(0, MAX_CHECKPOINT_GIB), help="One checkpoint, GiB."
    ),
    buffer_slots: int = typer.Option(
        2, "--buffer-slots", callback=positive(MAX_BUFFER_SLOTS), help="Checkpoints the holders keep in RAM."
    ),
    node_limit: int = typer.Option(
        None, "--node-limit", callback=positive(MAX_NODES), help="N nodes per type and market, not quotas."
    ),
    mix: bool = typer.Option(False, "--mix", help="Allow several GPU types in one cluster."),
    top: int = typer.Option(3, "--top", callback=positive(MAX_PLANS), help="How many ranked plans to show."),
    offline: bool = typer.Option(False, "--offline", help="Use the built-in price snapshot."),
    refresh: bool = typer.Option(False, "--refresh", help="Ignore cached AWS market data."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """Rank instance types by FLOPP and solve DeepVM's MILP for the most cost-effective cluster."""
    from provisioning.planner import Objective, PlanRequest, plan_cluster
    from provisioning.planner.saved import save_plans
    from provisioning.sources import resolve_catalog

    request = PlanRequest(
        max_price=_check_price(max_price, deadline),
        objective=Objective(objective.value),
        checkpoint_size_gib=checkpoint_size,
        buffer_slots=buffer_slots,
        node_limit=node_limit,
        mix=mix,
        deadline_hours=deadline,
        work_pflop=_work(work, deadline),
        top=top,
        regions=_regions(region),
    )
    catalog = resolve_catalog(
        regions=list(request.regions) if request.regions else None,
        offline=offline,
        catalog_file=catalog_file,
        refresh=refresh,
    )
    for message in catalog.warnings:
        console.warning(message)
    result = plan_cluster(catalog, request)
    saved = save_plans(result.plans, request)
    if as_json:
        from deepvm_cli.render_plan import plan_result_json

        console.print_json(plan_result_json(result, catalog, saved))
        return
    from deepvm_cli.render_plan import render_plan_result

    render_plan_result(result, catalog, saved)


def _check_price(max_price: float | None, deadline: float | None) -> float | None:
    if max_price is None:
        if deadline is None:
            raise InputError("--max-price is required (USD per hour for the cluster), e.g. --max-price 12")
        return None  # a deadline alone: the cheapest plan that finishes in time, at any hourly price
    return max_price


def _work(work: float | None, deadline: float | None) -> float | None:
    if (work is None) != (deadline is None):
        raise InputError("--deadline and --work go together: the cheapest plan finishing WORK PFLOP in time")
    return work


def _regions(region: str | None) -> tuple[str, ...] | None:
    if region is None:
        return None
    return tuple(r.strip() for r in region.split(",") if r.strip())


def register(app: typer.Typer) -> None:
    app.command("plan")(plan)
