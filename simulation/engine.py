"""The simulation of many runs at once: numpy arrays of Spot slots x runs, advanced event by event in lockstep.

Each iteration finds, for every run still going, its next event (a node's death, a node joining, or the
end of the work), moves every run to its own next event time, integrates progress and cost up to it, and
applies the events, all as array operations. Runs do not wait for each other: a run with few events
simply finishes early, and finished runs are dropped from the arrays once they are half of them. The
model is the one simulation/reference.py spells out as a plain loop; the two give the same numbers on
the same draws (tests/simulation/test_engine_reference.py), so read that file for *what* happens and this
one for how it is made fast.

The arrays are slots x runs (a row per slot), so that what is asked of every run (its next death, the
nodes alive per pool) is an elementwise operation across a handful of long rows rather than a reduction
over many short ones. Everything summed per run is a count or a maximum, so the order in which event
pairs are visited does not matter and the numbers agree exactly with the reference loop.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from provisioning.planner.objectives import PFLOP_PER_TFLOPS_HOUR
from simulation.case import SimCase
from simulation.draws import Draws
from simulation.errors import PACE_FROM, check_pace, check_time

# Drop finished runs from the arrays once they are this share of them (copying costs as much as an iteration).
_COMPACT_AT = 0.5


@dataclass(frozen=True)
class RunOutcomes:
    """One number per run, in run order."""

    makespan_h: np.ndarray
    cost_usd: np.ndarray
    interruptions: np.ndarray  # Spot nodes lost
    restarts: np.ndarray  # relaunches of a running job

    @property
    def runs(self) -> int:
        return int(self.makespan_h.size)


def simulate(
    case: SimCase, draws: Draws | None = None, progress: Callable[[int, int], None] | None = None
) -> RunOutcomes:
    """All runs of `case` (on `draws`, by default the case's own); `progress(finished, runs)` now and then."""
    state = _Runs(case, draws or case.draws())
    return state.run(progress)


class _Runs:
    """The state of every unfinished run: per-run vectors, and slots x runs arrays (columns are compacted
    away as runs finish).

    Pools are contiguous row ranges, so the nodes alive per pool are column sums over a slice; event
    pairs are found with one comparison over the whole array, masked to the runs whose event it is.
    """

    def __init__(self, case: SimCase, draws: Draws) -> None:
        self.case, self.draws = case, draws
        self.rules, self.workload, self.recovery = case.rules, case.workload, case.workload.recovery
        cluster = case.cluster
        self.k_min = np.asarray(cluster.k_min)
        pools = case.pools
        self.windows = [p.windows for p in pools]
        self.pool_rows = [slice(p.first_slot, p.first_slot + p.group.count) for p in pools]
        self.flops = [p.group.flops for p in pools]
        self.price = [p.group.usd_per_hour for p in pools]
        self.od_price = [p.group.on_demand_usd_per_hour or 0.0 for p in pools]
        self.od_ok = np.array([p.group.on_demand_usd_per_hour is not None for p in pools], dtype=bool)
        self.pool_of, self.level = case.slot_pool, case.slot_level
        runs, slots = draws.runs, case.slots
        self.ids = np.arange(runs)
        self.offsets = case.offsets(draws)
        self.t, self.done, self.checkpoint = np.zeros(runs), np.zeros(runs), np.zeros(runs)
        self.pause, self.cost = np.zeros(runs), np.zeros(runs)
        self.interruptions, self.restarts = np.zeros(runs, np.int64), np.zeros(runs, np.int64)
        self.fallen_back, self.live = np.zeros(runs, bool), np.ones(runs, bool)
        self.alive, self.on_demand = np.zeros((slots, runs), bool), np.zeros((slots, runs), bool)
        self.death, self.arrive = np.full((slots, runs), np.inf), np.full((slots, runs), np.inf)
        self.occupant = np.zeros((slots, runs), np.int64)
        self.recover = np.full((slots, runs), np.inf)  # when a node's slot may be bought again once it dies
        self.out = RunOutcomes(np.zeros(runs), np.zeros(runs), np.zeros(runs, np.int64), np.zeros(runs, np.int64))
        self._start()

    def _start(self) -> None:
        """The plan's nodes at t = 0: those whose capacity is up run, the others are bought when it is."""
        slots, runs = self.alive.shape
        cols, rows = np.repeat(np.arange(slots), runs), np.tile(np.arange(runs), slots)
        zero = np.zeros(rows.size)
        up, down_at, up_from, back_at = self._window(rows, cols, zero)
        self._start_nodes(rows[up], cols[up], zero[up], down_at[up], back_at[up])
        later = ~up
        self.arrive[cols[later], rows[later]] = up_from[later] + self.recovery.replacement_delay_h

    # --- the trace, per (run, slot) pair -----------------------------------------------------------------
    def _window(self, rows, cols, t) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """CapacityWindows.at for each pair (lifetime-driven pools: always up, never down)."""
        if len(self.windows) == 1 and self.windows[0] is not None:
            return self.windows[0].at(self.level[cols], self.offsets[rows, 0], t)
        up, down_at, up_from, back_at = (
            np.ones(rows.size, bool),
            np.full(rows.size, np.inf),
            t.copy(),
            np.full(rows.size, np.inf),
        )
        for p, windows in enumerate(self.windows):
            if windows is None:
                continue
            sel = self.pool_of[cols] == p
            up[sel], down_at[sel], up_from[sel], back_at[sel] = windows.at(
                self.level[cols[sel]], self.offsets[rows[sel], p], t[sel]
            )
        return up, down_at, up_from, back_at

    # --- the cluster -------------------------------------------------------------------------------------
    def _alive_per_pool(self, rows) -> list[tuple[np.ndarray, np.ndarray | int]]:
        """(Spot nodes alive, on-demand nodes alive) of each pool, for the given runs."""
        alive = self.alive[:, rows]
        if not self.rules.deadline_fallback:
            return [np.count_nonzero(alive[r], axis=0) for r in self.pool_rows], [0] * len(self.pool_rows)
        od = self.on_demand[:, rows]
        return (
            [np.count_nonzero(alive[r] & ~od[r], axis=0) for r in self.pool_rows],
            [np.count_nonzero(alive[r] & od[r], axis=0) for r in self.pool_rows],
        )

    def _rate(self, rows=slice(None), counts=None) -> np.ndarray:
        """PFLOP per hour of the trainers alive: the reference's sums, in the same order."""
        cluster = self.case.cluster
        spots, ods = counts or self._alive_per_pool(rows)
        trainers = cluster.fixed_trainers + np.zeros(self.t[rows].shape, np.int64)
        tflops = cluster.fixed_tflops
        for spot, od, flops in zip(spots, ods, self.flops):
            trainers = trainers + spot + od
            tflops = tflops + (spot + od) * flops
        rate = np.broadcast_to(tflops * self.k_min[trainers] * PFLOP_PER_TFLOPS_HOUR, trainers.shape)
        if self.rules.restart_all:
            rate = np.where(trainers < cluster.trainers, 0.0, rate)
        return rate

    def _usd_per_hour(self, counts) -> np.ndarray:
        bill = self.case.cluster.fixed_usd_per_hour
        for spot, od, price, od_price in zip(*counts, self.price, self.od_price):
            bill = bill + spot * price + od * od_price
        return np.broadcast_to(bill, self.t.shape)

    def _start_nodes(self, rows, cols, t, down_at, back_at) -> None:
        """Nodes join: Spot ones live until their lifetime ends or their capacity goes down, and may be
        bought again right away (a lifetime) or once capacity is back (a capacity drop)."""
        self.alive[cols, rows] = True
        if self.draws.mortal.any():
            end = t + self.draws.lifetime(self.ids[rows], cols, self.occupant[cols, rows])
        else:  # capacity series alone: only drops end a node
            end = np.full(rows.size, np.inf)
        death = np.minimum(end, down_at)
        if self.rules.deadline_fallback:
            death = np.where(self.on_demand[cols, rows], np.inf, death)
        self.death[cols, rows] = death
        self.recover[cols, rows] = np.where(end < down_at, end, back_at)

    def _request(self, rows, cols, spot_from=None) -> None:
        """Buy nodes for these slots: on demand in runs the deadline fallback took over, else Spot once
        capacity allows (`spot_from`, when the caller knows it)."""
        t, delay = self.t[rows], self.recovery.replacement_delay_h
        if spot_from is None:
            spot_from = self._window(rows, cols, t)[2]
        if not self.rules.deadline_fallback:
            self.arrive[cols, rows] = spot_from + delay
            return
        od = self.fallen_back[rows] & self.od_ok[self.pool_of[cols]]
        self.on_demand[cols[od], rows[od]] = True
        self.arrive[cols, rows] = np.where(od, t + delay, spot_from + delay)

    def _pairs(self, times: np.ndarray, runs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(runs, slots): the pairs of these runs whose time in `times` is now (slot by slot). Another run
        can have such a pair only on an exact tie of event kinds, so the pairs are filtered, not the array."""
        flat = np.flatnonzero(times == self.t[None, :])
        cols, rows = np.divmod(flat, self.t.size)
        if rows.size:
            wanted = np.zeros(self.t.size, bool)
            wanted[runs] = True
            keep = wanted[rows]
            if not keep.all():
                rows, cols = rows[keep], cols[keep]
        return rows, cols

    # --- the loop ----------------------------------------------------------------------------------------
    def run(self, progress: Callable[[int, int], None] | None) -> RunOutcomes:
        total, finished, events = self.out.runs, 0, 0
        while self.t.size:
            finished += self._step()
            events += 1
            if events % PACE_FROM == 0 and self.live.any():
                least_done = float(self.done[self.live].min()) / self.workload.work_pflop
                check_pace(events, least_done, self.case.cluster.plan.summary())
            if progress is not None:
                progress(finished, total)
            if self.live.sum() <= _COMPACT_AT * self.live.size:
                self._compact()
        return self.out

    def _step(self) -> int:
        """Every live run to its next event; returns how many runs finished."""
        work = self.workload.work_pflop
        counts = self._alive_per_pool(slice(None))
        rate = self._rate(counts=counts)
        start = np.maximum(self.t, self.pause)
        with np.errstate(divide="ignore", invalid="ignore"):
            t_finish = np.where(rate > 0, start + (work - self.done) / rate, np.inf)
        t_death = self.death.min(axis=0, initial=np.inf)
        t_arrive = self.arrive.min(axis=0, initial=np.inf)
        t_event = np.minimum(t_death, t_arrive)
        t_next = np.minimum(t_finish, t_event)
        if self.live.any():
            check_time(float(t_next[self.live].max()), self.workload.max_hours, self.case.cluster.plan.summary())
        finishing = t_finish <= t_event
        self.done = np.where(finishing, work, self.done + rate * np.maximum(t_next - start, 0.0))
        self.cost = self.cost + self._usd_per_hour(counts) * (t_next - self.t)
        self.t = t_next
        running = (self.t >= self.pause) & (rate > 0)
        dying = np.flatnonzero(~finishing & (t_death <= t_arrive))
        arriving = np.flatnonzero(~finishing & (t_death > t_arrive))
        self._deaths(dying, rate, running)
        self._arrivals(arriving, rate, running)
        if self.rules.deadline_fallback and self.workload.deadline_h is not None:
            self._check_deadline(np.concatenate([dying, arriving]), self.workload.deadline_h)
        ended = finishing & self.live
        ids = self.ids[ended]
        self.out.makespan_h[ids], self.out.cost_usd[ids] = self.t[ended], self.cost[ended]
        self.out.interruptions[ids], self.out.restarts[ids] = self.interruptions[ended], self.restarts[ended]
        self.live &= ~finishing
        return int(ended.sum())

    def _deaths(self, runs: np.ndarray, rate: np.ndarray, running: np.ndarray) -> None:
        if runs.size == 0:
            return
        recovery = self.recovery
        rows, cols = self._pairs(self.death, runs)
        occupants, ids = self.occupant[cols, rows], self.ids[rows]
        self.interruptions += np.bincount(rows, minlength=self.t.size)
        self.alive[cols, rows], self.death[cols, rows] = False, np.inf
        share = np.zeros(self.t.size)
        loss = np.zeros(self.t.size, bool)
        if self.rules.restart_all:  # the lowest slot lost in each run sets the loss; notices are not used
            first = np.unique(rows, return_index=True)[1]  # pairs come slot by slot: a run's first is its lowest
            share[rows[first]] = self.draws.lost_share(ids[first], cols[first], occupants[first])
            loss[runs] = True
        else:
            no_notice = ~self.draws.notice(ids, cols, occupants)
            np.maximum.at(
                share, rows[no_notice], self.draws.lost_share(ids[no_notice], cols[no_notice], occupants[no_notice])
            )
            loss[rows[no_notice]] = True
        loss = loss[runs]
        if loss.any():  # with a notice nothing is lost (and AWS gives one before every reclaim)
            done = self.done[runs]
            lost = np.minimum(share[runs] * recovery.checkpoint_interval_h * rate[runs], done - self.checkpoint[runs])
            self.done[runs] = np.where(loss, done - lost, done)
        self.checkpoint[runs] = self.done[runs]
        if self.rules.restart_all:
            self.restarts[runs] += running[runs]
            self.alive[:, runs], self.death[:, runs] = False, np.inf
            self._request_all(runs)
            return
        self._relaunch(runs, loss)
        if self.rules.replace:
            self._request(rows, cols, self.recover[cols, rows])
            return
        self._request(rows[self.fallen_back[rows]], cols[self.fallen_back[rows]])
        if self.case.cluster.fixed_trainers == 0:
            self._refill_empty(runs[~self.fallen_back[runs]])

    def _refill_empty(self, runs: np.ndarray) -> None:
        """Shrink-only with no trainer left and nothing bought: the plan's Spot nodes again."""
        empty = runs[~self.alive[:, runs].any(axis=0) & np.isinf(self.arrive[:, runs].min(axis=0, initial=np.inf))]
        self._request_all(empty)

    def _request_all(self, runs: np.ndarray) -> None:
        """Buy every slot of these runs (a restart-all relaunch, or shrink-only with nothing left)."""
        slots = self.alive.shape[0]
        self._request(np.tile(runs, slots), np.repeat(np.arange(slots), runs.size))

    def _relaunch(self, runs: np.ndarray, fails: np.ndarray | bool) -> None:
        """These runs relaunch for what happened now (`fails`: a loss without notice), unless the coming
        launch takes it in: one relaunch at a time (the reference's _relaunch, elementwise)."""
        recovery = self.recovery
        t, pause = self.t[runs], self.pause[runs]
        now = t >= pause - recovery.launch_h
        start = np.where(fails, t, np.maximum(t, pause))
        self.pause[runs] = np.where(now, start + np.where(fails, recovery.loss_pause_h, recovery.notice_pause_h), pause)
        self.restarts[runs] += now

    def _arrivals(self, runs: np.ndarray, rate: np.ndarray, running: np.ndarray) -> None:
        if runs.size == 0:
            return
        rows, cols = self._pairs(self.arrive, runs)
        t = self.t[rows]
        self.arrive[cols, rows] = np.inf
        up, down_at, up_from, back_at = self._window(rows, cols, t)
        if self.rules.deadline_fallback:
            up |= self.on_demand[cols, rows]
        gone = ~up  # capacity went away while the node booted: buy it again when capacity returns
        self.arrive[cols[gone], rows[gone]] = up_from[gone] + self.recovery.replacement_delay_h
        rows, cols = rows[up], cols[up]
        self.occupant[cols, rows] += 1
        self._start_nodes(rows, cols, t[up], down_at[up], back_at[up])
        joined = np.zeros(self.t.size, bool)
        joined[rows] = True
        runs = np.flatnonzero(joined)
        self.checkpoint[runs] = self.done[runs]
        if self.rules.restart_all:  # relaunched once the whole cluster is up
            self.restarts[runs] += running[runs]
            self.pause[runs] = np.maximum(self.pause[runs], self.t[runs] + self.recovery.loss_pause_h)
            return
        training = rate[runs] > 0
        self._relaunch(runs[training], False)
        idle = runs[~training]  # nothing trains: the job is launched with them
        self.pause[idle] = np.maximum(self.pause[idle], self.t[idle] + self.recovery.notice_pause_h)

    def _check_deadline(self, runs: np.ndarray, deadline_h: float) -> None:
        runs = runs[~self.fallen_back[runs]]
        if runs.size == 0:
            return
        rate = self._rate(runs)
        with np.errstate(divide="ignore", invalid="ignore"):
            left = (self.workload.work_pflop - self.done[runs]) / rate
        finish = np.where(rate > 0, np.maximum(self.t[runs], self.pause[runs]) + left, np.inf)
        runs = runs[finish > deadline_h - self.recovery.fallback_margin_h]
        self.fallen_back[runs] = True
        buy = ~self.alive[:, runs] & ~self.on_demand[:, runs] & self.od_ok[self.pool_of][:, None]
        cols, which = np.nonzero(buy)
        self._request(runs[which], cols)

    def _compact(self) -> None:
        keep = self.live
        for name in (
            "ids",
            "offsets",
            "t",
            "done",
            "checkpoint",
            "pause",
            "cost",
            "interruptions",
            "restarts",
            "fallen_back",
            "live",
        ):
            setattr(self, name, getattr(self, name)[keep])
        for name in ("alive", "on_demand", "death", "arrive", "occupant", "recover"):
            setattr(self, name, getattr(self, name)[:, keep])
