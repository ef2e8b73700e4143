"""Noticing a job that hangs: no progress for much longer than its steps take, or no first step at all.

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
by default, the job file's `stall.startup_grace` or `deepvm train --startup-grace` otherwise (a job whose
first step needs longer says so). After it, the limit adapts to the job: `factor` times the longest gap
between progress recently seen, never below `floor_s`, or the user's fixed one (`stall.timeout`,
`--stall-timeout`). The two are independent: a short stall timeout for a job that steps every second says
nothing of how long it takes to start.

Once trainer 0 has said its run ended (End: completed, or stopped for a notice or a stop), no step comes any
more: its last checkpoint settles on the holders (L2, L3) and the ranks leave, which takes seconds. From then
the limit is `ending_s` from that End, whatever the steps took (a job of 0.1 s steps may take longer to
leave than 10 steps), and a job that does not exit in it hangs on its way out.

Pure logic over timestamps (time.monotonic()), so it is tested without a cluster.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from training.shared.stallspec import DEFAULT_STARTUP_GRACE_S, StallSpec

LEAVE_GRACE_S = 120.0  # from trainer 0's End (or a clean stop's request) to mpirun's exit: seconds, normally


@dataclass(frozen=True)
class Stall:
    """An attempt found hung: how long it was silent, against which limit."""

    silent_s: float
    limit_s: float
    before_first_step: bool  # the start-up grace ran out: the attempt never trained a step
    after_end: bool = False  # trainer 0 said its run ended, and the job did not exit in time

    def text(self) -> str:
        """One line for the job's report."""
        if self.after_end:
            return (f"no exit {self.silent_s:.0f}s after trainer 0 ended its run (limit {self.limit_s:.0f}s): a node "
                    "hangs on the way out; stopping the job")  # fmt: skip
        if self.before_first_step:
            return (f"no first step {self.silent_s:.0f}s after the launch (start-up grace {self.limit_s:.0f}s): the "
                    "job hangs before training; stopping it (stall.startup_grace or --startup-grace allows a slower "
                    "start)")  # fmt: skip
        return f"no progress for {self.silent_s:.0f}s (limit {self.limit_s:.0f}s): a node hangs; stopping the job"

    @property
    def cause(self) -> str:
        """What hung, the same words for the same limit (two hangs alike are the same failure: attempts.decide)."""
        if self.after_end:
            return f"no exit within {self.limit_s:.0f}s of the run's end"
        if self.before_first_step:
            return f"no first step within the start-up grace of {self.limit_s:.0f}s"
        return f"no progress within {self.limit_s:.0f}s"


@dataclass
class StallWatch:
    """Progress of the running attempt, and whether it stopped coming."""

    fixed_s: float | None = None  # the user's limit after the first step; None: adaptive
    floor_s: float = 60.0
    factor: float = 10.0
    startup_s: float = DEFAULT_STARTUP_GRACE_S  # the limit before the first step
    window: int = 20  # recent gaps the adaptive limit looks at
    ending_s: float = LEAVE_GRACE_S  # the limit from trainer 0's End to the job's exit
    last_at: float = 0.0  # when the attempt was launched, or last progressed
    from_step: int = -1  # the step the attempt resumes from (trainer 0's Start; -1: not said yet)
    newest_step: int = -1  # the newest step seen trained in this attempt
    ended_at: float | None = None  # when trainer 0 said its run ended (None: it has not)
    gaps: deque[float] = field(default_factory=deque)

    @classmethod
    def of(cls, in_file: StallSpec, timeout_s: float | None, startup_grace_s: float | None) -> StallWatch:
        """The job file's `stall:` with `deepvm train`'s flags in their place (None: not given)."""
        return cls(fixed_s=in_file.timeout if timeout_s is None else timeout_s,
                   startup_s=in_file.startup_grace if startup_grace_s is None else startup_grace_s)  # fmt: skip

    @property
    def stepping(self) -> bool:
        """Whether the attempt has trained a step."""
        return self.newest_step > self.from_step

    def started(self, at: float) -> None:
        """A new attempt was launched at `at`: forget the old one's steps, keep its gaps."""
        self.last_at, self.from_step, self.newest_step, self.ended_at = at, -1, -1, None

    def ended(self, at: float) -> None:
        """Trainer 0 said at `at` that its run ended: no step comes now; the job has ending_s to exit."""
        if self.ended_at is None:
            self.ended_at = at

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

    def limit_s(self) -> float:
        """How long silence may last now before the attempt counts as hung."""
        if self.ended_at is not None:
            return self.ending_s
        if not self.stepping:
            return self.startup_s
        if self.fixed_s is not None:
            return self.fixed_s
        return max(self.floor_s, self.factor * max(self.gaps, default=0.0))

    def stalled(self, now: float) -> Stall | None:
        """The stall, when the silence until `now` exceeds the limit; else None."""
        silent, limit = now - (self.last_at if self.ended_at is None else self.ended_at), self.limit_s()
        if silent <= limit:
            return None
        return Stall(silent, limit, not self.stepping, after_end=self.ended_at is not None)
