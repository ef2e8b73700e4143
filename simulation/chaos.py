"""One simulated run's interruptions as a schedule to replay on a live cluster (`deepvm chaos`).

The simulator is only worth what it predicts, so a sandbox run of `deepvm train` is interrupted exactly
as one simulated run says: the run's LOST events (simulation/reference.py records them), in time
compressed by `time_scale` (trace hours pass that many times faster: 180 makes a trace hour 20 s).

The schedule and the prediction must see the same random numbers, so both come from one `ChaosQuestion`:
the cluster's plan, the trace, the seed and the work. Work is given as steps at a step time measured
here (wall seconds); the simulator sees it in trace time (x time_scale), as it sees every duration.
The schedule is drawn from a run three times as long on the same draws: a run's events do not depend on
how much work is left, so the first part is the run itself, and the sandbox, slower or faster than
predicted, still has the trace's later events to meet. The draws do not depend on the work either (a
fixed block size), so the prediction can be asked after the run, with the figures the run measured: its
relaunch times, its replacement delay and its step time per trainer count (`measured_speeds`).

Slots are the simulator's Spot positions (numbered across the plan's Spot groups in plan order); each is
held by one live node at a time. `SlotMap` gives the live Spot nodes of each type the vacant slots of
their type in order, and keeps a node in its slot until it is lost; a replacement that joins takes the
slot it was bought for (the lowest vacant one of its type).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace

from provisioning.catalog.model import Catalog
from provisioning.planner.plan import Plan
from simulation.case import SimCase
from simulation.cluster import SimCluster, sim_cluster
from simulation.draws import Draws
from simulation.market import MarketCase, market_case
from simulation.policies import PLAN_ONLY_RECOVERY
from simulation.recovery import SECONDS_PER_HOUR, RecoveryModel, Workload
from simulation.reference import EventKind, RunResult, run_one
from simulation.trace import Trace
from simulation.traces import default_trace_for
from simulation.zones import TraceSpec, zone_traces

LOOKAHEAD = 3.0  # the schedule covers this many times the run's own simulated makespan
_BLOCK = 64  # occupants per slot drawn at once (draws.block_size's largest)


@dataclass(frozen=True)
class ChaosQuestion:
    """What decides one run's interruptions (and the simulator's prediction for it)."""

    plan: Plan
    catalog: Catalog
    trace: Trace
    seed: int
    steps: int
    step_time_s: float  # seconds per step here, on the whole plan
    time_scale: float  # trace time passes this many times faster here
    recovery: RecoveryModel  # in seconds here (relaunch, restart, replacement delay, checkpoint interval)
    # seconds per step here with 1, 2, .. all trainers, where measured (the last is step_time_s); None: the
    # planner's scaling model from step_time_s
    seconds_per_step: tuple[float, ...] | None = None

    def case(self, work_factor: float = 1.0) -> SimCase:
        cluster = sim_cluster(self.plan, self.catalog)
        if self.seconds_per_step is not None:
            cluster = measured_speeds(cluster, self.seconds_per_step)
        trace_seconds = self.steps * self.step_time_s * self.time_scale
        work = trace_seconds / SECONDS_PER_HOUR * cluster.full_pflop_per_hour
        scaled = replace(
            self.recovery,
            relaunch_s=self.recovery.relaunch_s * self.time_scale,
            restart_s=self.recovery.restart_s * self.time_scale,
            checkpoint_interval_s=self.recovery.checkpoint_interval_s * self.time_scale,
            replacement_delay_s=self.recovery.replacement_delay_s * self.time_scale,
            launch_s=None if self.recovery.launch_s is None else self.recovery.launch_s * self.time_scale,
        )
        workload = Workload(work_pflop=work * work_factor, runs=1, seed=self.seed, recovery=scaled)
        return SimCase(cluster, tuple(self.trace for _ in cluster.spot_groups), PLAN_ONLY_RECOVERY, workload)

    def market_case(self) -> MarketCase:
        """The same run under the `deepvm` policy (the ladder the head runs), for a capacity trace in the plan's
        zone (simulation/chaos_capacity.py replays it): the cap is the plan's, and the ladder's backoff after a
        refusal is the head's, in seconds here, so in trace time `time_scale` times longer."""
        plan, workload = self.plan, self.case().workload
        zone = plan.availability_zone
        traces = zone_traces(
            [(TraceSpec(None, self.trace.name), self.trace)], zone, plan.region, [zone], default_trace_for
        )
        case = market_case(plan, self.catalog, traces, workload, None, max(plan.price_cap or 0.0, plan.price_per_hour))
        timing = replace(
            case.timing,
            backoff_s=case.timing.backoff_s * self.time_scale,
            backoff_cap_s=case.timing.backoff_cap_s * self.time_scale,
        )
        rates = None
        if self.seconds_per_step is not None:  # PFLOP/h with n trainers: the work of a step in its measured time
            full = case.full_rate * self.seconds_per_step[-1]
            rates = tuple(full / s for s in self.seconds_per_step)
        return replace(case, timing=timing, measured_rates=rates)

    def draws(self) -> Draws:
        """The run's random numbers. A simulation sizes its blocks of lifetimes by the work it expects,
        which would give a question asked again with a measured step time other lives; one run's blocks
        are small, so they have one fixed size, and every prediction of the question sees the lives its
        schedule saw."""
        case = self.case()
        return Draws(
            case.traces, tuple(p.group.count for p in case.pools), 1, self.seed, self.recovery.notice_share, _BLOCK
        )

    def predict(self) -> RunResult:
        """The simulator's run: makespan in trace hours (÷ time_scale for hours here), its restarts."""
        return run_one(self.case(), self.draws(), 0, record=True)

    def schedule(self) -> tuple[ChaosStep, ...]:
        """The run's losses, and those of the same run carried on past its end, in seconds here."""
        longer = run_one(self.case(LOOKAHEAD), self.draws(), 0, record=True)  # the run's lives, and on
        return tuple(
            ChaosStep(
                at_s=e.at_h * SECONDS_PER_HOUR / self.time_scale,
                trace_at_h=e.at_h,
                slot=e.slot,
                instance_type=e.instance_type,
                notice=bool(e.notice),
            )
            for e in longer.events
            if e.kind is EventKind.LOST
        )


def measured_speeds(cluster: SimCluster, seconds_per_step: tuple[float, ...]) -> SimCluster:
    """`cluster` training at the speeds measured here: `seconds_per_step[n - 1]` with n trainers.

    The planner's K(n) describes GPUs on machines of their own. A sandbox's nodes share one machine's cores,
    so with fewer trainers each does more of the same work on the same cores, and a step takes about as
    long: the simulator is told the measured speeds instead, as `deepvm profile` tells the planner a
    measured curve. The rate with every trainer stays the plan's (work is still steps x the full step
    time); K is rescaled for fewer. One trainer type only: the measured time is per trainer count.
    """
    trainers = cluster.trainers
    if len(seconds_per_step) != trainers or min(seconds_per_step) <= 0:
        raise ValueError(f"need a positive step time for each of 1..{trainers} trainers, got {seconds_per_step}")
    if len({g.instance_type for g in cluster.groups if g.trains}) != 1:
        raise ValueError("measured step times describe a plan with one trainer type")
    full, k_full = seconds_per_step[-1], cluster.k_min[trainers]
    k_min = (0.0, *(k_full * trainers * full / (n * s) for n, s in enumerate(seconds_per_step, start=1)))
    return replace(cluster, k_min=k_min)


@dataclass(frozen=True)
class ChaosStep:
    """One Spot node to take away: with a notice (`deepvm interrupt`) or without (terminated)."""

    at_s: float  # seconds after the start, here
    trace_at_h: float  # hours after the start, in the trace
    slot: int
    instance_type: str
    notice: bool


@dataclass(frozen=True)
class LiveNode:
    instance_id: str
    instance_type: str
    launched_at: str  # ISO-8601: older nodes take the lower slots


class SlotMap:
    """Which live Spot node holds each slot of the plan."""

    def __init__(self, slot_types: Iterable[str]) -> None:
        self.slot_types = tuple(slot_types)
        self.holder: dict[int, str] = {}
        self.taken: set[str] = set()  # nodes already given an interruption: never a slot again

    @classmethod
    def for_plan(cls, plan: Plan, catalog: Catalog) -> SlotMap:
        return cls(g.instance_type for g in sim_cluster(plan, catalog).spot_groups for _ in range(g.count))

    def update(self, live: Iterable[LiveNode]) -> None:
        """Forget slots whose node is gone; give each new live node the lowest vacant slot of its type."""
        live = sorted(live, key=lambda n: (n.launched_at, n.instance_id))
        alive = {n.instance_id for n in live}
        self.holder = {s: i for s, i in self.holder.items() if i in alive}
        held = set(self.holder.values())
        for node in live:
            if node.instance_id in held or node.instance_id in self.taken:
                continue
            vacant = [s for s, t in enumerate(self.slot_types) if t == node.instance_type and s not in self.holder]
            if vacant:
                self.holder[vacant[0]] = node.instance_id
                held.add(node.instance_id)

    def take(self, slot: int) -> str | None:
        """The node holding `slot`, which leaves it (None: the slot is empty here, its replacement late)."""
        instance_id = self.holder.pop(slot, None)
        if instance_id is not None:
            self.taken.add(instance_id)
        return instance_id


def recovery_here(time_scale: float, notice_share: float, replacement_delay_s: float | None = None) -> RecoveryModel:
    """The recovery figures in seconds here: the simulator's (real-world) defaults compressed like the
    trace, and the replacement delay if given (the one figure that decides which node the schedule takes:
    a replacement's life starts when it joins)."""
    default = RecoveryModel()
    return RecoveryModel(
        notice_share=notice_share,
        relaunch_s=default.relaunch_s / time_scale,
        restart_s=default.restart_s / time_scale,
        checkpoint_interval_s=default.checkpoint_interval_s / time_scale,
        replacement_delay_s=default.replacement_delay_s / time_scale
        if replacement_delay_s is None
        else replacement_delay_s,
    )


@dataclass(frozen=True)
class ChaosAction:
    """A step as it was carried out: which node it took, how, and when (None: its slot was empty)."""

    step: ChaosStep
    instance_id: str | None
    done_at_s: float
    message: str

    def to_dict(self) -> dict[str, object]:
        return {
            "at_s": round(self.step.at_s, 3),
            "trace_at_h": round(self.step.trace_at_h, 6),
            "slot": self.step.slot,
            "instance_type": self.step.instance_type,
            "notice": self.step.notice,
            "instance_id": self.instance_id,
            "done_at_s": round(self.done_at_s, 3),
            "message": self.message,
        }
