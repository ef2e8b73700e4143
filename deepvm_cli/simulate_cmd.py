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

from deepvm_cli import console
from provisioning.errors import InputError

if TYPE_CHECKING:
    from provisioning.catalog import Catalog
    from provisioning.planner.plan import Plan
    from provisioning.planner.request import PlanRequest
    from simulation.compare import TraceFor
    from simulation.recovery import RecoveryModel

MAX_RUNS = 100_000  # memory grows with runs x Spot nodes x nodes per slot; 10x the benchmark's 10,000


def simulate(
    plan_file: Path = typer.Option(None, "--plan", help="Simulate this plan file (deepvm plan's saved plan)."),
    max_price: float = typer.Option(None, "--max-price", help="Or plan for this cap, USD per hour."),
    region: str = typer.Option(None, "--region", help="Region, comma-separated regions, or 'all'."),
    catalog_file: Path = typer.Option(None, "--catalog", help="Plan on this catalog file alone (no AWS)."),
    offline: bool = typer.Option(False, "--offline", help="Use the built-in price snapshot."),
    refresh: bool = typer.Option(False, "--refresh", help="Ignore cached AWS market data."),
    node_limit: int = typer.Option(None, "--node-limit", help="N nodes per type and market, not quotas."),
    mix: bool = typer.Option(False, "--mix", help="Allow several GPU types in one cluster."),
    checkpoint_size: float = typer.Option(0.5, "--checkpoint-size", help="One checkpoint, GiB."),
    buffer_slots: int = typer.Option(2, "--buffer-slots", help="Checkpoints the holders keep in RAM."),
    profile_files: list[Path] = typer.Option(
        None, "--profile", metavar="FILE",
        help="A profile from `deepvm profile`: its curve replaces its type's in planning and in the throughput "
             "model (repeat for other types)."),
    work: float = typer.Option(None, "--work", help="Training work in PFLOP."),
    steps: int = typer.Option(None, "--steps", help="Or training steps (with --step-time)."),
    step_time: float = typer.Option(None, "--step-time", help="Seconds per step on the whole plan."),
    trace: str = typer.Option(None, "--trace", help="A shipped trace's name, or a trace file."),
    interruption_rate: str = typer.Option(
        None, "--interruption-rate", help="An AWS frequency band ('10-15%') or interruptions per node-hour."),
    deadline: float = typer.Option(None, "--deadline", help="Hours: P(miss) and the on-demand fallback."),
    runs: int = typer.Option(1000, "--runs", help="Simulated runs per policy."),
    seed: int = typer.Option(0, "--seed", help="Random seed (same seed, same runs)."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
    plot: Path = typer.Option(None, "--plot", help="Write cost and makespan CDFs to this PNG."),
    notice_share: float = typer.Option(1.0, "--notice-share", help="Share of reclaims with a notice (0-1)."),
    relaunch_time: float = typer.Option(
        None, "--relaunch-time", help="Seconds from a notice to training again, flush included (12.1, measured)."),
    restart_time: float = typer.Option(
        None, "--restart-time", help="Seconds from a loss without notice to training again (7, measured)."),
    checkpoint_interval: float = typer.Option(
        None, "--checkpoint-interval", help="Seconds between checkpoints (600)."),
    replacement_delay: float = typer.Option(
        None, "--replacement-delay", help="Seconds until a replacement node can join (300, estimated)."),
) -> None:
    """Simulate the plan and its alternatives through Spot interruptions: makespan and cost, mean to p99."""
    recovery = _recovery(notice_share, relaunch_time, restart_time, checkpoint_interval, replacement_delay)
    runs = int(_number("--runs", runs, smallest=1))
    if runs > MAX_RUNS:
        raise InputError(f"--runs must be at most {MAX_RUNS:,}, got {runs:,}")
    seed = int(_number("--seed", seed, smallest=0))
    deadline = None if deadline is None else _number("--deadline", deadline, positive=True)
    _check_work(work, steps, step_time)
    if plot is not None and not plot.parent.is_dir():  # before the simulation, not after it
        raise InputError(f"--plot: no folder {plot.parent} to write {plot.name} in")
    trace_for = _trace_for(trace, interruption_rate)

    from simulation.cluster import sim_cluster
    from simulation.compare import compare_policies
    from simulation.policies import plan_policies
    from simulation.recovery import Workload

    plan, catalog, request = _plans(plan_file, max_price, region, catalog_file, offline, refresh, node_limit, mix,
                                    checkpoint_size, buffer_slots)
    catalog = _profiled(catalog, profile_files or [])
    policies = plan_policies(catalog, request, plan, with_deadline=deadline is not None)
    if work is None:
        rate = sim_cluster(policies[0].plan, catalog)
        work = steps * step_time / 3600.0 * rate.pflop_per_hour(rate.trainers, rate.tflops)
    workload = Workload(work_pflop=work, runs=runs, seed=seed, deadline_h=deadline, recovery=recovery)

    from deepvm_cli.render_simulate import simulation_progress

    with simulation_progress(runs) as progress:
        comparison = compare_policies(policies, catalog, trace_for, workload, progress)
    if as_json:
        console.print_json(comparison.report.to_dict())
    else:
        from deepvm_cli.render_simulate import render_simulation

        render_simulation(comparison.report)
    if plot is not None:
        from deepvm_cli.simulate_plot import plot_cdfs

        plot_cdfs(comparison, plot)
        console.info(f"Wrote the CDFs to {plot}")


def _number(flag: str, value: float, *, smallest: float = 0.0, positive: bool = False) -> float:
    """A finite number of at least `smallest` (above 0 when `positive`), else one clear line."""
    if math.isfinite(value) and value >= smallest and not (positive and value <= 0):
        return value
    if positive:
        wanted = "a positive number"
    else:
        wanted = "a non-negative number" if smallest == 0 else f"a number of at least {smallest:g}"
    raise InputError(f"{flag} must be {wanted}, got {value:g}")


def _recovery(notice_share: float, relaunch: float | None, restart: float | None, interval: float | None,
              delay: float | None) -> RecoveryModel:
    from simulation.recovery import RecoveryModel

    share = _number("--notice-share", notice_share)
    if share > 1:
        raise InputError(f"--notice-share is a share of reclaims, from 0 to 1, got {share:g}")
    given = {"relaunch_s": ("--relaunch-time", relaunch), "restart_s": ("--restart-time", restart),
             "checkpoint_interval_s": ("--checkpoint-interval", interval),
             "replacement_delay_s": ("--replacement-delay", delay)}
    overrides = {name: _number(flag, value) for name, (flag, value) in given.items() if value is not None}
    return RecoveryModel(notice_share=share, **overrides)


def _check_work(work: float | None, steps: int | None, step_time: float | None) -> None:
    if work is not None:
        if steps is not None or step_time is not None:
            raise InputError("give the work as --work PFLOP or as --steps N --step-time S, not both")
        _number("--work", work, positive=True)
        return
    if steps is None or step_time is None:
        raise InputError("the work is required: --work PFLOP, or --steps N with --step-time S (seconds per step)")
    _number("--steps", steps, positive=True)
    _number("--step-time", step_time, positive=True)


def _trace_for(trace: str | None, rate: str | None) -> TraceFor:
    """What the Spot nodes follow: one trace for all, or each type's default (its interruption band)."""
    from simulation import traces

    if trace is not None and rate is not None:
        raise InputError("give --trace or --interruption-rate, not both")
    if trace is not None:
        chosen = traces.resolve_trace(trace)
    elif rate is not None:
        chosen = _rate_trace(rate)
    else:
        return traces.default_trace_for
    return lambda instance_type, region: chosen


def _rate_trace(rate: str):
    from simulation import traces

    try:
        per_hour = float(rate)
    except ValueError:
        return traces.band_trace(rate)
    return traces.rate_trace(_number("--interruption-rate", per_hour))


def _plans(plan_file: Path | None, max_price: float | None, region: str | None, catalog_file: Path | None,
           offline: bool, refresh: bool, node_limit: int | None, mix: bool, checkpoint_size: float,
           buffer_slots: int) -> tuple[Plan | None, Catalog, PlanRequest]:
    """The plan to simulate (None: the planner's decision), its catalog, and the planning question whose
    price cap the baselines and the on-demand cluster share."""
    from provisioning.planner.request import PlanRequest

    if plan_file is not None:
        if max_price is not None:
            raise InputError("give --plan FILE or --max-price X, not both (a plan file carries its price cap)")
        return _saved_plan(plan_file)
    if max_price is None:
        raise InputError("--plan FILE or --max-price X is required (USD per hour for the cluster)")
    from provisioning.sources import resolve_catalog

    regions = None if region is None else tuple(r.strip() for r in region.split(",") if r.strip())
    if regions == ():
        raise InputError("--region needs a region name, a comma-separated list, or 'all'")
    request = PlanRequest(
        max_price=_number("--max-price", max_price, positive=True),
        checkpoint_size_gib=_number("--checkpoint-size", checkpoint_size),
        buffer_slots=int(_number("--buffer-slots", buffer_slots, positive=True)),
        node_limit=None if node_limit is None else int(_number("--node-limit", node_limit, positive=True)),
        mix=mix,
        regions=regions,
    )
    catalog = resolve_catalog(regions=list(regions) if regions else None, offline=offline,
                              catalog_file=catalog_file, refresh=refresh)
    for message in catalog.warnings:
        console.warning(message)
    return None, catalog, request


def _saved_plan(path: Path) -> tuple[Plan, Catalog, PlanRequest]:
    """The best plan of a plan file, checked as `deepvm up` checks it, with the cap it was planned for
    (the file's request, else the plan's own price)."""
    from provisioning.cloud.plan_input import MAX_PLAN_BYTES, catalog_of, checked_plans
    from provisioning.jsonfile import read_json_file
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
    return plan, catalog_of(plan), PlanRequest(max_price=float(cap), regions=(plan.region,))


def _profiled(catalog: Catalog, paths: list[Path]) -> Catalog:
    """The catalog with the profiles' fitted curves (provisioning/profile.py), so that the plans and the
    simulated throughput follow the measured scaling of this job."""
    if not paths:
        return catalog
    from provisioning.profile import load_profile, with_profiles

    profiles = [load_profile(path, catalog) for path in paths]
    for path, profile in zip(paths, profiles):
        for message in profile.warnings:
            console.warning(f"{path} ({profile.instance_type}): {message}")
    return with_profiles(catalog, profiles)


def register(app: typer.Typer) -> None:
    app.command("simulate")(simulate)
