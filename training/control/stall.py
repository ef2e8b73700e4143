"""Noticing a job that hangs: no progress for much longer than its steps take, no first step at all, or no
output for as long as its job file allows.

Why the controller needs this: a node that dies cleanly (EC2 terminates it, the kernel closes its
sockets) makes mpirun fail at once, but a node that hangs — frozen kernel, lost network, a stuck
device — leaves its TCP connections open, and every other trainer waits in the next allreduce until
gloo's or NCCL's own timeout (30 minutes by default) while the whole cluster keeps billing. A job's own
script can hang the same way before it trains at all (a data loader, `init_process_group` waiting for a
peer, a deadlock before step 1). The controller cannot see a hang directly; it sees that progress stopped.

Progress is a step trained: the newest step trainer 0 has reported grew. Its step reports come every
`log_every` steps; its checkpoints are taken after a step, so a checkpoint of a step newer than the newest
reported counts as that step (with `log_every: 100` and `every_steps: 10` they are the more frequent
sign). Nothing else counts: a restore, or a flush of a step already reported (a clean stop, a rebalance
recommendation), proves no step was trained, and a job that only ever restores or flushes is not
training.

Before an attempt's first step the limit is the start-up grace (`startup_s`, from the launch): interpreters
start, models are built, checkpoints restored and data loaded, which can take much longer than a step; 300 s
by default, the job file's `stall.startup_grace` or `deepvm train --startup-grace` where given (a job whose
first step needs longer says so). After it, the limit adapts to the job: `factor` times the longest gap
between progress recently seen, never below `floor_s`, or the user's fixed one (`stall.timeout`,
`--stall-timeout`). The two are independent: a short stall timeout for a job that steps every second says
nothing of how long it takes to start.

A script that never calls `ctx.step` (`run: {calls_step: false}`: an unchanged torchrun script, say) promises
no step, so no step limit applies to it unless its job file (or `deepvm train`'s flag) gives one: neither the
start-up grace (its first step never comes: every such script would die at 300 s) nor the adaptive limit (a
framework's adapter may report steps, at a pace the script never promised). What such a job may ask for is an
output-silence limit (`stall.silence`, any job may): the attempt hangs when no rank printed a line, deepvm's
events among them, for that long since the launch or the last line. A script's own prints are the one sign of
life deepvm sees in it.

Once trainer 0 has said its run ended (End: completed, or stopped for a notice or a stop), no step comes any
more: its last checkpoint settles on the holders (L2, L3) and the ranks leave, which takes seconds. From then
the limit is `ending_s` from that End, whatever the steps took (a job of 0.1 s steps may take longer to
leave than 10 steps, and a checkpoint settles in silence), and a job that does not exit in it hangs on its
way out.

Pure logic over timestamps (time.monotonic()), so it is tested without a cluster.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from enum import Enum
from typing import NamedTuple

from training.shared.stallspec import DEFAULT_STARTUP_GRACE_S, StallSpec

LEAVE_GRACE_S = 120.0  # from trainer 0's End (or a clean stop's request) to mpirun's exit: seconds, normally


class Limit(str, Enum):
    """Which of the watch's limits ran out."""

    STARTUP = "startup"  # the start-up grace: from the launch to the attempt's first step
    PROGRESS = "progress"  # after the first step: the user's fixed limit, or the adaptive one
    LEAVING = "leaving"  # the leave grace: from trainer 0's End to mpirun's exit
    SILENCE = "silence"  # stall.silence: since the ranks' last output line


class _Words(NamedTuple):
    """How a stall of one limit reads; {silent} and {limit} are its seconds."""

    found: str  # what the watch saw, against which limit
    meaning: str  # what hangs
    cause: str  # the same for the same limit, whatever the seconds it was found at
    allows: str = ""  # which key allows more, where the job file sets the limit


_WORDS = {
    Limit.STARTUP: _Words(
        "no first step {silent} after the launch (start-up grace {limit})",
        "the job hangs before training",
        "no first step within the start-up grace of {limit}",
        " (stall.startup_grace or --startup-grace allows a slower start)",
    ),
    Limit.PROGRESS: _Words("no progress for {silent} (limit {limit})", "a node hangs", "no progress within {limit}"),
    Limit.LEAVING: _Words(
        "no exit {silent} after trainer 0 ended its run (limit {limit})",
        "a node hangs on the way out",
        "no exit within {limit} of the run's end",
    ),
    # deepvm cannot tell a script that waits forever from a node that froze under it: the probe after the kill can
    Limit.SILENCE: _Words(
        "no output line from any rank for {silent} (stall.silence {limit})",
        "the script or a node hangs",
        "no output line within stall.silence of {limit}",
        " (a larger stall.silence allows a longer one)",
    ),
}


@dataclass(frozen=True)
class Stall:
    """An attempt found hung: how long it was silent, against which limit."""

    silent_s: float
    limit_s: float
    limit: Limit

    def _said(self, template: str) -> str:
        return template.format(silent=f"{self.silent_s:.0f}s", limit=f"{self.limit_s:.0f}s")

    @property
    def found(self) -> str:
        """What the watch saw, against which limit (a profile's failure says it too)."""
        return self._said(_WORDS[self.limit].found)

    @property
    def meaning(self) -> str:
        """What hangs."""
        return _WORDS[self.limit].meaning

    def text(self) -> str:
        """One line for the job's report."""
        return f"{self.found}: {self.meaning}; stopping the job{_WORDS[self.limit].allows}"

    @property
    def cause(self) -> str:
        """What hung, the same words for the same limit (two hangs alike are the same failure: attempts.decide)."""
        return self._said(_WORDS[self.limit].cause)


@dataclass
class StallWatch:
    """Progress of the running attempt, and whether it stopped coming."""

    fixed_s: float | None = None  # the user's limit after the first step; None: adaptive, if `adaptive`
    adaptive: bool = True  # without fixed_s, a limit from the steps' pace (False: none, calls_step: false)
    floor_s: float = 60.0
    factor: float = 10.0
    startup_s: float | None = DEFAULT_STARTUP_GRACE_S  # the limit before the first step; None: none
    silence_s: float | None = None  # the limit on the ranks' output silence (stall.silence); None: none
    window: int = 20  # recent gaps the adaptive limit looks at
    ending_s: float = LEAVE_GRACE_S  # the limit from trainer 0's End to the job's exit
    last_at: float = 0.0  # when the attempt was launched, or last progressed
    heard_at: float = 0.0  # when the attempt was launched, or a rank last printed a line
    from_step: int = -1  # the step the attempt resumes from (trainer 0's Start; -1: not said yet)
    newest_step: int = -1  # the newest step seen trained in this attempt
    ended_at: float | None = None  # when trainer 0 said its run ended (None: it has not)
    gaps: deque[float] = field(default_factory=deque)

    @classmethod
    def of(
        cls, in_file: StallSpec, timeout_s: float | None, startup_grace_s: float | None, calls_step: bool = True
    ) -> StallWatch:
        """The job file's `stall:` with `deepvm train`'s flags in their place (None: not given). A job that
        does not call ctx.step gets no step limit it did not ask for (see the module docstring)."""
        startup = in_file.startup_grace if startup_grace_s is None else startup_grace_s
        return cls(
            fixed_s=in_file.timeout if timeout_s is None else timeout_s,
            adaptive=calls_step,
            startup_s=DEFAULT_STARTUP_GRACE_S if startup is None and calls_step else startup,
            silence_s=in_file.silence,
        )

    @property
    def stepping(self) -> bool:
        """Whether the attempt has trained a step."""
        return self.newest_step > self.from_step

    def started(self, at: float) -> None:
        """A new attempt was launched at `at`: forget the old one's steps, keep its gaps."""
        self.last_at = self.heard_at = at
        self.from_step, self.newest_step, self.ended_at = -1, -1, None

    def ended(self, at: float) -> None:
        """Trainer 0 said at `at` that its run ended: no step comes now; the job has ending_s to exit."""
        if self.ended_at is None:
            self.ended_at = at

    def heard(self, at: float) -> None:
        """A rank printed a line at `at` (its script's own, or deepvm's event): the output is not silent."""
        self.heard_at = max(self.heard_at, at)

    def resumes_at(self, step: int) -> None:
        """Trainer 0 starts from `step` (a restored checkpoint's, 0 for a fresh start): no progress yet."""
        if not self.stepping:
            self.from_step = self.newest_step = step

    def progressed(self, at: float, step: int) -> None:
        """Trainer 0 reported `step` (trained, or checkpointed) at `at`; only a newer step is progress."""
        if step <= self.newest_step:
            return
        if self.stepping:
            self.gaps.append(at - self.last_at)
            while len(self.gaps) > self.window:
                self.gaps.popleft()
        self.last_at, self.newest_step = at, step

    def limit_s(self) -> float | None:
        """How long progress may stop coming now before the attempt counts as hung (None: no limit); the
        output's silence has its own (silence_s)."""
        if self.ended_at is not None:
            return self.ending_s
        if not self.stepping:
            return self.startup_s
        if self.fixed_s is not None:
            return self.fixed_s
        return max(self.floor_s, self.factor * max(self.gaps, default=0.0)) if self.adaptive else None

    def stalled(self, now: float) -> Stall | None:
        """The stall, when a silence until `now` exceeds its limit (the one that ran out first); else None.
        After End only the leave grace counts: a last checkpoint settles without a step or a line."""
        if self.ended_at is not None:
            clocks = [(self.ended_at, self.ending_s, Limit.LEAVING)]
        else:
            clocks = [
                (self.last_at, self.limit_s(), Limit.PROGRESS if self.stepping else Limit.STARTUP),
                (self.heard_at, self.silence_s, Limit.SILENCE),
            ]
        over = [
            Stall(now - since, limit, which)
            for since, limit, which in clocks
            if limit is not None and now - since > limit
        ]
        return max(over, key=lambda stall: stall.silent_s - stall.limit_s, default=None)
