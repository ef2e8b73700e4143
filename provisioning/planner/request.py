"""What the user asks the planner for, and everything the planner answers with."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from provisioning.planner.plan import Architecture, Objective, Plan

if TYPE_CHECKING:  # loaded only by plan --interruptions
    from provisioning.planner.interruptions import Interruptions


@dataclass(frozen=True)
class PlanRequest:
    """The constraints and objective of one planning question."""

    max_price: float | None  # USD per hour for the whole cluster; None only with a deadline
    objective: Objective = Objective.DEEPVM
    checkpoint_size_gib: float = 0.5  # one full checkpoint of the model's training state
    buffer_slots: int = 2  # checkpoints the holders keep in RAM (ring buffer)
    node_limit: int | None = None  # cap per instance type and market instead of the quotas
    mix: bool = False  # allow several GPU types in one cluster
    deadline_hours: float | None = None  # with work_pflop: the cheapest plan that finishes in time
    work_pflop: float | None = None  # total training work, in PFLOP (1e15 floating-point operations)
    top: int = 3  # how many ranked plans to return
    regions: tuple[str, ...] | None = None  # None: every region of the catalog
    interruptions: Interruptions | None = None  # rank by expected goodput (plan --interruptions)


@dataclass(frozen=True)
class RankedType:
    """One row of DeepVM's instance-level analysis (stage 1)."""

    instance_type: str
    region: str
    availability_zone: str
    flops: float
    spot_price: float | None
    on_demand_price: float | None
    flopp_spot: float | None  # flops / spot price * 3600
    flopp_on_demand: float | None


@dataclass
class PlanResult:
    """The planner's whole answer: DeepVM's four stages."""

    request: PlanRequest
    ranking: list[RankedType]  # stage 1: FLOPP ranking
    best_per_architecture: dict[Architecture, Plan | None]  # stage 2-3
    plans: list[Plan]  # stage 4: final decision first, then alternatives
    baselines: dict[str, Plan | None] = field(default_factory=dict)  # the paper's baselines
    solve_seconds: float = 0.0
