"""The planner's mixed-integer program, solved exactly by CBC through PuLP.

Notation
    c in C      trainer candidates from presolve (architecture, region, AZ, GPU type v, count n)
    w in W_r    on-demand CPU types that can hold checkpoints in region r
    x_c         1 if candidate c is the cluster's trainer side                  (binary)
    u_rw        1 if the holders are of type w in region r                      (binary)
    m_rw        number of holders of type w in region r                         (integer >= 0)
    v_c         the objective's value of c (e.g. DeepVM's Z = FLOPP_spot(v) n K(n))
    p_c         $/h of c's GPU nodes; o_rw the on-demand price of w

Objective     max  sum_c v_c x_c  -  eps * price,   price = sum_c p_c x_c + sum_rw o_rw m_rw
    K(n) is non-linear in n; enumerating n in the candidates makes the objective linear. eps is small
    enough that price only breaks ties of value (lexicographic); when values are too close for that to
    be numerically safe, a second solve minimises price with the value fixed at its optimum.

Constraints
    (1) one cluster:          sum_c x_c = 1
    (2) holders iff Tiering:  sum_w u_rw = sum_{c Tiering in r} x_c               for every region r
    (3) holder bounds:        u_rw <= m_rw <= M_rw u_rw
    (4) saturation + memory:  m_rw >= need(c, w) (x_c + u_rw - 1)   for Tiering c in r, w in W_r,
                              need = max(floor(n / n_sat(min bw)) + 1, ceil(size * slots / mem_w));
                              x_c + u_rw <= 1 where no holder count of w works for c
    (5) price cap:            price <= max price
    (6) quotas:               vCPUs per (region, quota group, market) <= quota
    (7) exclusions:           x_c + u_rw <= 1 (or x_c = 0) for plans already ranked (k-best)
"""

from __future__ import annotations

import itertools
import math
import re
from dataclasses import dataclass

import pulp

from provisioning.catalog import Market
from provisioning.errors import DeepvmError
from provisioning.planner.candidates import (
    PRICE_TOLERANCE,
    Candidate,
    HolderOption,
    Limits,
    holders_needed,
)
from provisioning.planner.plan import Architecture


class SolverError(DeepvmError):
    """CBC ended without a proven answer (not infeasibility: that is a normal outcome)."""


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


class SelectionModel:
    """Constraints (1)-(6) over one candidate set; solve() adds an objective and exclusions (7)."""

    def __init__(self, candidates: list[Candidate], holders: list[HolderOption], limits: Limits):
        self.candidates = candidates
        self.limits = limits
        tiering_regions = {c.trainer.region for c in candidates if c.architecture is Architecture.TIERING}
        self.holders = [h for h in holders if h.region in tiering_regions]
        self.problem = pulp.LpProblem("deepvm_plan", pulp.LpMaximize)
        self.x = [pulp.LpVariable(f"x_{i}", cat=pulp.LpBinary) for i in range(len(candidates))]
        self.u = [pulp.LpVariable(f"u_{j}", cat=pulp.LpBinary) for j in range(len(self.holders))]
        self.m = [
            pulp.LpVariable(f"m_{j}", lowBound=0, upBound=self._holder_cap(h), cat=pulp.LpInteger)
            for j, h in enumerate(self.holders)
        ]
        self._add_constraints()

    def _holder_cap(self, holder: HolderOption) -> int:
        caps = [float(self.limits.nodes_within_quota(holder.region, holder.itype, Market.ON_DEMAND))]
        if self.limits.node_limit is not None:
            caps.append(self.limits.node_limit)
        if self.limits.max_price is not None:
            caps.append((self.limits.max_price + PRICE_TOLERANCE) // holder.on_demand_price)
        return int(min(caps))

    def price_expression(self) -> pulp.LpAffineExpression:
        terms = [(x, c.base_price) for x, c in zip(self.x, self.candidates)]
        terms += [(m, h.on_demand_price) for m, h in zip(self.m, self.holders)]
        return pulp.LpAffineExpression(terms)

    def _add_constraints(self) -> None:
        p, x, u, m = self.problem, self.x, self.u, self.m
        p += pulp.lpSum(x) == 1, "c1_one_cluster"
        by_region: dict[str, list[int]] = {}
        for j, h in enumerate(self.holders):
            by_region.setdefault(h.region, []).append(j)
            p += m[j] >= u[j], f"c3_holder_min_{j}"
            p += m[j] <= self._holder_cap(h) * u[j], f"c3_holder_max_{j}"
        for region, js in by_region.items():
            tiering = [i for i, c in enumerate(self.candidates)
                       if c.architecture is Architecture.TIERING and c.trainer.region == region]
            holders_in_region = pulp.lpSum(u[j] for j in js)
            p += holders_in_region == pulp.lpSum(x[i] for i in tiering), f"c2_holders_{_name(region)}"
            for i in tiering:
                c = self.candidates[i]
                for j in js:
                    need = holders_needed(c.count, c.trainer, self.holders[j], self.limits)
                    if need is None:
                        p += x[i] + u[j] <= 1, f"c4_never_{i}_{j}"
                    elif need > 1:
                        p += m[j] >= need * (x[i] + u[j] - 1), f"c4_need_{i}_{j}"
        if self.limits.max_price is not None:
            p += self.price_expression() <= self.limits.max_price + PRICE_TOLERANCE, "c5_price_cap"
        self._add_quotas()

    def _add_quotas(self) -> None:
        usage: dict[tuple[str, str, Market], list[tuple[pulp.LpVariable, float]]] = {}
        for x, c in zip(self.x, self.candidates):
            group = (c.trainer.region, c.trainer.itype.quota_group)
            if c.spot_vcpus:
                usage.setdefault((*group, Market.SPOT), []).append((x, c.spot_vcpus))
            if c.on_demand_vcpus:
                usage.setdefault((*group, Market.ON_DEMAND), []).append((x, c.on_demand_vcpus))
        for m, h in zip(self.m, self.holders):
            usage.setdefault((h.region, h.itype.quota_group, Market.ON_DEMAND), []).append((m, h.itype.vcpus))
        for (region, group, market), terms in usage.items():
            quota = self.limits.quota(region, group, market)
            if math.isfinite(quota):
                name = f"c6_quota_{_name(region)}_{_name(group)}_{market.name}"
                self.problem += pulp.LpAffineExpression(terms) <= quota, name

    def exclude(self, choice: Choice) -> None:
        """(7): rule out one plan, for the next best."""
        i = next(k for k, c in enumerate(self.candidates) if c is choice.candidate)
        n = len(self.problem.constraints)
        if choice.holder is None:
            self.problem += self.x[i] <= 0, f"c7_exclude_{n}"
        else:
            j = next(k for k, h in enumerate(self.holders) if h is choice.holder)
            self.problem += self.x[i] + self.u[j] <= 1, f"c7_exclude_{n}"

    def solve(self, values: list[float], price_weight: float) -> Choice | None:
        """max sum v_c x_c - price_weight * price; None when infeasible."""
        self.problem.setObjective(
            pulp.LpAffineExpression(list(zip(self.x, values))) - price_weight * self.price_expression()
        )
        return self._run()

    def solve_lexicographic(self, values: list[float]) -> Choice | None:
        """Best value, ties to the lower price (one solve when the values allow a safe eps)."""
        top = max((abs(v) for v in values), default=0.0) or 1.0
        scaled = [v / top for v in values]
        distinct = sorted(set(round(v, 12) for v in scaled))
        gap = min((b - a for a, b in itertools.pairwise(distinct)), default=1.0)
        price_bound = self._price_bound()
        if gap > 1e-6:
            return self.solve(scaled, gap / (4.0 * price_bound))
        best = self.solve(scaled, 0.0)
        if best is None:
            return None
        floor = pulp.LpAffineExpression(list(zip(self.x, scaled))) >= _value_of(best, self, scaled) - 1e-9
        self.problem += floor, "lex_value_floor"
        try:
            return self.solve([0.0] * len(scaled), 1.0)
        finally:
            del self.problem.constraints["lex_value_floor"]

    def _price_bound(self) -> float:
        if self.limits.max_price is not None:
            return max(self.limits.max_price, 1e-6)
        biggest_holders = max((h.on_demand_price * self._holder_cap(h) for h in self.holders), default=0.0)
        return max((c.base_price for c in self.candidates), default=1.0) + biggest_holders

    def _run(self) -> Choice | None:
        status = self.problem.solve(pulp.PULP_CBC_CMD(msg=False))
        if status == pulp.LpStatusInfeasible:
            return None
        if status != pulp.LpStatusOptimal:
            raise SolverError(f"the MILP solver stopped without an answer ({pulp.LpStatus[status]})")
        chosen = [c for x, c in zip(self.x, self.candidates) if (x.value() or 0) > 0.5]
        if len(chosen) != 1:
            return None
        holder, count = None, 0
        for u, m, h in zip(self.u, self.m, self.holders):
            if (u.value() or 0) > 0.5:
                holder, count = h, round(m.value() or 0)
        return Choice(chosen[0], holder, count)


def _value_of(choice: Choice, model: SelectionModel, values: list[float]) -> float:
    index = next(k for k, c in enumerate(model.candidates) if c is choice.candidate)
    return values[index]
