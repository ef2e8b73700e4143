"""Bookkeeping of recoveries: from the moment trouble is seen to the first step trained after it.

Pure logic, separate from the controller's processes so the accounting can be tested on its own. An
incident opens when the controller learns of trouble during attempt N (a notice, a failed mpirun, a
replacement to fold in; or, for a resumed controller, before any attempt). Further trouble before the
relaunch joins the same incident. When attempt N ends, the newest step it reached is the incident's
`from_step`; the incident closes at the first step a later attempt trains, whose start step is where
it resumed (a loss joining a relaunch deepvm chose names the incident: see _LOSSES). Lost steps =
from_step - resumed step: zero when the job flushed a checkpoint at the step it stopped at, at most one
checkpoint interval when a node died without a word.

A launched script that reports no steps (run.calls_step: false, no framework adapter) has none to count or to
wait for: its incident closes when the relaunched script runs again (its trainer 0's Start, after the files
were put back), and what it lost is time: from when the newest file put back was written (Kept's written_at)
to the stop, or, with nothing put back, from when the work it redoes began. A script whose adapter reported
steps (Resumed, Step) is counted in steps, as a ctx.step job is.

Where the time went (RelaunchPhases) is read from the moments the controller reports on the way: the
checkpoint flushed, the stopped attempt's exit, the next launch, its restore (or its start), its first step.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from itertools import pairwise

from training.shared.progress import Recovery, RecoveryReason, RelaunchPhases

# An incident is named by its first trouble, except that a loss (a Spot notice, a node lost, a hang) arriving
# while a relaunch deepvm chose is pending (a fold-in, the ladder's, a restart) names it: the relaunch now
# also recovers from that loss, and `status` counts interruptions survived by these names. Its clock still
# runs from the first trouble (the time to training is counted from then, never shorter than it was).
_LOSSES = frozenset({RecoveryReason.NOTICE, RecoveryReason.NODE_LOST, RecoveryReason.STALL})
_CHOSEN = frozenset({RecoveryReason.FOLD_IN, RecoveryReason.LADDER, RecoveryReason.RESTART})


@dataclass
class _Incident:
    reason: RecoveryReason
    nodes: tuple[str, ...]
    attempt: int  # the attempt during which it was seen (0: before the first one)
    detected_at: float  # time.monotonic()
    detected_wall: float  # time.time() at the same moment
    world_before: int
    from_step: int = -1
    checkpoint_at: float | None = None
    exited_at: float | None = None  # the newest attempt end since the trouble
    launched_at: float | None = None  # the newest launch since then
    restore_began_at: float | None = None  # that launch's trainer 0 began restoring
    restored_at: float | None = None  # ... and had restored
    started_at: float | None = None  # ... or started without anything to restore
    carried_from: float | None = None  # time.time() the interrupted work carried on from (RecoveryLog.since)
    put_back_written: float | None = None  # time.time() the newest launched-script file put back was written


class RecoveryLog:
    """The open incident (at most one) and the recoveries closed so far."""

    def __init__(self) -> None:
        self.open: _Incident | None = None
        self.closed: list[Recovery] = []
        # time.time() a launched script's running work carries on from: when the files put back were written, or
        # its start when none were (None: not known yet); the work since then is what a loss now redoes
        self.since: float | None = None
        self._put_back = False  # the newest launch put a launched script's files back

    def trouble(
        self, reason: RecoveryReason, nodes: tuple[str, ...], attempt: int, world: int, at: float, from_step: int = -1
    ) -> None:
        """Record trouble seen during `attempt`; it joins the open incident if there is one."""
        if self.open is None:
            wall = _wall(at)
            self.open = _Incident(
                RecoveryReason(reason), nodes, attempt, at, wall, world, from_step, carried_from=self.since
            )
            return
        if self.open.reason in _CHOSEN and RecoveryReason(reason) in _LOSSES:
            self.open.reason = RecoveryReason(reason)  # a stop deepvm chose that a loss overtook: say the loss
        self.open.nodes += tuple(n for n in nodes if n not in self.open.nodes)
        self.open.from_step = max(self.open.from_step, from_step)

    def checkpointed(self, at: float) -> None:
        """A checkpoint was flushed: the first one after the trouble is what the relaunch restores."""
        if self.open is not None and self.open.checkpoint_at is None:
            self.open.checkpoint_at = at

    def attempt_ended(self, attempt: int, last_step: int, at: float | None = None) -> None:
        """Attempt `attempt` ended at `at` (its mpirun exited), having reached `last_step`."""
        if self.open is not None and self.open.attempt <= attempt:
            self.open.from_step = max(self.open.from_step, last_step)
            if at is not None:
                self.open.exited_at = at

    def launched(self, at: float) -> None:
        """An attempt's mpirun started at `at`: what its trainers report next is this launch's."""
        self._put_back = False
        if self.open is not None:
            incident = self.open
            incident.launched_at, incident.restore_began_at, incident.restored_at, incident.started_at = (
                at,
                None,
                None,
                None,
            )

    def restored(self, at: float, seconds: float) -> None:
        """Trainer 0 reported at `at` that it had restored a checkpoint, which took `seconds`."""
        if self.open is not None:
            self.open.restore_began_at, self.open.restored_at = at - seconds, at

    def put_back(self, at: float, seconds: float, written_at: float) -> None:
        """Trainer 0 put a launched script's kept files back at `at` (in `seconds`), the newest written at
        `written_at` (time.time() on its node; 0: none): the relaunch's restore, and what its work carries on from."""
        self.restored(at, seconds)
        if written_at > 0:
            self._put_back, self.since = True, written_at
            if self.open is not None:
                self.open.put_back_written = written_at

    def started(self, at: float) -> None:
        """Trainer 0 reported at `at` that it starts training (after any restore)."""
        if not self._put_back:  # a launched script that starts afresh: its work counts from now
            self.since = _wall(at)
        if self.open is not None and self.open.started_at is None:
            self.open.started_at = at

    def script_running(self, attempt: int, world: int, at: float) -> Recovery | None:
        """A launched script runs again in `attempt` (its trainer 0 started it at `at`): closes the incident of an
        earlier attempt whose script reported no step (one whose adapter did closes at a step, as ctx.step's),
        its lost work in seconds (see the module docstring); returns the recovery."""
        incident = self.open
        if incident is None or attempt <= incident.attempt or incident.from_step > 0:
            return None
        ended = incident.detected_at if incident.exited_at is None else incident.exited_at
        stopped = incident.detected_wall + (ended - incident.detected_at)  # the interrupted work's end, on time.time()
        since = next((t for t in (incident.put_back_written, incident.carried_from) if t is not None), stopped)
        return self._close(incident, 0, world, at, lost_s=round(max(0.0, stopped - since), 3))

    def stepped(self, attempt: int, first_step: int, step: int, world: int, at: float) -> Recovery | None:
        """Attempt `attempt` (started at `first_step`) trained `step`: closes the incident of an earlier
        attempt, and returns the recovery."""
        incident = self.open
        if incident is None or attempt <= incident.attempt or step <= first_step:
            return None
        return self._close(incident, first_step, world, at)

    def _close(
        self, incident: _Incident, resumed_step: int, world: int, at: float, lost_s: float | None = None
    ) -> Recovery:
        """The open incident, closed at `at` (training again, or a launched script running again)."""
        self.open = None
        recovery = Recovery(
            reason=incident.reason,
            nodes=incident.nodes,
            from_step=incident.from_step,
            resumed_step=resumed_step,
            lost_steps=max(0, incident.from_step - resumed_step),
            world_before=incident.world_before,
            world_after=world,
            detected_wall=round(incident.detected_wall, 3),
            detect_to_checkpoint_s=None
            if incident.checkpoint_at is None
            else round(incident.checkpoint_at - incident.detected_at, 3),
            detect_to_resumed_s=round(at - incident.detected_at, 3),
            phases=_phases(incident, at),
            lost_s=lost_s,
        )
        self.closed.append(recovery)
        return recovery


def _wall(at: float) -> float:
    """time.time() at the time.monotonic() `at`."""
    return time.time() - (time.monotonic() - at)


def _phases(incident: _Incident, stepped_at: float) -> RelaunchPhases:
    """The moments of the incident, in order, as the spans between them (a moment not seen takes the one
    before it, so its span is 0 and the spans still add up)."""
    began = incident.restore_began_at if incident.restore_began_at is not None else incident.started_at
    moments = [incident.detected_at]
    for seen in (
        incident.checkpoint_at,
        incident.exited_at,
        incident.launched_at,
        began,
        incident.restored_at,
        stepped_at,
    ):
        moments.append(max(moments[-1], seen if seen is not None else moments[-1]))
    spans = [round(after - before, 3) for before, after in pairwise(moments)]
    return RelaunchPhases(*spans)
