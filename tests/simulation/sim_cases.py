"""The paper's catalog and plans, and traces built by hand, for the simulator's tests."""

from __future__ import annotations

from functools import cache

from provisioning.catalog.files import load_catalog_file
from provisioning.catalog.model import Catalog, Market
from provisioning.planner import Architecture, NodeGroup, Plan, PlanRequest, PlanResult, Role, plan_cluster
from provisioning.scaling.model import MEASURED_SCALING, scaling_factor
from simulation.case import PolicyRules, SimCase
from simulation.cluster import sim_cluster
from simulation.recovery import RecoveryModel, Workload
from simulation.trace import CapacitySeries, Trace, TraceKind
from simulation.zones import ZoneTraces
from tests.conftest import DATA

PAPER_CAP = 3.0  # USD per hour: the paper's real-world runs (17 g4dn.xlarge spot + 1 c5.xlarge holder)


@cache
def paper_catalog() -> Catalog:
    return load_catalog_file(DATA / "deepvm_data.json")


@cache
def paper_result() -> PlanResult:
    return plan_cluster(paper_catalog(), PlanRequest(max_price=PAPER_CAP))


def paper_plan() -> Plan:
    return paper_result().plans[0]


def mixed_plan() -> Plan:
    """8 g4dn.xlarge + 4 g5.xlarge spot trainers and a c5.xlarge holder: two Spot pools in one plan."""
    nodes = (
        NodeGroup("g4dn.xlarge", Market.SPOT, 8, Role.TRAINER, 0.1578),
        NodeGroup("g5.xlarge", Market.SPOT, 4, Role.TRAINER, 0.3018),
        NodeGroup("c5.xlarge", Market.ON_DEMAND, 1, Role.HOLDER, 0.17),
    )
    k = min(scaling_factor(MEASURED_SCALING[t], 12) for t in ("g4dn.xlarge", "g5.xlarge"))
    return Plan(
        Architecture.TIERING,
        "us-east-1",
        "us-east-1a",
        nodes,
        price_per_hour=8 * 0.1578 + 4 * 0.3018 + 0.17,
        effective_flops=k * (8 * 377 + 4 * 696),
        objective_value=0.0,
        catalog_source="tests",
    )


def hazard(per_hour: float) -> Trace:
    return Trace(f"rate:{per_hour:g}/h", TraceKind.HAZARD, "test", hazard_per_h=per_hour)


def capacity(shares: list[float], step_h: float = 0.5, request: int = 16) -> Trace:
    return Trace("capacity:test", TraceKind.CAPACITY, "test", capacity=CapacitySeries(step_h, tuple(shares), request))


def lifetimes(hours: list[float], censored: list[bool]) -> Trace:
    return Trace("lifetimes:test", TraceKind.LIFETIMES, "test", lifetimes_h=tuple(hours), censored=tuple(censored))


# A day of capacity in half-hour steps: full, a partial drop, a drop to nothing, and flickers.
DAY = [1.0] * 6 + [0.5] * 3 + [1.0] * 4 + [0.0] * 2 + [0.75, 1.0, 1.0, 0.25, 1.0] + [1.0] * 8 + [0.0] + [1.0] * 19


def case(
    plan: Plan,
    traces: Trace | tuple[Trace, ...],
    rules: PolicyRules = PolicyRules(replace=True),
    *,
    hours: float = 20.0,
    runs: int = 64,
    seed: int = 1,
    deadline_h: float | None = None,
    recovery: RecoveryModel = RecoveryModel(),
) -> SimCase:
    """`plan` doing `hours` of its own work (at full speed) on `traces` (one for every Spot group)."""
    cluster = sim_cluster(plan, paper_catalog())
    chosen = traces if isinstance(traces, tuple) else tuple(traces for _ in cluster.spot_groups)
    work = hours * cluster.pflop_per_hour(cluster.trainers, cluster.tflops)
    return SimCase(cluster, chosen, rules, Workload(work, runs, seed, deadline_h=deadline_h, recovery=recovery))


def everywhere(trace: Trace, zone: str = "deepvm-a") -> ZoneTraces:
    """`trace` for every Spot group, whatever its zone (as `--trace NAME` or `--interruption-rate` give it)."""
    return ZoneTraces(zone, (), lambda instance_type, region: trace)
