"""The planner's mixed-integer program, solved exactly by CBC through PuLP.

Notation (one block per planning question; several blocks can share one CBC run)
    c in C      trainer candidates from presolve (architecture, region, AZ, GPU type v, count n)
    w in W_r    on-demand CPU types that can hold checkpoints in region r
    i in I      plans: a Single Anchor candidate, or a Tiering candidate c with holders of type w
    y_i         1 if plan i is chosen                                            (binary)
    none        1 if no cluster satisfies the constraints                       (binary)
    v_i         the objective's value (e.g. DeepVM's Z = FLOPP_spot(v) n K(n)); p_i its $/h

    A Tiering plan's holders are the fewest of type w that satisfy saturation and memory,
        need(c, w) = max(floor(n / n_sat(min bw)) + 1, ceil(size * slots / mem_w)),
    since more holders only cost more and use more quota. K(n) is non-linear in n; enumerating n in
    the candidates makes everything linear. Only the `top` cheapest holder types of a candidate can be
    among the `top` best plans, so no others are offered (presolve rule R4).

Objective     max  sum_i (S rank(v_i) - p_i) y_i
    Exactly one plan (or `none`) is chosen, so replacing v_i by its rank among the distinct values keeps
    the optimum; with S above any possible price a better value always beats a lower price and equal
    values go to the lower price: a lexicographic objective in one exact solve, immune to values that
    differ only in the tenth digit. Ratio objectives use v_i = -p_i / E_i, a constant per plan.

Constraints
    (1) one answer:   sum_i y_i + none = 1
    (5) price cap:    sum_i p_i y_i <= max price
    (6) quotas:       sum_i vcpus_i(g, k) y_i <= quota(g, k)   per region, quota group g and market k
    (7) exclusions:   y_i = 0 for plans already ranked (k-best)
"""

from __future__ import annotations

import itertools
import math
import re
import warnings
from dataclasses import dataclass

import pulp

from provisioning.catalog.model import Market
from provisioning.core.errors import DeepvmError
from provisioning.planner.candidates import Candidate
from provisioning.planner.holders import HolderCosts
from provisioning.planner.options import PRICE_TOLERANCE, HolderOption, Limits
from provisioning.planner.plan import Architecture


class SolverError(DeepvmError):
    """CBC ended without a proven answer (infeasibility is not an error: `none` absorbs it)."""


@dataclass(frozen=True)
class Choice:
    """A solved cluster: one candidate and, for Tiering, its holder type and count."""

    candidate: Candidate
    holder: HolderOption | None
    holders: int

    @property
    def price(self) -> float:
        extra = self.holder.on_demand_price * self.holders if self.holder else 0.0
        return self.candidate.base_price + extra


def _name(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_]", "_", text)


class Block:
    """One planning question as rows and variables of a (possibly shared) problem."""

    def __init__(
        self,
        problem: pulp.LpProblem,
        prefix: str,
        candidates: list[Candidate],
        holder_costs: HolderCosts,
        limits: Limits,
        keep_holders: int,
    ):
        self.problem = problem
        self.prefix = prefix
        self.limits = limits
        self.plans = _plans(candidates, holder_costs, keep_holders)
        self.y = [problem.add_variable(f"{prefix}y_{i}", cat=pulp.LpBinary) for i in range(len(self.plans))]
        self.none = problem.add_variable(f"{prefix}none", cat=pulp.LpBinary)
        self._exclusions = 0
        self._add_constraints()

    def _row(self, constraint: pulp.LpConstraint, name: str) -> None:
        self.problem += constraint, self.prefix + name

    def _add_constraints(self) -> None:
        self._row(pulp.lpSum(self.y) + self.none == 1, "c1_one_answer")
        if self.limits.max_price is not None:
            price = pulp.LpAffineExpression([(y, plan.price) for y, plan in zip(self.y, self.plans)])
            self._row(price <= self.limits.max_price + PRICE_TOLERANCE, "c5_price_cap")
        usage: dict[tuple[str, str, Market], list[tuple[pulp.LpVariable, float]]] = {}
        for y, plan in zip(self.y, self.plans):
            for key, vcpus in _vcpus(plan).items():
                usage.setdefault(key, []).append((y, vcpus))
        for (region, group, market), terms in usage.items():
            quota = self.limits.quota(region, group, market)
            if math.isfinite(quota):
                name = f"c6_quota_{_name(region)}_{_name(group)}_{market.name}"
                self._row(pulp.LpAffineExpression(terms) <= quota, name)

    def exclude(self, choice: Choice) -> None:
        """(7): rule out one plan, for the next best."""
        self._exclusions += 1
        self._row(self.y[self.plans.index(choice)] <= 0, f"c7_exclude_{self._exclusions}")

    def _price_bound(self) -> float:
        return max((plan.price for plan in self.plans), default=0.0) + 1.0

    def lexicographic_terms(self, values: list[float]) -> list[tuple[pulp.LpVariable, float]]:
        """(S rank(v_i) - p_i) y_i: the best value first, then the lowest price."""
        rank = {v: r for r, v in enumerate(sorted(set(values)), start=1)}
        scale = 2.0 * self._price_bound()
        return [(y, scale * rank[v] - plan.price) for y, v, plan in zip(self.y, values, self.plans)]

    def decode(self) -> Choice | None:
        chosen = [plan for y, plan in zip(self.y, self.plans) if (y.value() or 0) > 0.5]
        return chosen[0] if len(chosen) == 1 else None


def _plans(candidates: list[Candidate], holder_costs: HolderCosts, keep_holders: int) -> list[Choice]:
    """Single Anchor candidates as they are; Tiering ones with each of their cheapest holder groups."""
    plans = []
    for c in candidates:
        if c.architecture is Architecture.SINGLE_ANCHOR:
            plans.append(Choice(c, None, 0))
            continue
        for holder, count in holder_costs.cheapest_types(c.trainer, c.count, keep_holders):
            plans.append(Choice(c, holder, count))
    return plans


def _vcpus(plan: Choice) -> dict[tuple[str, str, Market], float]:
    """vCPUs a plan uses per (region, quota group, market)."""
    c = plan.candidate
    region, itype = c.trainer.region, c.trainer.itype
    use: dict[tuple[str, str, Market], float] = {}
    if c.spot_vcpus:
        use[(region, itype.quota_group_in(Market.SPOT), Market.SPOT)] = c.spot_vcpus
    if c.on_demand_vcpus:
        use[(region, itype.quota_group, Market.ON_DEMAND)] = c.on_demand_vcpus
    if plan.holder is not None:
        key = (region, plan.holder.itype.quota_group, Market.ON_DEMAND)
        use[key] = use.get(key, 0.0) + plan.holders * plan.holder.itype.vcpus
    return use


def _expression(terms: list[tuple[pulp.LpVariable, float]]) -> pulp.LpAffineExpression:
    """A linear expression that adds up repeated variables (LpAffineExpression would keep the last)."""
    coefficients: dict[pulp.LpVariable, float] = {}
    for var, coefficient in terms:
        coefficients[var] = coefficients.get(var, 0.0) + coefficient
    return pulp.LpAffineExpression(coefficients)


def solve(problem: pulp.LpProblem, objective_terms: list[tuple[pulp.LpVariable, float]]) -> None:
    """Maximise the objective with CBC; every block must then be decoded by the caller."""
    problem.sense = pulp.LpMaximize
    problem.setObjective(_expression(objective_terms))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # PuLP 3 deprecates its bundled CBC; pinned < 4
        solver = pulp.PULP_CBC_CMD(msg=False)
    status = problem.solve(solver)
    if status != pulp.LpStatusOptimal:
        raise SolverError(f"the MILP solver stopped without an answer ({pulp.LpStatus[status]})")


class SelectionModel:
    """One planning question as its own problem: the best plan, then the next best after exclusions.

    `values` always has one entry per plan of `self.plans`.
    """

    def __init__(self, candidates: list[Candidate], holder_costs: HolderCosts, limits: Limits, keep: int):
        self.problem = pulp.LpProblem("deepvm_plan", pulp.LpMaximize)
        self.block = Block(self.problem, "", candidates, holder_costs, limits, keep)
        self.plans = self.block.plans

    def best(self, values: list[float]) -> Choice | None:
        solve(self.problem, self.block.lexicographic_terms(values))
        return self.block.decode()

    def exclude(self, choice: Choice) -> None:
        self.block.exclude(choice)


def best_of_blocks(blocks: list[tuple[Block, list[float]]], problem: pulp.LpProblem) -> list[Choice | None]:
    """Solve independent blocks in one CBC run: the sum of their objectives is maximal iff each is."""
    solve(problem, list(itertools.chain.from_iterable(b.lexicographic_terms(v) for b, v in blocks)))
    return [block.decode() for block, _ in blocks]
