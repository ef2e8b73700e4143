"""What `deepvm simulate` reports per policy, and its `--json` document.

Makespan and cost are summarised by their mean and their 50th, 90th and 99th percentiles (numpy's
linear interpolation between order statistics): the bad case is the point of simulating. $ per PFLOP is
the mean cost over the work. P(miss deadline) is the share of runs that end after the deadline.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from provisioning.planner.plan import Plan
from simulation.engine import RunOutcomes
from simulation.policies import PolicyName
from simulation.recovery import RecoveryModel


@dataclass(frozen=True)
class Quantiles:
    mean: float
    p50: float
    p90: float
    p99: float

    @classmethod
    def of(cls, values: np.ndarray) -> Quantiles:
        p50, p90, p99 = np.quantile(values, [0.5, 0.9, 0.99])
        return cls(float(values.mean()), float(p50), float(p90), float(p99))

    def to_dict(self) -> dict[str, float]:
        return {"mean": self.mean, "p50": self.p50, "p90": self.p90, "p99": self.p99}


@dataclass(frozen=True)
class PolicySummary:
    policy: PolicyName
    plan: Plan
    traces: tuple[str, ...]  # the trace of each Spot group of the plan, in plan order
    makespan_h: Quantiles
    cost_usd: Quantiles
    usd_per_pflop: float
    interruptions_per_run: float
    restarts_per_run: float
    p_miss_deadline: float | None  # None without a deadline

    def to_dict(self) -> dict[str, Any]:
        return {
            "policy": self.policy.value,
            "plan": self.plan.to_dict(),
            "makespan_h": self.makespan_h.to_dict(),
            "cost_usd": self.cost_usd.to_dict(),
            "usd_per_pflop": self.usd_per_pflop,
            "interruptions_per_run": self.interruptions_per_run,
            "restarts_per_run": self.restarts_per_run,
            "p_miss_deadline": self.p_miss_deadline,
        }


def summarise(
    policy: PolicyName,
    plan: Plan,
    traces: tuple[str, ...],
    outcomes: RunOutcomes,
    work_pflop: float,
    deadline_h: float | None,
) -> PolicySummary:
    cost = Quantiles.of(outcomes.cost_usd)
    return PolicySummary(
        policy=policy,
        plan=plan,
        traces=traces,
        makespan_h=Quantiles.of(outcomes.makespan_h),
        cost_usd=cost,
        usd_per_pflop=cost.mean / work_pflop,
        interruptions_per_run=float(outcomes.interruptions.mean()),
        restarts_per_run=float(outcomes.restarts.mean()),
        p_miss_deadline=None if deadline_h is None else float((outcomes.makespan_h > deadline_h).mean()),
    )


@dataclass(frozen=True)
class SimulationReport:
    """Every policy on the same runs: the answer of `deepvm simulate`."""

    runs: int
    seed: int
    trace: str  # what drove the Spot nodes: one trace's name, or each type's
    work_pflop: float
    deadline_h: float | None
    recovery: RecoveryModel
    policies: tuple[PolicySummary, ...]

    def to_dict(self) -> dict[str, Any]:
        """The issue's document: {"runs", "seed", "trace", "work", "policies": [...]}; work in PFLOP."""
        return {
            "runs": self.runs,
            "seed": self.seed,
            "trace": self.trace,
            "work": self.work_pflop,
            "policies": [p.to_dict() for p in self.policies],
        }
