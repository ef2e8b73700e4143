"""What "best" means: each objective scores a candidate and reports a plan's objective value.

Value objectives (deepvm, throughput) rank by a value that depends only on the trainers; ratio
objectives (cost, deadline) rank by price / effective FLOPS. Every MILP variable is one complete plan
with a known price, so both kinds reduce to one number per plan that the MILP maximises.

With `interruptions` (plan --interruptions) every objective counts expected goodput (effective FLOPS x
the plan's goodput share) and ratio objectives the expected price (interruptions.py); both are
constants of the plan, so nothing else changes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from provisioning.catalog.model import ScalingParams
from provisioning.planner.candidates import Candidate
from provisioning.planner.plan import Objective
from provisioning.scaling.model import effective_nodes

if TYPE_CHECKING:  # loaded only by plan --interruptions
    from provisioning.planner.interruptions import Interruptions

PFLOP_PER_TFLOPS_HOUR = 3.6  # 1 TFLOPS sustained for an hour is 3.6 PFLOP


@dataclass(frozen=True)
class ObjectiveSpec:
    objective: Objective
    is_ratio: bool
    value: Callable[[Candidate], float]  # value objectives: maximised; ratio objectives: the denominator
    # For value objectives: value = (a constant of the GPU type) * node_gain(scaling, n), which lets
    # presolve rank counts without pricing them.
    node_gain: Callable[[ScalingParams, int], float] | None = None
    min_effective_flops: float = 0.0  # deadline: slower plans cannot finish in time
    work_pflop: float | None = None
    interruptions: Interruptions | None = None  # count Spot interruptions (expected goodput and price)

    def goodput(self, candidate: Candidate) -> float:
        """Effective TFLOPS, times the goodput share when interruptions are counted."""
        if self.interruptions is None:
            return candidate.effective_flops
        return candidate.effective_flops * self.interruptions.candidate_share(candidate)

    def paid(self, candidate: Candidate, price: float) -> float:
        """The plan's $/h, or its expected $/h when interruptions are counted."""
        return price if self.interruptions is None else self.interruptions.candidate_price(candidate, price)

    def admits(self, candidate: Candidate) -> bool:
        goodput = self.goodput(candidate)
        if self.interruptions is not None and goodput <= 0:
            return False  # stopped for relaunches all the time: it never finishes anything
        return goodput >= self.min_effective_flops * (1 - 1e-12)

    def score(self, candidate: Candidate, cheapest_price: Callable[[], float]) -> float | None:
        """Presolve's per-candidate score (higher is better); None drops the candidate."""
        if not self.admits(candidate):
            return None
        if self.is_ratio:
            return -self.paid(candidate, cheapest_price()) / self.goodput(candidate)
        return self.value(candidate)

    def plan_value(self, candidate: Candidate, price: float) -> float:
        """What the MILP maximises for a plan: the value, or minus the price per effective FLOPS."""
        return -self.paid(candidate, price) / self.goodput(candidate) if self.is_ratio else self.value(candidate)

    def reported_value(self, candidate: Candidate, price: float) -> float:
        """The number shown as the plan's objective value."""
        if self.objective is Objective.DEADLINE:
            assert self.work_pflop is not None
            hours = self.work_pflop / (self.goodput(candidate) * PFLOP_PER_TFLOPS_HOUR)
            return self.paid(candidate, price) * hours  # USD for the whole job
        if self.objective is Objective.COST:
            return self.paid(candidate, price) / (self.goodput(candidate) * PFLOP_PER_TFLOPS_HOUR)  # USD per PFLOP
        return self.value(candidate)


def objective_spec(
    objective: Objective,
    *,
    deadline_hours: float | None = None,
    work_pflop: float | None = None,
    interruptions: Interruptions | None = None,
) -> ObjectiveSpec:
    spec = _spec(objective, deadline_hours, work_pflop)
    return spec if interruptions is None else _counting_interruptions(spec, interruptions)


def _spec(objective: Objective, deadline_hours: float | None, work_pflop: float | None) -> ObjectiveSpec:
    if objective is Objective.DEEPVM:
        return ObjectiveSpec(objective, False, lambda c: c.z, effective_nodes)
    if objective is Objective.THROUGHPUT:
        return ObjectiveSpec(objective, False, lambda c: c.effective_flops, effective_nodes)
    if objective is Objective.COST:
        return ObjectiveSpec(objective, True, lambda c: c.effective_flops)
    assert deadline_hours is not None and work_pflop is not None
    needed = work_pflop / (deadline_hours * PFLOP_PER_TFLOPS_HOUR)
    return ObjectiveSpec(objective, True, lambda c: c.effective_flops, None, needed, work_pflop)


def _counting_interruptions(spec: ObjectiveSpec, interruptions: Interruptions) -> ObjectiveSpec:
    """The same objective on expected goodput: ratio objectives read goodput() and paid(); a value is
    multiplied by the plan's share. The share depends on the count and the type's pool, not on the
    scaling curve alone, so presolve ranks counts by their value (no node_gain shortcut)."""
    if spec.is_ratio:
        return replace(spec, interruptions=interruptions)
    value, share = spec.value, interruptions.candidate_share
    return replace(spec, value=lambda c: value(c) * share(c), node_gain=None, interruptions=interruptions)


def _nodes(_scaling: ScalingParams, n: int) -> float:
    return float(n)


def no_scaling_spec() -> ObjectiveSpec:
    """The paper's "DeepVM without scaling" baseline: Z with K(n) = 1."""
    return ObjectiveSpec(Objective.DEEPVM, False, lambda c: c.trainer.flopp_spot * c.count, _nodes)
