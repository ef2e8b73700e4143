"""`deepvm simulate`: what a plan really costs and how long it takes once its Spot nodes get interrupted.

Every policy (simulation/policies.py) runs the same work on the same runs and seed; the answer is a table
per policy (or one JSON document, or a PNG of the CDFs). numpy, the planner's solver and matplotlib load
only inside the command, so registering it costs `deepvm plan` nothing.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from deepvm_cli.ui import console, plan_flags
from deepvm_cli.ui.flags import DAY_S, MAX_PRICE, MAX_SEED, MAX_STEPS, at_least, positive
from deepvm_cli.ui.user_config import Defaults
from provisioning.core.errors import InputError

if TYPE_CHECKING:
    from provisioning.catalog.model import Catalog
    from provisioning.planner.plan import Plan
    from provisioning.planner.request import PlanRequest
    from simulation.compare import Caps
    from simulation.recovery import RecoveryModel, Workload
    from simulation.trace import Trace
    from simulation.zones import TraceFor, TraceSpec, ZoneTraces

MAX_RUNS = 100_000  # memory grows with runs x Spot nodes x nodes per slot; 10x the benchmark's 10,000


def simulate(
    plan_file: Path = typer.Option(None, "--plan", help="Simulate this plan file (deepvm plan's saved plan)."),
    max_price: float = plan_flags.max_price_option,
    region: str = plan_flags.region_option,
    catalog_file: Path = plan_flags.catalog_option,
    offline: bool = plan_flags.offline_option,
    refresh: bool = plan_flags.refresh_option,
    node_limit: int = plan_flags.node_limit_option,
    mix: bool = plan_flags.mix_option,
    checkpoint_size: float = plan_flags.checkpoint_size_option,
    buffer_slots: int = plan_flags.buffer_slots_option,
    profile_files: list[Path] = plan_flags.profile_option,
    work: float = typer.Option(
        None, "--work", callback=positive(plan_flags.MAX_WORK_PFLOP), help="Training work in PFLOP."
    ),
    steps: int = typer.Option(
        None, "--steps", callback=positive(MAX_STEPS), help="Or training steps (with --step-time)."
    ),
    step_time: float = typer.Option(
        None, "--step-time", callback=positive(DAY_S), help="Seconds per step on the whole plan."
    ),
    trace: list[str] = typer.Option(
        None,
        "--trace",
        help="[ZONE=]NAME|FILE: a shipped trace or a trace file, for ZONE of the plan's region (default: the plan's "
        "own zone); once per zone.",
    ),
    interruption_rate: str = typer.Option(
        None, "--interruption-rate", help="An AWS frequency band ('10-15%') or interruptions per node-hour."
    ),
    deadline: float = typer.Option(
        None, "--deadline", callback=positive(plan_flags.MAX_HOURS), help="Hours: P(miss) and the on-demand fallback."
    ),
    fallback_max_price: float = typer.Option(
        None,
        "--fallback-max-price",
        callback=positive(MAX_PRICE),
        help="USD per hour the cluster may bill while the deadline holds on-demand stand-ins (default: the plan's "
        "cap).",
    ),
    runs: int = typer.Option(1000, "--runs", callback=positive(MAX_RUNS), help="Simulated runs per policy."),
    seed: int = typer.Option(0, "--seed", callback=at_least(0, MAX_SEED), help="Random seed (same seed, same runs)."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
    plot: Path = typer.Option(None, "--plot", help="Write cost and makespan CDFs to this PNG."),
    notice_share: float = typer.Option(
        1.0, "--notice-share", callback=at_least(0, 1), help="Share of reclaims with a notice (0-1)."
    ),
    relaunch_time: float = typer.Option(
        None,
        "--relaunch-time",
        callback=at_least(0, DAY_S),
        help="Seconds from a notice to training again, flush included (6.3, measured).",
    ),
    restart_time: float = typer.Option(
        None,
        "--restart-time",
        callback=at_least(0, DAY_S),
        help="Seconds from a loss without notice to training again (7, measured).",
    ),
    checkpoint_interval: float = typer.Option(
        None, "--checkpoint-interval", callback=at_least(0, DAY_S), help="Seconds between checkpoints (600)."
    ),
    replacement_delay: float = typer.Option(
        None,
        "--replacement-delay",
        callback=at_least(0, DAY_S),
        help="Seconds until a replacement node can join (300, estimated).",
    ),
) -> None:
    """Simulate the plan and its alternatives through Spot interruptions: makespan and cost, mean to p99."""
    recovery = _recovery(notice_share, relaunch_time, restart_time, checkpoint_interval, replacement_delay)
    _check_work(work, steps, step_time)
    if plot is not None and not plot.parent.is_dir():  # before the simulation, not after it
        raise InputError(f"--plot: no folder {plot.parent} to write {plot.name} in")
    if fallback_max_price is not None and deadline is None:
        raise InputError("--fallback-max-price is what the deadline's on-demand stand-ins bill: give --deadline too")
    given, default = _traces(trace or [], interruption_rate)

    from simulation.cluster import sim_cluster
    from simulation.compare import Caps, compare_policies
    from simulation.policies import plan_policies
    from simulation.recovery import Workload

    plan, catalog, request = _plans(
        plan_file, max_price, region, catalog_file, offline, refresh, node_limit, mix, checkpoint_size, buffer_slots
    )
    catalog, _ = plan_flags.with_profiles(profile_files or [], catalog)
    policies = plan_policies(catalog, request, plan, with_deadline=deadline is not None)
    primary = policies[0].plan
    zones = _zone_traces(given, default, primary, catalog)
    if work is None:
        rate = sim_cluster(primary, catalog)
        work = steps * step_time / 3600.0 * rate.full_pflop_per_hour
    workload = Workload(work_pflop=work, runs=runs, seed=seed, deadline_h=deadline, recovery=recovery)
    assert request.max_price is not None, "simulate always plans at a price cap"
    caps = Caps(request.max_price, fallback_max_price)
    if deadline is not None:
        _check_deadline(primary, catalog, zones, workload, caps)

    from deepvm_cli.render.simulate import simulation_progress

    with simulation_progress() as progress:
        comparison = compare_policies(policies, catalog, zones, workload, caps, progress)
    if as_json:
        console.print_json(comparison.report.to_dict())
    else:
        from deepvm_cli.render.simulate import render_simulation

        render_simulation(comparison.report)
    if plot is not None:
        from deepvm_cli.render.simulate_plot import plot_cdfs

        plot_cdfs(comparison, plot)
        console.info(f"Wrote the CDFs to {plot}")


def _recovery(
    notice_share: float, relaunch: float | None, restart: float | None, interval: float | None, delay: float | None
) -> RecoveryModel:
    from simulation.recovery import RecoveryModel

    given = {
        "relaunch_s": relaunch,
        "restart_s": restart,
        "checkpoint_interval_s": interval,
        "replacement_delay_s": delay,
    }
    return RecoveryModel(notice_share=notice_share, **{name: v for name, v in given.items() if v is not None})


def _check_work(work: float | None, steps: int | None, step_time: float | None) -> None:
    if work is not None and (steps is not None or step_time is not None):
        raise InputError("give the work as --work PFLOP or as --steps N --step-time S, not both")
    if work is None and (steps is None or step_time is None):
        raise InputError("the work is required: --work PFLOP, or --steps N with --step-time S (seconds per step)")


def _traces(flags: list[str], rate: str | None) -> tuple[list[tuple[TraceSpec, Trace]], TraceFor]:
    """The `--trace` flags read (zone checked later, against the plan), and what a Spot group follows where
    no trace is given: the `--interruption-rate` band, or each type's own band."""
    from simulation import traces
    from simulation.zones import parse_trace_flag

    if flags and rate is not None:
        raise InputError("give --trace or --interruption-rate, not both")
    given = []
    for flag in flags:
        spec = parse_trace_flag(flag)
        from deepvm_cli.render.simulate import trace_progress

        with trace_progress(spec.spec) as progress:
            given.append((spec, traces.resolve_trace(spec.spec, progress=progress)))
    if rate is None:
        return given, traces.default_trace_for
    band = traces.band_trace(rate)  # a band, or a rate per node-hour such as 0.02
    return given, lambda instance_type, region: band


def _zone_traces(given: list[tuple[TraceSpec, Trace]], default: TraceFor, plan: Plan, catalog: Catalog) -> ZoneTraces:
    """The traces by zone of the plan's region (a zone outside it, or two traces for one: one line, exit 2)."""
    from simulation.zones import zone_traces

    region_zones = sorted(
        {p.availability_zone for p in catalog.prices if p.region == plan.region and p.availability_zone is not None}
    )
    return zone_traces(given, plan.availability_zone, plan.region, region_zones, default)


def _check_deadline(plan: Plan, catalog: Catalog, zones: ZoneTraces, workload: Workload, caps: Caps) -> None:
    """A deadline that even the fallback's whole cap on on-demand stand-ins cannot keep is refused, with the
    earliest one it keeps (the `deepvm` policy's own rule: provisioning/ladder/deadline.py)."""
    from simulation.market import earliest_deadline

    deadline = workload.deadline_h
    assert deadline is not None
    earliest = earliest_deadline(plan, catalog, zones, workload, caps.fallback_usd_per_hour, caps.max_usd_per_hour)
    if deadline >= earliest.hours:
        return
    cap = caps.fallback_usd_per_hour or caps.max_usd_per_hour
    raise InputError(
        f"--deadline {deadline:g} h cannot be kept for sure: ${cap:g}/h of on-demand ({earliest.fill}) "
        f"does {earliest.pflop_per_hour:,.0f} PFLOP/h, so the earliest deadline it keeps is "
        f"{_hundredths_up(earliest.hours):.2f} h; give a later one, or more --fallback-max-price"
    )


def _hundredths_up(hours: float) -> float:
    """`hours` rounded up to the 0.01 h the message shows: a deadline rounded down (14.7914 h shown as
    14.79 h) would itself be refused. A float product that lands on a whole hundredth below `hours` is
    stepped up once more, so the shown number is never below it."""
    if not math.isfinite(hours):
        return hours
    up = math.ceil(hours * 100) / 100
    return up if up >= hours else (math.ceil(hours * 100) + 1) / 100


def _plans(
    plan_file: Path | None,
    max_price: float | None,
    region: str | None,
    catalog_file: Path | None,
    offline: bool,
    refresh: bool,
    node_limit: int | None,
    mix: bool,
    checkpoint_size: float,
    buffer_slots: int,
) -> tuple[Plan | None, Catalog, PlanRequest]:
    """The plan to simulate (None: the planner's decision), its catalog, and the planning question whose
    price cap the baselines and the on-demand cluster share."""
    from provisioning.planner.request import PlanRequest

    if plan_file is not None:
        if max_price is not None:
            raise InputError("give --plan FILE or --max-price X, not both (a plan file carries its price cap)")
        planning = {
            "--region": region,
            "--catalog": catalog_file,
            "--offline": offline,
            "--refresh": refresh,
            "--node-limit": node_limit,
            "--mix": mix,
        }
        given = [flag for flag, value in planning.items() if value not in (None, False)]
        if given:
            raise InputError(
                f"{', '.join(given)} plan anew; a --plan FILE carries its own region and catalog "
                "(drop them, or drop --plan)"
            )
        return _saved_plan(plan_file)
    defaults = Defaults()
    max_price = defaults.fill(max_price, "max_price")
    if catalog_file is None:  # a catalog file's regions are its own
        region = defaults.fill(region, "region")
    if max_price is None:
        raise InputError("--plan FILE or --max-price X is required (USD per hour for the cluster)")
    defaults.announce()
    from provisioning.catalog.sources import resolve_catalog

    regions = plan_flags.regions(region)
    request = PlanRequest(
        max_price=max_price,
        checkpoint_size_gib=checkpoint_size,
        buffer_slots=buffer_slots,
        node_limit=node_limit,
        mix=mix,
        regions=regions,
    )
    catalog = resolve_catalog(
        regions=list(regions) if regions else None, offline=offline, catalog_file=catalog_file, refresh=refresh
    )
    for message in catalog.warnings:
        console.warning(message)
    return None, catalog, request


def _saved_plan(path: Path) -> tuple[Plan, Catalog, PlanRequest]:
    """The best plan of a plan file, checked as `deepvm up` checks it, with the cap it was planned for
    (the file's request, else the plan's own price)."""
    from provisioning.clusters.plan_choice import MAX_PLAN_BYTES, checked_plans
    from provisioning.core.jsonfile import read_json_file
    from provisioning.planner.request import PlanRequest

    data = read_json_file(path, "plan file", MAX_PLAN_BYTES)
    loaded = checked_plans(data, str(path))
    for message in loaded.warnings:
        console.warning(message)
    plan = loaded.plans[0]
    saved = data.get("request") if isinstance(data, dict) else None
    cap = saved.get("max_price") if isinstance(saved, dict) else None
    if not isinstance(cap, int | float) or isinstance(cap, bool) or not math.isfinite(cap) or cap < plan.price_per_hour:
        cap = plan.price_per_hour
    return plan, loaded.catalogs[0], PlanRequest(max_price=float(cap), regions=(plan.region,))


def register(app: typer.Typer) -> None:
    app.command("simulate")(simulate)
