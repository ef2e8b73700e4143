"""Every random number a batch of runs uses, addressed by (run, slot, occupant).

Addressing the numbers, rather than drawing them in the order events happen, is what lets the vectorised
engine and the per-event reference loop see exactly the same numbers (so the test can ask for equal
results, not similar distributions), and what lets one run be replayed alone (`reference.run_one`).

- slot: one Spot node position of the plan (a group of 17 spot nodes has slots 0..16);
- occupant k of a slot: the k-th node that slot has had (0 = the node bought at the start; each
  replacement that joins is the next);
- per occupant: its lifetime (from its pool's trace), whether its reclaim comes with a notice, and when
  in the checkpoint interval a reclaim without notice strikes (the share of an interval lost);
- per run: where in the traces' timelines it starts (a share of each capacity series' length).

Notices and losses are uniforms computed from their address by SplitMix64 (a counter-based generator:
the k-th output of SplitMix64 seeded with the stream's key), so nothing is stored and any subset of
addresses costs only its own size. Lifetimes come from the trace's own `sample_lifetimes(rng, size)`
(the contract of simulation/trace.py), in blocks of `block` occupants per slot, a block drawn the first
time any run needs it from a generator seeded by (seed, block, pool), so what a run sees does not
depend on how far other runs got. A pool whose trace has neither lifetimes nor a hazard (a capacity
series alone) has nothing to draw: its nodes die only when capacity drops.

With a hazard trace, lifetimes are `exponential(1 / hazard)`: the same standard draws scaled, so two
bands on the same seed give the same runs with shorter or longer lives (common random numbers).
"""

from __future__ import annotations

import math

import numpy as np

from simulation.trace import Trace

_NOTICE_STREAM, _LOSS_STREAM, _START_STREAM = 1, 2, 3
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1, _MIX2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)
_OCCUPANT_BITS = 24  # up to 16 M nodes per slot; slot and run take the bits above


def _splitmix(z: np.ndarray) -> np.ndarray:
    z = (z ^ (z >> np.uint64(30))) * _MIX1
    z = (z ^ (z >> np.uint64(27))) * _MIX2
    return z ^ (z >> np.uint64(31))


def has_lifetimes(trace: Trace) -> bool:
    """Whether `sample_lifetimes` can return a finite life (otherwise only capacity drops preempt)."""
    return trace.hazard_per_h is not None or bool(trace.lifetimes_h)


class Draws:
    """Random numbers for `runs` runs of a cluster whose spot pools have `counts` nodes and `traces`."""

    def __init__(
        self, traces: tuple[Trace, ...], counts: tuple[int, ...], runs: int, seed: int, notice_share: float, block: int
    ) -> None:
        if len(traces) != len(counts):
            raise ValueError("one trace per spot pool")
        self.traces, self.counts = traces, counts
        self.runs, self.seed, self.notice_share, self.block = runs, seed, notice_share, max(1, block)
        self.slots = sum(counts)
        self.start_share = np.random.default_rng([seed, _START_STREAM]).random(runs)
        self.mortal = np.repeat([has_lifetimes(t) for t in traces], counts).astype(bool)  # per slot
        self._keys = {
            stream: _splitmix(np.array([seed], np.uint64) * _GOLDEN + np.uint64(stream))
            for stream in (_NOTICE_STREAM, _LOSS_STREAM)
        }
        self._lifetimes: list[np.ndarray] = []  # per block: (runs * slots * block,) flattened

    def lifetime(self, runs, slots, occupants) -> np.ndarray:
        """Hours the given occupants live (inf: never by lifetime; a capacity drop may still end them)."""
        runs, slots, occupants = np.asarray(runs), np.asarray(slots), np.asarray(occupants)
        out = np.full(np.broadcast(runs, slots, occupants).shape, np.inf)
        mortal = self.mortal[slots]
        if not mortal.any():
            return out
        if not mortal.all():
            runs, slots, occupants = (np.broadcast_to(a, out.shape)[mortal] for a in (runs, slots, occupants))
        which = occupants // self.block
        local = (runs * self.slots + slots) * self.block + occupants - which * self.block
        values = np.empty(local.shape)
        for b in range(int(which.min()), int(which.max()) + 1):
            while len(self._lifetimes) <= b:
                self._draw_block(len(self._lifetimes))
            sel = which == b
            values[sel] = self._lifetimes[b][local[sel]]
        if mortal.all():
            return values.reshape(out.shape)
        out[mortal] = values
        return out

    def notice(self, runs, slots, occupants) -> np.ndarray:
        """Whether each given occupant's reclaim comes with the two-minute notice."""
        if self.notice_share in (0.0, 1.0):  # every reclaim alike: no need to draw (u < 1 always, u < 0 never)
            return np.full(np.broadcast(runs, slots, occupants).shape, self.notice_share == 1.0)
        return self._uniform(_NOTICE_STREAM, runs, slots, occupants) < self.notice_share

    def lost_share(self, runs, slots, occupants) -> np.ndarray:
        """U(0, 1): how much of a checkpoint interval a reclaim without notice loses."""
        return self._uniform(_LOSS_STREAM, runs, slots, occupants)

    def _uniform(self, stream: int, runs, slots, occupants) -> np.ndarray:
        shape = np.broadcast(runs, slots, occupants).shape
        runs, slots, occupants = (np.atleast_1d(a).astype(np.uint64, copy=False) for a in (runs, slots, occupants))
        address = ((runs * np.uint64(self.slots) + slots) << np.uint64(_OCCUPANT_BITS)) + occupants
        bits = _splitmix(self._keys[stream] + (address + np.uint64(1)) * _GOLDEN)  # arrays: wrap silently
        return ((bits >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))).reshape(shape)

    def _draw_block(self, b: int) -> None:
        parts = [
            trace.sample_lifetimes(np.random.default_rng([self.seed, b, g]), (self.runs, count, self.block))
            if has_lifetimes(trace)
            else np.full((self.runs, count, self.block), np.inf)
            for g, (trace, count) in enumerate(zip(self.traces, self.counts))
        ]
        self._lifetimes.append(np.concatenate(parts, axis=1).reshape(-1))


BLOCK_BYTES = 256 * 2**20  # one block of lifetimes at most: runs x slots x block x 8 bytes


def block_size(traces: tuple[Trace, ...], expected_hours: float, runs: int, slots: int) -> int:
    """Occupants per slot to draw at once: enough that most runs never need a second block, within
    BLOCK_BYTES (many runs of a short-lived trace draw more, smaller blocks)."""
    lives = [t.mean_lifetime_h() for t in traces if has_lifetimes(t)]
    shortest = min(lives, default=math.inf)
    if not math.isfinite(shortest) or shortest <= 0:
        return 2
    wanted = min(64, max(2, math.ceil(2.0 * expected_hours / shortest) + 2))
    return int(max(1, min(wanted, BLOCK_BYTES // (8 * runs * max(slots, 1)))))
