"""What "best" means: each objective scores a candidate and reports a plan's objective value.

Value objectives (deepvm, throughput) rank by a value that depends only on the trainers; ratio
objectives (cost, deadline) rank by price / effective FLOPS. Every MILP variable is one complete plan
with a known price, so both kinds reduce to one number per plan that the MILP maximises.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from provisioning.catalog import ScalingParams
from provisioning.planner.candidates import Candidate
from provisioning.planner.plan import Objective
from provisioning.scaling import effective_nodes

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

    def admits(self, candidate: Candidate) -> bool:
        return candidate.effective_flops >= self.min_effective_flops * (1 - 1e-12)

    def score(self, candidate: Candidate, cheapest_price: Callable[[], float]) -> float | None:
        """Presolve's per-candidate score (higher is better); None drops the candidate."""
        if not self.admits(candidate):
            return None
        if self.is_ratio:
            return -cheapest_price() / candidate.effective_flops
        return self.value(candidate)

    def plan_value(self, candidate: Candidate, price: float) -> float:
        """What the MILP maximises for a plan: the value, or minus the price per effective FLOPS."""
        return -price / candidate.effective_flops if self.is_ratio else self.value(candidate)

    def reported_value(self, candidate: Candidate, price: float) -> float:
        """The number shown as the plan's objective value."""
        if self.objective is Objective.DEADLINE:
            assert self.work_pflop is not None
            hours = self.work_pflop / (candidate.effective_flops * PFLOP_PER_TFLOPS_HOUR)
            return price * hours  # USD for the whole job
        if self.objective is Objective.COST:
            return price / (candidate.effective_flops * PFLOP_PER_TFLOPS_HOUR)  # USD per PFLOP
        return self.value(candidate)


def objective_spec(
    objective: Objective, *, deadline_hours: float | None = None, work_pflop: float | None = None
) -> ObjectiveSpec:
    if objective is Objective.DEEPVM:
        return ObjectiveSpec(objective, False, lambda c: c.z, effective_nodes)
    if objective is Objective.THROUGHPUT:
        return ObjectiveSpec(objective, False, lambda c: c.effective_flops, effective_nodes)
    if objective is Objective.COST:
        return ObjectiveSpec(objective, True, lambda c: c.effective_flops)
    assert deadline_hours is not None and work_pflop is not None
    needed = work_pflop / (deadline_hours * PFLOP_PER_TFLOPS_HOUR)
    return ObjectiveSpec(objective, True, lambda c: c.effective_flops, None, needed, work_pflop)


def _nodes(_scaling: ScalingParams, n: int) -> float:
    return float(n)


def no_scaling_spec() -> ObjectiveSpec:
    """The paper's "DeepVM without scaling" baseline: Z with K(n) = 1."""
    return ObjectiveSpec(Objective.DEEPVM, False, lambda c: c.trainer.flopp_spot * c.count, _nodes)
