"""One internal form for every source of Spot interruptions.

The shipped traces disagree on what they record (README of `simulation/data/traces`): lifetimes of single
VMs, add/remove events of a cluster, or how many of a standing request were running every five minutes.
They are all normalised into a `Trace`, which answers the two questions the simulator asks:

- how long does a fresh Spot node live? (`sample_lifetimes`: an empirical distribution with censoring,
  or an exponential hazard for an interruption-rate band);
- how much of the plan's Spot capacity exists at a given time? (`capacity`: a step series of the share
  of a standing request that was running; a replacement can be bought only while the share allows it,
  and a drop of the share *is* the preemption of the nodes above it).

A trace drives the simulation by capacity when it has a series, by lifetimes otherwise (`drives_by`).
Times are hours everywhere.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import Enum

import numpy as np


class TraceKind(str, Enum):
    """The shape of the source a trace was read from."""

    LIFETIMES = "lifetimes"  # CSV of VM name, start, terminate (ICAC'19 GCE preemptible GPUs)
    EVENTS = "events"  # CSV of time_ms, add|remove, node (Bamboo's AWS Spot clusters)
    CAPACITY = "capacity"  # JSON {"metadata": {"gap_seconds"}, "data": [count, ...]} (Can't Be Late)
    HAZARD = "hazard"  # no file: a constant per-hour interruption rate (an AWS frequency band)


@dataclass(frozen=True)
class CapacitySeries:
    """The share of a standing Spot request that was running, sampled every `step_h` hours.

    `shares[i]` in [0, 1] holds for [i * step_h, (i + 1) * step_h). A run starts at a random offset and
    wraps around at the end, so every offset of the week-long series is an equally likely start.
    """

    step_h: float
    shares: tuple[float, ...]
    request: int  # how many instances the standing request asked for (the share's denominator)

    @property
    def horizon_h(self) -> float:
        return self.step_h * len(self.shares)

    def as_array(self) -> np.ndarray:
        return np.asarray(self.shares, dtype=float)


@dataclass(frozen=True)
class Trace:
    """Interruptions of one Spot pool, from one source, in the simulator's form.

    `lifetimes_h[i]` is how long observed node i lived; `censored[i]` is True when the observation ended
    with the node still alive (end of trace, GCE's 24 h cap) rather than by a preemption. `hazard_per_h`
    is set for a synthetic trace only (exponential lifetimes). `capacity` is set when the source measured
    a standing request's capacity.
    """

    name: str  # "aws-p3-bamboo", "band:10-15%", or the path of the user's file
    kind: TraceKind
    source: str  # where the numbers come from, for the report ("Bamboo (NSDI 2023), MIT")
    lifetimes_h: tuple[float, ...] = ()
    censored: tuple[bool, ...] = ()
    hazard_per_h: float | None = None
    capacity: CapacitySeries | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        if len(self.lifetimes_h) != len(self.censored):
            raise ValueError("lifetimes_h and censored must have the same length")
        if self.capacity is None and self.hazard_per_h is None and not self.lifetimes_h:
            raise ValueError(f"trace {self.name} has neither lifetimes, a hazard nor a capacity series")

    @property
    def drives_by(self) -> str:
        """ "capacity" when a capacity series decides who lives, "lifetimes" otherwise."""
        return "capacity" if self.capacity is not None else "lifetimes"

    def mean_lifetime_h(self) -> float:
        """Mean time to preemption (the exponential MLE with censoring: time observed / preemptions).

        math.inf when nothing was ever preempted; used by `plan --interruptions` and in reports.
        """
        if self.hazard_per_h is not None:
            return math.inf if self.hazard_per_h <= 0 else 1.0 / self.hazard_per_h
        if self.capacity is not None and not self.lifetimes_h:
            return _capacity_mean_lifetime(self.capacity)
        preemptions = sum(1 for c in self.censored if not c)
        return math.inf if preemptions == 0 else sum(self.lifetimes_h) / preemptions

    def sample_lifetimes(self, rng: np.random.Generator, size: int | tuple[int, ...]) -> np.ndarray:
        """Hours until preemption for fresh Spot nodes; np.inf for a node that is never preempted.

        Empirical traces are resampled with replacement; a censored draw means "lived at least this long",
        so another draw is added to it until a real preemption is drawn (a renewal, which keeps the
        observed hazard instead of inventing a cap). A capacity-driven trace returns np.inf: its drops do
        the preempting.
        """
        if self.hazard_per_h is not None:
            if self.hazard_per_h <= 0:
                return np.full(size, np.inf)
            return rng.exponential(1.0 / self.hazard_per_h, size)
        if not self.lifetimes_h:
            return np.full(size, np.inf)
        lifetimes = np.asarray(self.lifetimes_h, dtype=float)
        censored = np.asarray(self.censored, dtype=bool)
        if censored.all():
            return np.full(size, np.inf)
        count = int(np.prod(size))
        total = np.zeros(count)
        pending = np.arange(count)
        while pending.size:
            picks = rng.integers(0, len(lifetimes), size=pending.size)
            total[pending] += lifetimes[picks]
            pending = pending[censored[picks]]
        return total.reshape(size)


def _capacity_mean_lifetime(series: CapacitySeries) -> float:
    """Node-hours of capacity per lost node: the mean life a node of this request had."""
    shares = series.as_array() * series.request
    losses = np.clip(shares[:-1] - shares[1:], 0, None).sum()
    if losses <= 0:
        return math.inf
    return float(shares.sum() * series.step_h / losses)
