"""A plan as the simulator sees it: which nodes a Spot trace can take, what each costs, how fast the trainers
alive train.

Throughput is the planner's own model, so that a run without interruptions takes exactly
work / plan.effective_flops: for N trainers alive with F TFLOPS between them,

    rate(N, F) = F * K_min(N)            (TFLOPS; x 3.6 for PFLOP per hour)
    K_min(N)   = min over the plan's trainer types v of K_v(N)

With one GPU type this is DeepVM's flops x n x K(n) (provisioning/scaling/model.py). A mixed plan (`--mix`)
combines its types the way provisioning/planner/mix.py plans them: data-parallel training synchronises
every trainer each step, so the scaling factor depends on the total count and the smallest K_v(N) of the
plan's types is taken; the FLOPS of the types alive add up.

On-demand nodes (the Single Anchor's anchor, Tiering's holders) are never preempted by a Spot trace: the
simulator models no on-demand failure (a lost holder would fall back to L3 in deepvm; AWS does not
reclaim on-demand capacity).
"""

from __future__ import annotations

from dataclasses import dataclass

from provisioning.catalog.model import Catalog, Market
from provisioning.core.errors import InputError
from provisioning.planner.objectives import PFLOP_PER_TFLOPS_HOUR
from provisioning.planner.plan import Plan, Role
from provisioning.scaling.model import scaling_factor, scaling_of


@dataclass(frozen=True)
class SimGroup:
    """One node group of the plan with the catalog's facts the simulation needs."""

    instance_type: str
    market: Market
    role: Role
    count: int
    usd_per_hour: float  # as planned
    flops: float  # TFLOPS of one node (0 for a checkpoint holder)
    on_demand_usd_per_hour: float | None  # one node of this type bought on demand (the deadline fallback)

    @property
    def trains(self) -> bool:
        return self.role is not Role.HOLDER


@dataclass(frozen=True)
class SimCluster:
    """The plan, its groups, and K_min(N) for every trainer count it can have."""

    plan: Plan
    groups: tuple[SimGroup, ...]
    k_min: tuple[float, ...]  # K_min(N) for N = 0 .. all trainers of the plan (K_min(0) = 0)

    @property
    def spot_groups(self) -> tuple[SimGroup, ...]:
        """The groups a Spot trace can preempt (always trainers: the planner buys holders on demand)."""
        return tuple(g for g in self.groups if g.market is Market.SPOT)

    @property
    def fixed_usd_per_hour(self) -> float:
        """What the on-demand nodes cost per hour: they run from start to finish."""
        return sum(g.count * g.usd_per_hour for g in self.groups if g.market is Market.ON_DEMAND)

    @property
    def fixed_trainers(self) -> int:
        return sum(g.count for g in self.groups if g.market is Market.ON_DEMAND and g.trains)

    @property
    def fixed_tflops(self) -> float:
        return sum(g.count * g.flops for g in self.groups if g.market is Market.ON_DEMAND and g.trains)

    @property
    def trainers(self) -> int:
        return sum(g.count for g in self.groups if g.trains)

    def pflop_per_hour(self, trainers: int, tflops: float) -> float:
        """rate(N, F) in PFLOP per hour (the engine computes the same product on arrays)."""
        return tflops * self.k_min[trainers] * PFLOP_PER_TFLOPS_HOUR

    @property
    def tflops(self) -> float:
        """Every trainer's FLOPS added up (before K)."""
        return sum(g.count * g.flops for g in self.groups if g.trains)

    @property
    def full_pflop_per_hour(self) -> float:
        """The plan's rate with every trainer up: what turns a measured or wanted time into work."""
        return self.pflop_per_hour(self.trainers, self.tflops)

    def deterministic_makespan_h(self, work_pflop: float) -> float:
        """Hours the plan takes for the work with every node up all the time: the planner's prediction,
        work / plan.effective_flops (tests check the two agree)."""
        return work_pflop / self.full_pflop_per_hour


def sim_cluster(plan: Plan, catalog: Catalog) -> SimCluster:
    """The simulator's view of `plan`, with FLOPS and scaling curves from the catalog it was planned on."""
    groups = []
    for g in plan.nodes:
        itype = catalog.types.get(g.instance_type)
        if itype is None:
            raise InputError(f"plan node type {g.instance_type} is not in catalog {catalog.source}")
        if g.role is not Role.HOLDER and not itype.is_gpu:
            raise InputError(f"plan trainer type {g.instance_type} has no GPU FLOPS in catalog {catalog.source}")
        groups.append(
            SimGroup(
                instance_type=g.instance_type,
                market=g.market,
                role=g.role,
                count=g.count,
                usd_per_hour=g.usd_per_hour,
                flops=itype.flops if g.role is not Role.HOLDER else 0.0,
                on_demand_usd_per_hour=catalog.on_demand_price(g.instance_type, plan.region),
            )
        )
    trainer_types = {g.instance_type for g in groups if g.trains}
    if not trainer_types:
        raise InputError("the plan has no trainers")
    curves = [scaling_of(catalog.types[name]) for name in sorted(trainer_types)]
    total = sum(g.count for g in groups if g.trains)
    k_min = (0.0, *(min(scaling_factor(c, n) for c in curves) for n in range(1, total + 1)))
    return SimCluster(plan=plan, groups=tuple(groups), k_min=k_min)
