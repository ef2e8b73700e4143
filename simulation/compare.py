"""Every policy on the same workload, runs and seed: the core of `deepvm simulate`.

Each Spot group of each policy's plan follows its zone's trace (simulation/zones.py: the user's `--trace
[ZONE=]...`, else `--interruption-rate`, else each type's band). The `deepvm` policy runs through the
recovery ladder on every zone given a trace (simulation/market_run.py); the others on the plan's slots
(simulation/engine.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from provisioning.catalog.model import Catalog
from simulation.case import SimCase
from simulation.cluster import sim_cluster
from simulation.engine import RunOutcomes, simulate
from simulation.market import MarketCase, market_case
from simulation.market_run import simulate_market
from simulation.policies import PolicyName, PolicyPlan
from simulation.recovery import SECONDS_PER_HOUR, RecoveryModel, Workload
from simulation.report import SimulationReport, summarise
from simulation.trace import Trace
from simulation.traces.errors import TraceError
from simulation.zones import ZoneTraces

Progress = Callable[[PolicyName, int, int], None]  # (policy, runs finished, runs)


@dataclass(frozen=True)
class Caps:
    """The hourly caps the `deepvm` policy keeps: the plan's, and its fallback's (None: the plan's)."""

    max_usd_per_hour: float
    fallback_usd_per_hour: float | None = None


def policy_case(policy: PolicyPlan, catalog: Catalog, traces: ZoneTraces, workload: Workload) -> SimCase:
    cluster = sim_cluster(policy.plan, catalog)
    plan = policy.plan
    chosen = tuple(traces.trace_for(g.instance_type, plan.region, plan.availability_zone) for g in cluster.spot_groups)
    for trace in chosen:
        check_lives(trace, workload.recovery)
    return SimCase(cluster, chosen, policy.rules, workload)


def ladder_case(policy: PolicyPlan, catalog: Catalog, traces: ZoneTraces, workload: Workload, caps: Caps) -> MarketCase:
    case = market_case(policy.plan, catalog, traces, workload, caps.fallback_usd_per_hour, caps.max_usd_per_hour)
    for zone in case.zones:
        check_lives(zone.trace, workload.recovery)
    return case


def check_lives(trace: Trace, recovery: RecoveryModel) -> None:
    """Refuse a trace whose Spot nodes live, on average, less than a relaunch takes: a node would be gone
    before the job trains on it, so each run is nothing but interruptions (a trace of nodes living ~1 s took
    minutes and gigabytes to simulate before this check) and its numbers would mean nothing. Such a trace is
    most often a file whose times are in seconds where the format wants milliseconds."""
    stop_s, flags = recovery.relaunch_s, "--relaunch-time"  # every loss comes with a notice (AWS's default)
    if recovery.notice_share < 1.0:
        stop_s, flags = min(stop_s, recovery.restart_s), "--relaunch-time, --restart-time"
    mean_s = trace.mean_lifetime_h() * SECONDS_PER_HOUR
    if mean_s < stop_s:
        raise TraceError(
            f"{trace.name}: its Spot nodes live {_seconds(mean_s)} on average, less than the {stop_s:g} s a relaunch "
            f"takes ({flags}): no node would train before it is lost; check the trace's time unit (an events "
            "CSV's times are milliseconds)"
        )


def _seconds(value: float) -> str:
    return f"{value:.3g} s" if value < 100 else f"{value:,.0f} s"


@dataclass(frozen=True)
class Comparison:
    report: SimulationReport
    outcomes: tuple[RunOutcomes, ...]  # every run of each policy, in the report's order (for the plot)


def compare_policies(
    policies: tuple[PolicyPlan, ...],
    catalog: Catalog,
    traces: ZoneTraces,
    workload: Workload,
    caps: Caps,
    progress: Progress | None = None,
) -> Comparison:
    summaries, names, every = [], {}, []
    for policy in policies:
        report = None if progress is None else (lambda done, total, p=policy.policy: progress(p, done, total))
        if policy.rules.ladder:
            market = ladder_case(policy, catalog, traces, workload, caps)
            outcomes = simulate_market(market, progress=report)
            used = tuple(z.trace.name for z in market.zones)
        else:
            case = policy_case(policy, catalog, traces, workload)
            outcomes = simulate(case, progress=report)
            for group, trace in zip(case.cluster.spot_groups, case.traces):
                names.setdefault(group.instance_type, trace.name)
            used = tuple(t.name for t in case.traces)
        every.append(outcomes)
        summaries.append(
            summarise(policy.policy, policy.plan, used, outcomes, workload.work_pflop, workload.deadline_h)
        )
    report = SimulationReport(
        runs=workload.runs,
        seed=workload.seed,
        trace=_zones_label(traces) or _trace_label(names),
        work_pflop=workload.work_pflop,
        deadline_h=workload.deadline_h,
        recovery=workload.recovery,
        policies=tuple(summaries),
    )
    return Comparison(report, tuple(every))


def _zones_label(traces: ZoneTraces) -> str | None:
    """ "zone: trace" for each zone given one, when there are several (None: one or none)."""
    if len(traces.by_zone) < 2:
        return None
    return ", ".join(f"{zone}: {trace.name}" for zone, trace in traces.by_zone)


def _trace_label(names: dict[str, str]) -> str:
    """One trace's name when every Spot type followed it, else "type: trace" for each."""
    distinct = set(names.values())
    if len(distinct) == 1:
        return distinct.pop()
    if not distinct:
        return "none (no Spot nodes)"
    return ", ".join(f"{itype}: {name}" for itype, name in sorted(names.items()))
