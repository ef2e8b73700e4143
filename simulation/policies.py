"""The policies `deepvm simulate` compares, each a plan and a way of reacting to lost Spot nodes.

    deepvm             the plan, run by the recovery ladder (provisioning/ladder, the head's own decisions):
                       buy like the plan with backoff, move to another zone of the region when it pays,
                       on-demand stand-ins when the deadline needs them, back to Spot when it allows
    plan-only          the plan's fixed slots, as deepvm recovered before the ladder: replace every lost node
                       in the plan's zone once its capacity is back, continue on the survivors
    shrink-only        the same plan, no replacements (the plan's nodes are bought again only when no
                       trainer is left, or the job could never finish)
    cost-first         the paper's baselines (provisioning/planner/baselines.py) at the same price cap,
    performance-first  recovered the way deepvm recovers: the comparison is of the clusters
    on-demand          the best all-on-demand cluster at the same price cap (planner/on_demand.py)
    spot-restart       the plan's trainers, all Spot, no holders, restarting the whole cluster from the
                       last checkpoint on any loss (SkyPilot managed jobs; checkpoints in a bucket)
    deadline-fallback  the plan with plan-only's recovery, buying every missing node on demand once the
                       current rate would miss the deadline (the first reading of Can't Be Late, kept to
                       compare); only with a deadline

Every policy runs on the same seed: run i of each starts at the same point of the traces and its k-th
node of slot j lives as long (simulation/draws.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from provisioning.catalog.model import Catalog, Market
from provisioning.core.errors import InputError
from provisioning.planner.plan import Architecture, NodeGroup, Plan, Role
from provisioning.planner.request import PlanRequest, PlanResult
from simulation.case import PolicyRules


class PolicyName(str, Enum):
    DEEPVM = "deepvm"
    PLAN_ONLY = "plan-only"
    SHRINK_ONLY = "shrink-only"
    COST_FIRST = "cost-first"
    PERFORMANCE_FIRST = "performance-first"
    ON_DEMAND = "on-demand"
    SPOT_RESTART = "spot-restart"
    DEADLINE_FALLBACK = "deadline-fallback"


PLAN_ONLY_RECOVERY = PolicyRules(replace=True)
LADDER = PolicyRules(replace=True, ladder=True)


@dataclass(frozen=True)
class PolicyPlan:
    """A policy: the cluster it buys and how it reacts to losses."""

    policy: PolicyName
    plan: Plan
    rules: PolicyRules


def plan_policies(
    catalog: Catalog, request: PlanRequest, plan: Plan | None, with_deadline: bool
) -> tuple[PolicyPlan, ...]:
    """Ask the planner for this price cap (the plan itself when `plan` is None, and always its baselines
    and the on-demand-only cluster), and pair each plan with its policy."""
    from provisioning.planner.on_demand import on_demand_plan
    from provisioning.planner.solve import plan_cluster  # PuLP loads only when a plan is needed

    result = plan_cluster(catalog, request, with_architectures=False)
    primary = plan if plan is not None else result.plans[0]
    return policy_plans(primary, result, on_demand_plan(catalog, request), catalog, with_deadline)


def policy_plans(
    primary: Plan, result: PlanResult, on_demand: Plan | None, catalog: Catalog, with_deadline: bool
) -> tuple[PolicyPlan, ...]:
    """Every policy that has a plan at this price cap, in the order they are shown.

    `result` is the planner's answer at the same cap (its baselines); a baseline or on-demand cluster that
    does not fit the cap is left out, as `deepvm plan` leaves it out.
    """
    chosen = [
        PolicyPlan(PolicyName.DEEPVM, primary, LADDER),
        PolicyPlan(PolicyName.PLAN_ONLY, primary, PLAN_ONLY_RECOVERY),
        PolicyPlan(PolicyName.SHRINK_ONLY, primary, PolicyRules(replace=False)),
    ]
    for name, key in ((PolicyName.COST_FIRST, "cost_first"), (PolicyName.PERFORMANCE_FIRST, "performance_first")):
        baseline = result.baselines.get(key)
        if baseline is not None:
            chosen.append(PolicyPlan(name, baseline, PLAN_ONLY_RECOVERY))
    if on_demand is not None:
        chosen.append(PolicyPlan(PolicyName.ON_DEMAND, on_demand, PLAN_ONLY_RECOVERY))
    chosen.append(
        PolicyPlan(
            PolicyName.SPOT_RESTART, spot_only_plan(primary, catalog), PolicyRules(replace=True, restart_all=True)
        )
    )
    if with_deadline:
        chosen.append(
            PolicyPlan(PolicyName.DEADLINE_FALLBACK, primary, PolicyRules(replace=True, deadline_fallback=True))
        )
    return tuple(chosen)


def spot_only_plan(plan: Plan, catalog: Catalog) -> Plan:
    """The plan's trainers (its anchor included) all bought as Spot in its AZ, without holders."""
    counts: dict[str, int] = {}
    for g in plan.nodes:
        if g.role is not Role.HOLDER:
            counts[g.instance_type] = counts.get(g.instance_type, 0) + g.count
    nodes = []
    for name, count in counts.items():
        price = catalog.spot_prices(name, plan.region).get(plan.availability_zone)
        if price is None:
            raise InputError(f"{name} has no spot price in {plan.availability_zone} in catalog {catalog.source}")
        nodes.append(NodeGroup(name, Market.SPOT, count, Role.TRAINER, price))
    raw = sum(catalog.types[g.instance_type].flops * g.count for g in nodes)
    flopp = sum(catalog.types[g.instance_type].flops / g.usd_per_hour * 3600.0 * g.count for g in nodes)
    return Plan(
        architecture=Architecture.TIERING,
        region=plan.region,
        availability_zone=plan.availability_zone,
        nodes=tuple(nodes),
        price_per_hour=sum(g.count * g.usd_per_hour for g in nodes),
        effective_flops=plan.effective_flops,
        objective_value=plan.effective_flops / raw * flopp,  # Z with the plan's K: the same trainers
        objective=plan.objective,
        catalog_source=plan.catalog_source,
        prices_as_of=plan.prices_as_of,
        notes=("spot only, no holders: checkpoints go to a bucket; any loss restarts the whole cluster",),
    )
