"""When each Spot node of a group may run, from a capacity series.

A capacity series says what share of a standing request was running in each step. Scaled to a group of
n nodes, the capacity is c_i = floor(share_i * n) nodes in step i; node slot j (0-based) may run while
c > j. A drop of the series below j + 1 *is* the preemption of slot j (the nodes above the new capacity
go first), and a replacement for slot j can be bought only once c > j again. So every slot has its own
up/down schedule, and the engine treats a capacity drop like any other death time.

Runs start at a random offset into the series and wrap around at its end. The tables below hold, for
every level j and step i, how many steps until the level is next down (0: down now) and next up
(0: up now), measured around the circle, so a query is one lookup however long the series.

Times are hours since the run started; a run's position in the series is offset + t. A boundary time is
computed as (step index) * step_h - offset for every slot alike, so nodes lost in the same drop die at
exactly the same time (one event, one relaunch).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from simulation.trace import CapacitySeries

# A time computed as a step boundary may land a hair before it in floating point; it belongs to the new step.
BOUNDARY_EPS = 1e-9


@dataclass(frozen=True)
class CapacityWindows:
    """Up/down tables of one capacity series scaled to a group of `levels` nodes."""

    step_h: float
    horizon_h: float
    steps: int
    to_down: np.ndarray  # (levels * steps,) float: steps until level j is down at [j * steps + i] (0 = now)
    to_up: np.ndarray  # (levels * steps,) float: steps until level j is up (0 = up now); inf = never
    to_back: np.ndarray  # (levels * steps,) float: steps until level j is up again after its next down

    def at(self, level, offset, t) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """For slot `level` at time t (arrays broadcast; scalars work too):

        up       whether it may run now;
        down_at  when it is next down (t when down now, inf when never);
        up_from  the first time from t on when it may run (t when it may now, inf when never);
        back_at  when it may run again after `down_at`: what `at(down_at)` gives as up_from, to the bit
                 (step counts are whole numbers, so adding them first changes nothing).
        """
        absolute, index = self._where(level, offset, t)
        to_down, to_up = self.to_down.take(index), self.to_up.take(index)
        up = to_down > 0
        down_at = np.maximum((absolute + to_down) * self.step_h - offset, t)
        up_from = np.where(up, t, (absolute + to_up) * self.step_h - offset)
        back_at = (absolute + self.to_back.take(index)) * self.step_h - offset
        return up, down_at, up_from, back_at

    def _where(self, level, offset, t) -> tuple[np.ndarray, np.ndarray]:
        absolute = np.floor((offset + t) / self.step_h + BOUNDARY_EPS)
        return absolute, absolute.astype(np.int64) % self.steps + level * self.steps


def capacity_windows(series: CapacitySeries, nodes: int) -> CapacityWindows:
    """The tables for a group of `nodes` Spot nodes driven by `series`."""
    capacity = np.floor(series.as_array() * nodes + 1e-9).astype(np.int64)
    levels = np.arange(nodes)[:, None]
    up = capacity[None, :] > levels  # (levels, steps)
    to_down, to_up = _steps_until(~up), _steps_until(up)
    steps = len(series.shares)
    index = np.arange(steps)[None, :]
    landing = (index + np.where(np.isinf(to_down), 0, to_down).astype(np.int64)) % steps
    to_back = to_down + np.take_along_axis(to_up, landing, axis=1)  # inf when never down (or never back)
    return CapacityWindows(
        step_h=series.step_h,
        horizon_h=series.horizon_h,
        steps=steps,
        to_down=to_down.reshape(-1),
        to_up=to_up.reshape(-1),
        to_back=to_back.reshape(-1),
    )


def _steps_until(state: np.ndarray) -> np.ndarray:
    """For each row and step, how many steps (going round the circle) until `state` is True; inf if never."""
    rows, steps = state.shape
    out = np.full((rows, steps), np.inf)
    index = np.arange(steps)
    for row in range(rows):
        hits = np.flatnonzero(state[row])
        if hits.size == 0:
            continue
        circle = np.concatenate([hits, hits + steps])
        nxt = circle[np.searchsorted(circle, index)]
        out[row] = nxt - index
    return out
