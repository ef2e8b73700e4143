"""DeepVM's four stages: rank instance types, best plan per architecture, final decision, alternatives."""

from __future__ import annotations

import difflib
import time
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

import pulp

from provisioning.catalog.model import Catalog, Market
from provisioning.core.errors import InfeasibleError, InputError
from provisioning.planner.baselines import cost_first, performance_first
from provisioning.planner.candidates import Candidate, select_candidates
from provisioning.planner.holders import HolderCosts
from provisioning.planner.milp import Block, Choice, SelectionModel, best_of_blocks
from provisioning.planner.mix import plan_mix
from provisioning.planner.objectives import ObjectiveSpec, no_scaling_spec, objective_spec
from provisioning.planner.options import HolderOption, Limits, TrainerOption, holder_options, trainer_options
from provisioning.planner.plan import Architecture, NodeGroup, Objective, Plan, Role
from provisioning.planner.request import PlanRequest, PlanResult, RankedType
from provisioning.scaling.model import capped_notes

if TYPE_CHECKING:  # loaded only by plan --interruptions
    from provisioning.planner.interruptions import InterruptionReport

BOTH = (Architecture.SINGLE_ANCHOR, Architecture.TIERING)


def plan_cluster(
    catalog: Catalog,
    request: PlanRequest,
    *,
    with_baselines: bool = True,
    with_architectures: bool = True,
    progress: Callable[[str], None] = lambda stage: None,
) -> PlanResult:
    """Solve one planning question; raises InfeasibleError saying why and what price would work.

    `progress` hears the name of each stage that can take a while as it starts (the CLI shows it).
    """
    started = time.perf_counter()
    regions = _regions(catalog, request)
    options = trainer_options(catalog, regions)
    if not options:
        raise InputError(
            f"the catalog ({catalog.source}) has no GPU instance types with spot prices in {', '.join(regions)}"
        )
    holders = holder_options(catalog, regions)
    limits = _limits(catalog, request, request.max_price)
    costs = HolderCosts(holders, limits)
    spec = _spec(request)

    per_architecture: dict[Architecture, Plan | None] = {}
    if with_architectures:
        progress("the best plan of each architecture")
        for architecture in BOTH:
            best = _rank(options, costs, limits, spec, (architecture,), 1)
            per_architecture[architecture] = _to_plan(best[0], spec, catalog) if best else None
    progress(f"the {request.top} best plans")
    plans = [_to_plan(choice, spec, catalog) for choice in _rank(options, costs, limits, spec, BOTH, request.top)]
    if request.mix:  # a mix can exist where no single type fits (e.g. a cheap anchor of another type)
        mixed = plan_mix(catalog, regions, holders, limits, spec.objective, known=plans, progress=progress)
        plans = _with_mix(plans, mixed, request.top)
    if not plans:
        raise InfeasibleError(_why_infeasible(catalog, request, options, holders, spec))
    if request.interruptions is not None:
        plans = _on_demand_if_better(plans, catalog, request, spec)

    baselines: dict[str, Plan | None] = {}
    if with_baselines:
        progress("the paper's baselines")
        baselines["cost_first"] = _baseline_plan(cost_first(options, limits), catalog)
        baselines["performance_first"] = _baseline_plan(performance_first(options, limits), catalog)
        no_scaling = _rank(options, costs, limits, no_scaling_spec(), BOTH, 1)
        baselines["deepvm_no_scaling"] = (
            _to_plan(no_scaling[0], objective_spec(Objective.DEEPVM), catalog) if no_scaling else None
        )
    return PlanResult(
        request=request,
        ranking=_flopp_ranking(options),
        best_per_architecture=per_architecture,
        plans=plans,
        baselines=baselines,
        solve_seconds=time.perf_counter() - started,
    )


def plan_budgets(catalog: Catalog, request: PlanRequest, max_prices: list[float]) -> list[Plan | None]:
    """The best plan at each of several price caps (None where none exists), in one CBC run.

    Each cap is its own block of the MILP; the blocks share no variable or row, so the optimum of their
    summed objectives is the optimum of each.
    """
    spec = _spec(request)
    regions = _regions(catalog, request)
    options, holders = trainer_options(catalog, regions), holder_options(catalog, regions)
    problem = pulp.LpProblem("deepvm_budgets", pulp.LpMaximize)
    costs = HolderCosts(holders, _limits(catalog, request, None))
    blocks: list[tuple[Block, list[float]] | None] = []
    for k, max_price in enumerate(max_prices):
        limits = _limits(catalog, request, max_price)
        candidates = select_candidates(options, costs, limits, BOTH, spec.score, 1, spec.node_gain)
        if not candidates:
            blocks.append(None)
            continue
        block = Block(problem, f"b{k}_", candidates, costs, limits, 1)
        blocks.append((block, [spec.plan_value(plan.candidate, plan.price) for plan in block.plans]))
    solved = iter(best_of_blocks([b for b in blocks if b is not None], problem) if any(blocks) else [])
    choices = [None if b is None else next(solved) for b in blocks]
    return [None if c is None else _to_plan(c, spec, catalog) for c in choices]


def _on_demand_if_better(plans: list[Plan], catalog: Catalog, request: PlanRequest, spec: ObjectiveSpec) -> list[Plan]:
    """With interruptions counted, the all-on-demand cluster at the cap (planner/on_demand.py) first when it
    beats the best Spot plan's expected value: Spot that a trace says is seldom there is seen coming, and
    the plan starts on demand. Compared where the values share a unit: DeepVM's Z (FLOPP x n x K, on-demand
    prices, goodput share 1) and throughput; the cost and deadline objectives keep their Spot ranking."""
    from provisioning.planner.on_demand import on_demand_plan

    if spec.objective not in (Objective.DEEPVM, Objective.THROUGHPUT):
        return plans
    od = on_demand_plan(catalog, request, spec.objective)  # the best on demand by the same objective
    if od is None or od.objective_value <= plans[0].objective_value:
        return plans
    assert request.interruptions is not None
    note = (
        f"on demand: counting interruptions {request.interruptions.label}, the best Spot plan "
        f"({plans[0].summary()}) expects {plans[0].objective_value:,.0f}, on demand {od.objective_value:,.0f}"
    )
    return [replace(od, notes=(*od.notes, note)), *plans][: request.top]


def _with_mix(single_type: list[Plan], mixed: Plan | None, top: int) -> list[Plan]:
    """The mixed cluster first (it is never worse), then the single-type ranking without repeats."""
    if mixed is None:
        return single_type
    same = [p for p in single_type if (p.availability_zone, p.nodes) == (mixed.availability_zone, mixed.nodes)]
    return [mixed, *[p for p in single_type if p not in same]][:top]


def _regions(catalog: Catalog, request: PlanRequest) -> list[str]:
    known = catalog.regions
    if not request.regions or request.regions == ("all",):
        return known
    for region in request.regions:
        if region not in known:
            hint = difflib.get_close_matches(region, known, n=1)
            suggestion = f"; did you mean {hint[0]}?" if hint else f" (known: {', '.join(known)})"
            raise InputError(f"unknown region {region!r} in catalog {catalog.source}{suggestion}")
    return list(request.regions)


def _limits(catalog: Catalog, request: PlanRequest, max_price: float | None) -> Limits:
    return Limits(
        max_price=max_price,
        checkpoint_gib=request.checkpoint_size_gib * request.buffer_slots,
        node_limit=request.node_limit,
        catalog=catalog,
    )


def _spec(request: PlanRequest) -> ObjectiveSpec:
    if request.mix and (request.deadline_hours is not None or request.objective is Objective.COST):
        raise InputError("--mix plans for --objective deepvm or throughput (not cost or --deadline)")
    if request.mix and request.interruptions is not None:
        raise InputError(
            "--mix does not count --interruptions: a mixed cluster's loss depends on how many "
            "nodes of each type it has, which its MILP does not model; plan without --mix"
        )
    if request.deadline_hours is not None:
        return objective_spec(
            Objective.DEADLINE,
            deadline_hours=request.deadline_hours,
            work_pflop=request.work_pflop,
            interruptions=request.interruptions,
        )
    return objective_spec(request.objective, interruptions=request.interruptions)


def interruption_report(catalog: Catalog, request: PlanRequest, result: PlanResult) -> InterruptionReport:
    """The ranked plans of `result` (planned with request.interruptions) next to the best plan that
    ignores interruptions, each with its goodput share and expected price, and that plan's objective
    value once interruptions are counted (the decision changed only if it is now worse)."""
    from provisioning.planner.interruptions import InterruptionReport, plan_goodput

    assert request.interruptions is not None, "a report on interruptions needs them"
    regions = _regions(catalog, request)
    limits = _limits(catalog, request, request.max_price)
    costs = HolderCosts(holder_options(catalog, regions), limits)
    plain = _spec(replace(request, interruptions=None))
    choice = _rank(trainer_options(catalog, regions), costs, limits, plain, BOTH, 1)[0]
    return InterruptionReport(
        interruptions=request.interruptions,
        plans=tuple(plan_goodput(p, request.interruptions) for p in result.plans),
        without=plan_goodput(_to_plan(choice, plain, catalog), request.interruptions),
        without_value=_spec(request).reported_value(choice.candidate, choice.price),
    )


def _rank(
    options: list[TrainerOption],
    costs: HolderCosts,
    limits: Limits,
    spec: ObjectiveSpec,
    architectures: tuple[Architecture, ...],
    top: int,
) -> list[Choice]:
    """The `top` best distinct plans, best first (k-best by repeated solves with exclusions)."""
    candidates = select_candidates(options, costs, limits, architectures, spec.score, top, spec.node_gain)
    if not candidates:
        return []
    model = SelectionModel(candidates, costs, limits, top)
    values = [spec.plan_value(plan.candidate, plan.price) for plan in model.plans]
    ranked: list[Choice] = []
    for _ in range(top):
        choice = model.best(values)
        if choice is None:
            break
        ranked.append(choice)
        model.exclude(choice)
    return ranked


def _to_plan(choice: Choice, spec: ObjectiveSpec, catalog: Catalog) -> Plan:
    c: Candidate = choice.candidate
    option = c.trainer
    name = option.itype.name
    nodes: list[NodeGroup] = []
    if c.architecture is Architecture.SINGLE_ANCHOR:
        assert option.on_demand_price is not None
        nodes.append(NodeGroup.of(option.itype, Market.ON_DEMAND, 1, Role.ANCHOR, option.on_demand_price))
        if c.count > 1:
            nodes.append(NodeGroup.of(option.itype, Market.SPOT, c.count - 1, Role.TRAINER, option.spot_price))
    else:
        nodes.append(NodeGroup.of(option.itype, Market.SPOT, c.count, Role.TRAINER, option.spot_price))
    if choice.holder is not None:
        h = choice.holder
        nodes.append(NodeGroup.of(h.itype, Market.ON_DEMAND, choice.holders, Role.HOLDER, h.on_demand_price))
    price = sum(g.count * g.usd_per_hour for g in nodes)
    notes = (
        ()
        if option.itype.scaling or option.scaling.measured
        else (f"{name}: no measured scaling curve; the default curve was used",)
    )
    notes += capped_notes(name, option.scaling, c.count)
    return Plan(
        architecture=c.architecture,
        region=option.region,
        availability_zone=option.availability_zone,
        nodes=tuple(nodes),
        price_per_hour=price,
        effective_flops=c.effective_flops,
        objective_value=spec.reported_value(c, price),
        objective=spec.objective,
        catalog_source=catalog.source,
        prices_as_of=catalog.as_of,
        notes=notes,
    )


def _baseline_plan(candidate: Candidate | None, catalog: Catalog) -> Plan | None:
    if candidate is None:
        return None
    return _to_plan(Choice(candidate, None, 0), objective_spec(Objective.DEEPVM), catalog)


def _flopp_ranking(options: list[TrainerOption]) -> list[RankedType]:
    rows = [
        RankedType(
            instance_type=o.itype.name,
            region=o.region,
            availability_zone=o.availability_zone,
            flops=o.itype.flops,
            spot_price=o.spot_price,
            on_demand_price=o.on_demand_price,
            flopp_spot=o.flopp_spot,
            flopp_on_demand=None if not o.on_demand_price else o.itype.flops / o.on_demand_price * 3600,
        )
        for o in options
    ]
    return sorted(rows, key=lambda r: (-(r.flopp_spot or 0.0), r.instance_type, r.region))


def _why_infeasible(
    catalog: Catalog,
    request: PlanRequest,
    options: list[TrainerOption],
    holders: list[HolderOption],
    spec: ObjectiveSpec,
) -> str:
    """One line: why nothing fits, and the lowest max price at which a plan exists."""
    uncapped = _limits(catalog, request, None)
    costs = HolderCosts(holders, uncapped)
    candidates = select_candidates(options, costs, uncapped, BOTH, _cheapest_first(spec), 1)
    cheapest = None
    if candidates:
        model = SelectionModel(candidates, costs, uncapped, 1)
        cheapest = model.best([-plan.price for plan in model.plans])
    goal = (
        f"finishes {request.work_pflop:g} PFLOP within {request.deadline_hours:g} h"
        if spec.objective is Objective.DEADLINE
        else "is possible"
    )
    if cheapest is None:
        checkpoint = f"{request.checkpoint_size_gib:g} GiB x {request.buffer_slots} slots"
        return (
            f"no cluster {goal} at any price: quotas, --node-limit or the checkpoint size "
            f"({checkpoint}) rule out every GPU type"
        )
    plan = _to_plan(cheapest, spec, catalog)
    return (
        f"no cluster {goal} within ${request.max_price:g}/h: the cheapest, {plan.summary()} "
        f"in {plan.availability_zone}, costs ${plan.price_per_hour:.4f}/h; "
        f"try --max-price {_round_up(plan.price_per_hour)}"
    )


def _cheapest_first(spec: ObjectiveSpec):
    """Presolve score for the cheapest admissible plan: lowest price, any count the objective admits."""

    def score(candidate: Candidate, cheapest_price) -> float | None:
        return -cheapest_price() if spec.admits(candidate) else None

    return score


def _round_up(price: float) -> str:
    cents = -(-round(price * 1e6) // 10_000)  # ceil to the cent, immune to float noise
    return f"{cents / 100:.2f}"
