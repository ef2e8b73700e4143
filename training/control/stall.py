"""Noticing a job that hangs: no progress for much longer than its steps take.

Why the controller needs this: a node that dies cleanly (EC2 terminates it, the kernel closes its
sockets) makes mpirun fail at once, but a node that hangs — frozen kernel, lost network, a stuck
device — leaves its TCP connections open, and every other trainer waits in the next allreduce until
gloo's or NCCL's own timeout (30 minutes by default) while the whole cluster keeps billing. The
controller cannot see a hang directly; it sees that the step events stopped.

The limit adapts to the job: `factor` times the longest gap between progress events recently seen
(steps are reported every `log_every` steps, checkpoint saves add their own pauses), never below
`floor_s`. Before an attempt's first step the limit is `startup_s`: interpreters start, models are
built and checkpoints restored, which can take much longer than a step. A fixed limit replaces the
adaptive one when the user gives one (`deepvm train --stall-timeout`).

Pure logic over timestamps (time.monotonic()), so it is tested without a cluster.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field


@dataclass
class StallWatch:
    """Progress timestamps of the running attempt, and whether they stopped coming."""

    fixed_s: float | None = None  # the user's limit after the first step; None: adaptive
    floor_s: float = 60.0
    factor: float = 10.0
    startup_s: float = 900.0
    window: int = 20  # recent gaps the adaptive limit looks at
    last_at: float = 0.0
    stepping: bool = False  # the attempt reported a step
    gaps: deque[float] = field(default_factory=deque)

    def started(self, at: float) -> None:
        """A new attempt was launched at `at`: forget the old one's pace except its gaps."""
        self.last_at, self.stepping = at, False

    def progressed(self, at: float) -> None:
        """A step (or a checkpoint) was reported at `at`."""
        if self.stepping:
            self.gaps.append(at - self.last_at)
            while len(self.gaps) > self.window:
                self.gaps.popleft()
        self.last_at, self.stepping = at, True

    def limit_s(self) -> float:
        """How long silence may last now before the attempt counts as hung."""
        if not self.stepping:
            return max(self.startup_s, self.fixed_s or 0.0)
        if self.fixed_s is not None:
            return self.fixed_s
        return max(self.floor_s, self.factor * max(self.gaps, default=0.0))

    def stalled(self, now: float) -> float | None:
        """Seconds without progress when that exceeds the limit, else None."""
        silent = now - self.last_at
        return silent if silent > self.limit_s() else None
