"""`deepvm plan`: what cluster to rent for a price cap (or a deadline), and save it for `deepvm up`."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from deepvm_cli.ui import console, plan_flags
from deepvm_cli.ui.flags import DAY_S, at_least, positive
from deepvm_cli.ui.user_config import Defaults
from provisioning.core.errors import InputError
from provisioning.planner.plan import MAX_PLANS

if TYPE_CHECKING:
    from provisioning.planner.interruptions import Interruptions


class ObjectiveChoice(str, Enum):
    deepvm = "deepvm"
    throughput = "throughput"
    cost = "cost"


def plan(
    max_price: float = plan_flags.max_price_option,
    region: str = plan_flags.region_option,
    catalog_file: Path = plan_flags.catalog_option,
    objective: ObjectiveChoice = typer.Option(ObjectiveChoice.deepvm, "--objective", help="What 'best' means."),
    deadline: float = typer.Option(
        None,
        "--deadline",
        callback=positive(plan_flags.MAX_HOURS),
        help="Hours: the cheapest plan that finishes --work.",
    ),
    work: float = typer.Option(
        None, "--work", callback=positive(plan_flags.MAX_WORK_PFLOP), help="Training work in PFLOP (with --deadline)."
    ),
    checkpoint_size: float = plan_flags.checkpoint_size_option,
    buffer_slots: int = plan_flags.buffer_slots_option,
    node_limit: int = plan_flags.node_limit_option,
    mix: bool = plan_flags.mix_option,
    top: int = typer.Option(3, "--top", callback=positive(MAX_PLANS), help="How many ranked plans to show."),
    offline: bool = plan_flags.offline_option,
    refresh: bool = plan_flags.refresh_option,
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
    interruptions: str = typer.Option(
        None,
        "--interruptions",
        help="Rank by expected goodput per dollar with Spot interruptions: a band (<5%, 5-10%, 10-15%, 15-20%, "
        ">20% per month), a rate per node-hour, a trace name or file, or 'auto' (each type's recorded band).",
    ),
    relaunch_time: float = typer.Option(
        None,
        "--relaunch-time",
        callback=at_least(0, DAY_S),
        help="With --interruptions: seconds a relaunch stops the cluster (6.3, measured).",
    ),
    replacement_delay: float = typer.Option(
        None,
        "--replacement-delay",
        callback=at_least(0, DAY_S),
        help="With --interruptions: seconds until a replacement spot node trains (300, estimated).",
    ),
    profile_files: list[Path] = plan_flags.profile_option,
) -> None:
    """Rank instance types by FLOPP and solve DeepVM's MILP for the most cost-effective cluster."""
    from provisioning.catalog.sources import resolve_catalog
    from provisioning.planner import Objective, PlanRequest, plan_cluster
    from provisioning.planner.saved import save_plans

    defaults = Defaults()
    if deadline is None:  # a deadline plan is at any hourly price unless --max-price caps it here
        max_price = defaults.fill(max_price, "max_price")
    if catalog_file is None:  # a catalog file's regions are its own
        region = defaults.fill(region, "region")
    defaults.announce()
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
        regions=plan_flags.regions(region),
        interruptions=_interruptions(interruptions, relaunch_time, replacement_delay),
    )
    catalog = resolve_catalog(
        regions=list(request.regions) if request.regions else None,
        offline=offline,
        catalog_file=catalog_file,
        refresh=refresh,
    )
    for message in catalog.warnings:
        console.warning(message)
    catalog, profiles = plan_flags.with_profiles(profile_files or [], catalog)
    with console.stages("planning") as stage:
        result = plan_cluster(catalog, request, progress=stage)
    report = None
    if request.interruptions is not None:
        from provisioning.planner.solve import interruption_report

        report = interruption_report(catalog, request, result)
    saved = save_plans(result.plans, request)
    if as_json:
        from deepvm_cli.render.plan import plan_result_json

        document = plan_result_json(result, catalog, saved, profiles)
        if report is not None:
            from deepvm_cli.render.interruptions import interruptions_json

            document["interruptions"] = interruptions_json(report)
        console.print_json(document)
        return
    from deepvm_cli.render.plan import render_plan_result

    render_plan_result(result, catalog, saved, report, profiles)


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


def _interruptions(spec: str | None, relaunch_s: float | None, replacement_s: float | None) -> Interruptions | None:
    """The Interruptions `--interruptions` asks to count (None without it: nothing of the simulator loads)."""
    if spec is None:
        for flag, value in (("--relaunch-time", relaunch_s), ("--replacement-delay", replacement_s)):
            if value is not None:
                raise InputError(f"{flag} applies with --interruptions (what a Spot interruption costs a plan)")
        return None
    from provisioning.planner.interruptions import RecoveryCosts
    from simulation.plan_interruptions import plan_interruptions

    defaults = RecoveryCosts()
    recovery = RecoveryCosts(
        relaunch_s=defaults.relaunch_s if relaunch_s is None else relaunch_s,
        replacement_delay_s=defaults.replacement_delay_s if replacement_s is None else replacement_s,
    )
    return plan_interruptions(spec, recovery)


def register(app: typer.Typer) -> None:
    app.command("plan")(plan)
