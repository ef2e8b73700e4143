"""Every policy on the same workload, runs and seed: the core of `deepvm simulate`.

Each Spot group of each policy's plan gets its trace from `trace_for(instance_type, region)`: the user's
`--trace` or `--interruption-rate` for all of them, else each type's default (simulation/traces.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from provisioning.catalog.model import Catalog
from simulation.case import SimCase
from simulation.cluster import sim_cluster
from simulation.engine import RunOutcomes, simulate
from simulation.policies import PolicyName, PolicyPlan
from simulation.recovery import Workload
from simulation.report import SimulationReport, summarise
from simulation.trace import Trace

TraceFor = Callable[[str, str], Trace]  # (instance type, region) -> the trace its Spot nodes follow
Progress = Callable[[PolicyName, int, int], None]  # (policy, runs finished, runs)


def policy_case(policy: PolicyPlan, catalog: Catalog, trace_for: TraceFor, workload: Workload) -> SimCase:
    cluster = sim_cluster(policy.plan, catalog)
    traces = tuple(trace_for(g.instance_type, policy.plan.region) for g in cluster.spot_groups)
    return SimCase(cluster, traces, policy.rules, workload)


@dataclass(frozen=True)
class Comparison:
    report: SimulationReport
    outcomes: tuple[RunOutcomes, ...]  # every run of each policy, in the report's order (for the plot)


def compare_policies(policies: tuple[PolicyPlan, ...], catalog: Catalog, trace_for: TraceFor, workload: Workload,
                     progress: Progress | None = None) -> Comparison:
    summaries, names, every = [], {}, []
    for policy in policies:
        case = policy_case(policy, catalog, trace_for, workload)
        report = None if progress is None else (lambda done, total, p=policy.policy: progress(p, done, total))
        outcomes = simulate(case, progress=report)
        every.append(outcomes)
        for group, trace in zip(case.cluster.spot_groups, case.traces):
            names.setdefault(group.instance_type, trace.name)
        summaries.append(summarise(policy.policy, policy.plan, tuple(t.name for t in case.traces), outcomes,
                                   workload.work_pflop, workload.deadline_h))
    report = SimulationReport(
        runs=workload.runs,
        seed=workload.seed,
        trace=_trace_label(names),
        work_pflop=workload.work_pflop,
        deadline_h=workload.deadline_h,
        recovery=workload.recovery,
        policies=tuple(summaries),
    )
    return Comparison(report, tuple(every))


def _trace_label(names: dict[str, str]) -> str:
    """One trace's name when every Spot type followed it, else "type: trace" for each."""
    distinct = set(names.values())
    if len(distinct) == 1:
        return distinct.pop()
    if not distinct:
        return "none (no Spot nodes)"
    return ", ".join(f"{itype}: {name}" for itype, name in sorted(names.items()))
