"""Bookkeeping of recoveries: from the moment trouble is seen to the first step trained after it.

Pure logic, separate from the controller's processes so the accounting can be tested on its own. An
incident opens when the controller learns of trouble during attempt N (a notice, a failed mpirun, a
replacement to fold in; or, for a resumed controller, before any attempt). Further trouble before the
relaunch joins the same incident. When attempt N ends, the newest step it reached is the incident's
`from_step`; the incident closes at the first step a later attempt trains, whose start step is where
it resumed. Lost steps = from_step - resumed step: zero when the job flushed a checkpoint at the step
it stopped at, at most one checkpoint interval when a node died without a word.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from training.shared.progress import Recovery


@dataclass
class _Incident:
    reason: str
    nodes: tuple[str, ...]
    attempt: int  # the attempt during which it was seen (0: before the first one)
    detected_at: float  # time.monotonic()
    detected_wall: float  # time.time() at the same moment
    world_before: int
    from_step: int = -1
    checkpoint_at: float | None = None


class RecoveryLog:
    """The open incident (at most one) and the recoveries closed so far."""

    def __init__(self) -> None:
        self.open: _Incident | None = None
        self.closed: list[Recovery] = []

    def trouble(
        self, reason: str, nodes: tuple[str, ...], attempt: int, world: int, at: float, from_step: int = -1
    ) -> None:
        """Record trouble seen during `attempt`; it joins the open incident if there is one."""
        if self.open is None:
            wall = time.time() - (time.monotonic() - at)
            self.open = _Incident(reason, nodes, attempt, at, wall, world, from_step)
            return
        self.open.nodes += tuple(n for n in nodes if n not in self.open.nodes)
        self.open.from_step = max(self.open.from_step, from_step)

    def checkpointed(self, at: float) -> None:
        """A checkpoint was flushed: the first one after the trouble is what the relaunch restores."""
        if self.open is not None and self.open.checkpoint_at is None:
            self.open.checkpoint_at = at

    def attempt_ended(self, attempt: int, last_step: int) -> None:
        if self.open is not None and self.open.attempt <= attempt:
            self.open.from_step = max(self.open.from_step, last_step)

    def stepped(self, attempt: int, first_step: int, step: int, world: int, at: float) -> Recovery | None:
        """Attempt `attempt` (started at `first_step`) trained `step`: closes the incident of an earlier
        attempt, and returns the recovery."""
        incident = self.open
        if incident is None or attempt <= incident.attempt or step <= first_step:
            return None
        self.open = None
        recovery = Recovery(
            reason=incident.reason,
            nodes=incident.nodes,
            from_step=incident.from_step,
            resumed_step=first_step,
            lost_steps=max(0, incident.from_step - first_step),
            world_before=incident.world_before,
            world_after=world,
            detected_wall=round(incident.detected_wall, 3),
            detect_to_checkpoint_s=None
            if incident.checkpoint_at is None
            else round(incident.checkpoint_at - incident.detected_at, 3),
            detect_to_resumed_s=round(at - incident.detected_at, 3),
        )
        self.closed.append(recovery)
        return recovery
