"""The simulation of one run as a plain loop over its events: the model, written to be read.

The vectorised engine (simulation/engine.py) does the same for thousands of runs at once; the test
checks that both give the same numbers on the same draws, and benchmarks/simulate_bench.py times this
loop as the baseline. It also records what happened (`record=True`): which node was lost when, with or
without notice, and when replacements joined, which is the schedule a sandbox run can replay.

The model (times in hours; W the work in PFLOP):
- Training runs at rate(N, F) (simulation/cluster.py) for the trainers alive, except while the job is
  relaunching (`pause`): no progress then, every node alive still bills. A restart-all policy trains
  only with the whole cluster up.
- A Spot node dies at the end of its lifetime (drawn from its pool's trace when it joins) or when its
  capacity level goes down (capacity traces), whichever comes first. Nodes lost at the same instant are
  one event and one relaunch.
- With a notice (all of the nodes lost had one), DeepCheck flushes and the job relaunches on the
  survivors: nothing is lost, training pauses flush + relaunch. Without one, the work since the last
  checkpoint is lost: a uniform share of the checkpoint interval at the rate before the loss, never more
  than was done since the last checkpoint we know of (a flush, a fold-in, a relaunch), then a relaunch.
- deepvm buys a replacement as soon as a node is lost; it can be bought once its capacity level is up,
  is ready `replacement_delay` later (if capacity is gone by then, it is bought again when capacity
  returns) and is folded in at a relaunch (flush + relaunch). Shrink-only buys nothing until no trainer
  is left, then the plan's Spot nodes again. Restart-all (SkyPilot) stops the whole cluster on any loss
  (no use of the notice), loses the work since the last checkpoint, buys every node again and relaunches
  when all are up.
- The deadline fallback (Can't Be Late's idea for a cluster): after each event, if the projected finish
  (relaunch end + remaining work / rate) is later than deadline - margin, every missing Spot node is
  bought on demand instead, and so is every later replacement.
- deepvm relaunches for every loss and for every fold-in, one relaunch at a time (training/control/attempts.py):
  a loss or a replacement that is ready while the job trains starts a relaunch now. One that comes while
  a relaunch is under way joins it if that relaunch has not launched its nodes yet (the last `launch_s`
  of a relaunch are mpirun and the ranks starting on the nodes already chosen); otherwise it waits for it:
  a replacement is folded in, and a noticed node that was launched stops the job again, at the relaunch's
  first step (one more relaunch after it), while a node lost without notice fails the starting attempt at
  once (a restart from then). Nodes lost at the same instant are one event. A replacement that is ready
  while nothing trains (no trainer left) is simply launched with. `restarts` counts relaunches of a
  running job, as `deepvm train` counts them; `interruptions` counts lost Spot nodes.
- Cost integrates the $/h of every node alive (on-demand nodes all along) until the work is done. A node
  lost with notice bills until it is gone; a replacement bills from when it is ready.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum

from provisioning.catalog.model import Market
from simulation.case import SimCase, SpotPool
from simulation.draws import Draws
from simulation.errors import check_time
from simulation.recovery import relaunch_end


class EventKind(str, Enum):
    LOST = "lost"  # a Spot node was preempted
    JOINED = "joined"  # a replacement (or a late node of the plan) joined at a relaunch
    FALLBACK = "fallback"  # the deadline fallback started buying on demand


@dataclass(frozen=True)
class SimEvent:
    """One thing that happened in a run: a sandbox run driven by the simulator replays the LOST ones."""

    at_h: float  # hours since the job started
    kind: EventKind
    slot: int  # which Spot node of the plan (numbered across its spot groups in plan order); -1 for FALLBACK
    instance_type: str
    market: Market
    notice: bool | None = None  # LOST only: whether the two-minute notice came first


@dataclass(frozen=True)
class RunResult:
    makespan_h: float
    cost_usd: float
    interruptions: int
    restarts: int
    events: tuple[SimEvent, ...] = ()


def run_one(case: SimCase, draws: Draws, run: int, *, record: bool = False) -> RunResult:
    """Simulate run `run` of `draws` (the engine's run of the same index gives the same result)."""
    return _Run(case, draws, run, record).result()


class _Run:
    def __init__(self, case: SimCase, draws: Draws, run: int, record: bool) -> None:
        self.case, self.draws, self.run, self.record = case, draws, run, record
        self.cluster, self.rules, self.workload = case.cluster, case.rules, case.workload
        self.recovery = case.workload.recovery
        self.pools = case.pools
        self.offsets = [float(x) for x in case.offsets(draws)[run]]
        slots = case.slots
        self.pool_of = [int(p) for p in case.slot_pool]
        self.level = [int(v) for v in case.slot_level]
        self.alive, self.on_demand = [False] * slots, [False] * slots
        self.death, self.arrive = [math.inf] * slots, [math.inf] * slots
        self.occupant = [0] * slots
        self.spot_alive, self.od_alive = [0] * len(self.pools), [0] * len(self.pools)
        self.t = self.done = self.checkpoint = self.pause = self.cost = 0.0
        self.interruptions = self.restarts = 0
        self.fallen_back = False
        self.events: list[SimEvent] = []
        for s in range(slots):
            up, _, up_from = self._window(s, 0.0)
            if up:
                self._start_node(s, 0.0)
            else:
                self.arrive[s] = up_from + self.recovery.replacement_delay_h

    # --- the trace ------------------------------------------------------------------------------------
    def _window(self, s: int, t: float) -> tuple[bool, float, float]:
        """Slot s at time t: may it run, when is it next down, from when may it run (capacity traces)."""
        pool = self.pool_of[s]
        windows = self.pools[pool].windows
        if windows is None:
            return True, math.inf, t
        up, down_at, up_from, _ = windows.at(self.level[s], self.offsets[pool], t)
        return bool(up), float(down_at), float(up_from)

    # --- the cluster ----------------------------------------------------------------------------------
    def _rate(self) -> float:
        """PFLOP per hour of the trainers alive (the engine computes the same sums in the same order)."""
        cluster = self.cluster
        trainers = cluster.fixed_trainers + sum(self.spot_alive) + sum(self.od_alive)
        tflops = cluster.fixed_tflops
        for p, pool in enumerate(self.pools):
            tflops = tflops + (self.spot_alive[p] + self.od_alive[p]) * pool.group.flops
        if self.rules.restart_all and trainers < cluster.trainers:
            return 0.0
        return cluster.pflop_per_hour(trainers, tflops)

    def _usd_per_hour(self) -> float:
        bill = self.cluster.fixed_usd_per_hour
        for p, pool in enumerate(self.pools):
            bill = bill + self.spot_alive[p] * pool.group.usd_per_hour + self.od_alive[p] * _od_price(pool)
        return bill

    def _start_node(self, s: int, t: float) -> None:
        self.alive[s] = True
        pool = self.pool_of[s]
        if self.on_demand[s]:
            self.death[s] = math.inf
            self.od_alive[pool] += 1
        else:
            lifetime = float(self.draws.lifetime(self.run, s, self.occupant[s]))
            self.death[s] = min(t + lifetime, self._window(s, t)[1])
            self.spot_alive[pool] += 1

    def _request(self, s: int, t: float) -> None:
        """Buy a node for slot s: on demand once the deadline fallback acts, else Spot when capacity allows."""
        delay = self.recovery.replacement_delay_h
        if self.fallen_back and self.pools[self.pool_of[s]].group.on_demand_usd_per_hour is not None:
            self.on_demand[s] = True
            self.arrive[s] = t + delay
        else:
            self.arrive[s] = self._window(s, t)[2] + delay

    # --- the loop -------------------------------------------------------------------------------------
    def result(self) -> RunResult:
        work = self.workload.work_pflop
        while True:
            rate = self._rate()
            start = max(self.t, self.pause)
            t_finish = start + (work - self.done) / rate if rate > 0 else math.inf
            t_death = min(self.death, default=math.inf)
            t_arrive = min(self.arrive, default=math.inf)
            t_event = min(t_death, t_arrive)
            t_next = min(t_finish, t_event)
            check_time(t_next, self.workload.max_hours, self.cluster.plan.summary())
            self.done = work if t_finish <= t_event else self.done + rate * max(t_next - start, 0.0)
            self.cost = self.cost + self._usd_per_hour() * (t_next - self.t)
            self.t = t_next
            if t_finish <= t_event:
                return RunResult(t_next, self.cost, self.interruptions, self.restarts, tuple(self.events))
            running = self.t >= self.pause and rate > 0
            if t_death <= t_arrive:
                self._deaths(rate, running)
            else:
                self._arrivals(rate, running)
            if self.rules.deadline_fallback and self.workload.deadline_h is not None and not self.fallen_back:
                self._check_deadline(self.workload.deadline_h)

    def _deaths(self, rate: float, running: bool) -> None:
        t, recovery = self.t, self.recovery
        dying = [s for s, d in enumerate(self.death) if d == t]
        loss, share = self.rules.restart_all, 0.0
        for s in dying:
            notice = bool(self.draws.notice(self.run, s, self.occupant[s]))
            if self.rules.restart_all:  # SkyPilot does not use the notice; the first node lost sets the loss
                share = share if s != dying[0] else float(self.draws.lost_share(self.run, s, self.occupant[s]))
            elif not notice:
                loss, share = True, max(share, float(self.draws.lost_share(self.run, s, self.occupant[s])))
            self.alive[s], self.death[s] = False, math.inf
            self.spot_alive[self.pool_of[s]] -= 1
            self.interruptions += 1
            self._note(EventKind.LOST, s, notice)
        if loss:
            self.done = self.done - min(share * recovery.checkpoint_interval_h * rate, self.done - self.checkpoint)
        self.checkpoint = self.done
        if self.rules.restart_all:
            self.restarts += running
            for s in range(len(self.alive)):
                if self.alive[s]:
                    self.alive[s], self.death[s] = False, math.inf
                    self.spot_alive[self.pool_of[s]] -= 1
                self._request(s, t)
            return
        self._relaunch(fails=loss)
        if self.rules.replace or self.fallen_back:
            for s in dying:
                self._request(s, t)
        elif not any(self.alive) and self.cluster.fixed_trainers == 0 and min(self.arrive) == math.inf:
            for s in range(len(self.alive)):  # shrink-only with nothing left: the plan's nodes again
                self._request(s, t)

    def _arrivals(self, rate: float, running: bool) -> None:
        t = self.t
        joined = False
        for s, a in enumerate(self.arrive):
            if a != t:
                continue
            self.arrive[s] = math.inf
            up, _, up_from = self._window(s, t)
            if not self.on_demand[s] and not up:  # capacity went away while it booted
                self.arrive[s] = up_from + self.recovery.replacement_delay_h
                continue
            self.occupant[s] += 1
            self._start_node(s, t)
            joined = True
            self._note(EventKind.JOINED, s, None)
        if not joined:
            return
        self.checkpoint = self.done
        if self.rules.restart_all:  # relaunched once the whole cluster is up
            self.restarts += running
            self.pause = max(self.pause, t + self.recovery.loss_pause_h)
        elif rate > 0:
            self._relaunch(fails=False)
        else:  # nothing trains: the job is launched with it
            self.pause = max(self.pause, t + self.recovery.notice_pause_h)

    def _relaunch(self, fails: bool) -> None:
        """The job relaunches for what happened now (a loss, `fails` when without notice; a node to fold
        in), unless the coming launch takes it in: one relaunch at a time (see the module docstring)."""
        end = relaunch_end(self.t, self.pause, fails, self.recovery)
        if end is not None:
            self.pause = end
            self.restarts += 1

    def _check_deadline(self, deadline_h: float) -> None:
        rate = self._rate()
        finish = max(self.t, self.pause) + (self.workload.work_pflop - self.done) / rate if rate > 0 else math.inf
        if finish <= deadline_h - self.recovery.fallback_margin_h:
            return
        self.fallen_back = True
        if self.record:
            self.events.append(SimEvent(self.t, EventKind.FALLBACK, -1, "", Market.ON_DEMAND))
        for s in range(len(self.alive)):
            buyable = self.pools[self.pool_of[s]].group.on_demand_usd_per_hour is not None
            if not self.alive[s] and not self.on_demand[s] and buyable:
                self._request(s, self.t)

    def _note(self, kind: EventKind, s: int, notice: bool | None) -> None:
        if self.record:
            group = self.pools[self.pool_of[s]].group
            market = Market.ON_DEMAND if self.on_demand[s] else Market.SPOT
            self.events.append(SimEvent(self.t, kind, s, group.instance_type, market, notice))


def _od_price(pool: SpotPool) -> float:
    """What the deadline fallback pays per hour for a node of this pool (a pool without an on-demand price
    is never bought on demand, so 0 never bills)."""
    return pool.group.on_demand_usd_per_hour or 0.0
