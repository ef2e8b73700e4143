"""One simulation question: a cluster, the traces of its Spot groups, how the policy reacts, the workload.

Both the vectorised engine and the reference loop take a `SimCase` and a `Draws`, and read the cluster
through `SpotPool`s: each Spot group of the plan with its trace and, for a capacity-driven trace, its
up/down tables (simulation/capacity.py). Slots are numbered across the pools in plan order.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from simulation.capacity import CapacityWindows, capacity_windows
from simulation.cluster import SimCluster, SimGroup
from simulation.draws import Draws, block_size
from simulation.recovery import Workload
from simulation.trace import Trace


@dataclass(frozen=True)
class PolicyRules:
    """How a policy reacts to a lost Spot node (plan-only, deepvm's before the ladder, is replace=True alone)."""

    replace: bool  # buy a replacement for every lost Spot node, fold it in when it is ready
    restart_all: bool = False  # any loss stops the job; the whole cluster is relaunched (SkyPilot managed jobs)
    deadline_fallback: bool = False  # buy on-demand trainers when the deadline is at risk (Can't Be Late)
    ladder: bool = False  # the recovery ladder decides (simulation/market_run.py), not these slots


@dataclass(frozen=True)
class SpotPool:
    """One Spot group of the plan and what decides its nodes' lives."""

    group: SimGroup
    trace: Trace
    windows: CapacityWindows | None  # set when the trace is capacity-driven
    first_slot: int


@dataclass(frozen=True)
class SimCase:
    cluster: SimCluster
    traces: tuple[Trace, ...]  # one per Spot group of the cluster, in plan order
    rules: PolicyRules
    workload: Workload

    def __post_init__(self) -> None:
        if len(self.traces) != len(self.cluster.spot_groups):
            raise ValueError(f"{len(self.cluster.spot_groups)} spot groups but {len(self.traces)} traces")

    @cached_property
    def pools(self) -> tuple[SpotPool, ...]:
        pools, first = [], 0
        for group, trace in zip(self.cluster.spot_groups, self.traces):
            windows = None if trace.capacity is None else capacity_windows(trace.capacity, group.count)
            pools.append(SpotPool(group, trace, windows, first))
            first += group.count
        return tuple(pools)

    @cached_property
    def slot_pool(self) -> np.ndarray:
        """Which pool each slot belongs to."""
        return np.repeat(np.arange(len(self.pools)), [p.group.count for p in self.pools]).astype(np.int64)

    @cached_property
    def slot_level(self) -> np.ndarray:
        """Each slot's index within its pool (its capacity level)."""
        return np.concatenate([np.arange(p.group.count) for p in self.pools] or [np.zeros(0)]).astype(np.int64)

    @property
    def slots(self) -> int:
        return sum(p.group.count for p in self.pools)

    def offsets(self, draws: Draws) -> np.ndarray:
        """(runs, pools): where each run starts in each capacity series (0 for lifetime-driven pools)."""
        horizons = np.array([p.windows.horizon_h if p.windows else 0.0 for p in self.pools])
        return draws.start_share[:, None] * horizons[None, :]

    def draws(self) -> Draws:
        """The random numbers for this case's workload (same seed and shape: same numbers)."""
        expected = self.cluster.deterministic_makespan_h(self.workload.work_pflop)
        block = block_size(self.traces, expected, self.workload.runs, self.slots)
        return Draws(
            self.traces,
            tuple(p.group.count for p in self.pools),
            self.workload.runs,
            self.workload.seed,
            self.workload.recovery.notice_share,
            block,
        )
