"""What a training run reports while it runs and when it ends: plain data the CLI renders.

The controller never prints. It hands the CLI a JobReporter (callbacks, called from the controller's
own thread) and returns a TrainResult; both are built from the dataclasses here, so a test can read
exactly what a user sees, and `deepvm train --json` prints the result as is. A managed job's head writes
the same TrainResult as result.json and the user's machine reads it back (TrainResult.from_json), so
the CLI renders one record whichever side ran the controller. result.json, like the log's progress records,
is strict JSON (training.shared.strict_json): a NaN loss is null there.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from enum import Enum
from typing import TYPE_CHECKING, Any

from training.shared.jobstore import JobStatus, lost_in_time
from training.shared.strict_json import dumps, number
from training.shared.timespan import duration

if TYPE_CHECKING:  # a type only: `deepvm plan` imports this module, and nothing of the metrics
    from training.shared.scalars import MetricPoint


@dataclass(frozen=True)
class ScriptProgress:
    """What deepvm knows of a launched script (run.calls_step: false) that reports no steps: it takes none of
    deepvm's, so its step stays 0 of 0, and a person needs how long it has run, what it said last and what of
    its work is safe (the newest of the files deepvm keeps for it) instead."""

    running_s: float  # since this launch's trainer 0 started the script
    last_line: str  # trainer 0's newest output line that is not an event ("": none yet)
    kept_files: int  # the script's files deepvm keeps (checkpoint.files, $DEEPVM_CHECKPOINT_DIR): 0 none yet
    newest: str  # the newest of them (job/REL or checkpoint_dir/REL), "" when none
    newest_age_s: float  # how long before this record it was written (so that a replayed log says what was said)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ScriptProgress:
        """A record as a log line has it; a key a newer head wrote is left aside (an older CLI reads its log)."""
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


@dataclass(frozen=True)
class Progress:
    """The newest progress of the job, as trainer 0 reported it."""

    step: int
    total_steps: int
    epoch: int | None  # None: the job counts no epochs (a `run:` script that reports none)
    loss: float  # mean over trainers at this step
    samples_per_s: float  # of the whole job (trainer 0's rate x its share of the global batch)
    world_size: int  # trainers
    cost_usd: float  # what the cluster cost since the job started
    synthetic: bool
    script: ScriptProgress | None = None  # a launched script that reports no steps: what is known instead

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Progress:
        """The progress of a log record, whose numbers are strict JSON: a NaN loss or an infinite rate is null;
        a record of before scripts without steps has no `script`."""
        script = data.get("script")
        return cls(
            **{
                **data,
                **{name: number(data[name]) for name in ("loss", "samples_per_s", "cost_usd")},
                "script": ScriptProgress.from_dict(script) if script else None,
            }
        )


class RecoveryReason(str, Enum):
    """Why the job relaunched: the first trouble of an incident (training.control.recovery). Here, beside
    Recovery, and not in the controller's package: the reason travels to the user's machine in the result."""

    NOTICE = "notice"  # a Spot interruption notice: the trainers flushed and left; relaunch on the survivors
    NODE_LOST = "node-lost"  # an attempt failed and a node did not answer afterwards: relaunch without it
    STALL = "stall"  # no progress for longer than the stall limit: the attempt was killed (a node hangs)
    FOLD_IN = "fold-in"  # a replacement node was ready: the attempt was stopped cleanly to relaunch with it
    RESTART = "restart"  # an attempt ended early with every node still answering: relaunch on the same nodes
    CONTROLLER_RESTART = "controller-restart"  # the controller died; a new one resumed the job
    USER_RESUME = "user-resume"  # the user continued a job they had stopped (`train --resume`)
    LADDER = "ladder"  # the recovery ladder gave nodes up (Spot trainers making room for stand-ins): relaunch without

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class RelaunchPhases:
    """Where a relaunch's time went, from the trouble to the first step trained after it, in seconds, in
    order (they add up to the recovery's detect_to_resumed_s). The controller's clock times each: a
    rank's event counts when the controller reads it."""

    checkpoint_s: float  # detection -> the checkpoint flushed (0 when none was: a node died, a restart)
    teardown_s: float  # -> the stopped (or failed, or killed) attempt's mpirun exited
    launch_s: float  # -> the next mpirun started: probes, preparing nodes, readying the head
    imports_s: float  # -> its trainers began restoring: interpreters, imports, MPI, DeepCheck, the model
    restore_s: float  # -> the checkpoint restored (0: nothing to restore)
    first_step_s: float  # -> the first step trained after it

    @property
    def total_s(self) -> float:
        return round(sum(getattr(self, f.name) for f in fields(self)), 3)


@dataclass(frozen=True)
class Recovery:
    """One relaunch and what it cost."""

    reason: RecoveryReason
    nodes: tuple[str, ...]  # instance ids that left (notice, node-lost) or joined (fold-in)
    from_step: int  # the newest step reached before the relaunch
    resumed_step: int  # the step the relaunch restored
    lost_steps: int  # from_step - resumed_step: work done twice
    world_before: int
    world_after: int
    detected_wall: float  # time.time() when the controller learned of it (relates it to other clocks)
    detect_to_checkpoint_s: float | None  # the notice (or stop request) to the flushed checkpoint
    detect_to_resumed_s: float | None  # to the first step trained after the relaunch
    phases: RelaunchPhases | None = None  # where that time went (None: a result written before it was kept)
    # a launched script that reports no steps (its steps are 0 to 0): the work done twice as time, from when the
    # files the relaunch put back were written (or the run it redoes began, none kept) to the stop; None: in steps
    lost_s: float | None = None

    @property
    def lost_text(self) -> str:
        """The work this recovery lost, as counted (lost_work)."""
        return lost_work(self.lost_steps, self.lost_s or 0.0)

    @property
    def resumed_text(self) -> str:
        """Where the relaunch went on from: `resumed at step N`, or, for a script without steps, from its files."""
        return f"resumed at step {self.resumed_step}" if self.lost_s is None else "ran again from its kept files"

    @property
    def again(self) -> str:
        """What the relaunch's end is: training again, or, for a script without steps, running again."""
        return "training" if self.lost_s is None else "running"

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Recovery:
        phases = data.get("phases")
        return cls(
            **{
                **data,
                "reason": RecoveryReason(data["reason"]),
                "nodes": tuple(data["nodes"]),
                "phases": RelaunchPhases(**phases) if phases else None,
            }
        )


def lost_work(lost_steps: int, lost_s: float) -> str:
    """Work done twice, in a sentence: `12 steps lost`, or `3m07s of work lost` (jobstore.lost_in_time)."""
    return f"{duration(lost_s)} of work lost" if lost_in_time(lost_steps, lost_s) else f"{lost_steps} steps lost"


class Outcome(str, Enum):
    """What an attempt's end means (training.control.attempts.classify decides it; the next action follows)."""

    COMPLETED = "completed"
    INTERRUPTED = "interrupted"
    STOPPED = "stopped"
    FAILED = "failed"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class AttemptRecord:
    """One mpirun."""

    number: int
    nodes: tuple[str, ...]  # instance ids in rank order
    world_size: int  # trainers
    first_step: int  # the step it started from (restored)
    last_step: int  # the newest step it reported
    status: Outcome
    returncode: int
    startup_s: float | None  # mpirun started -> its first step trained (None: it never trained)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> AttemptRecord:
        return cls(**{**data, "nodes": tuple(data["nodes"]), "status": Outcome(data["status"])})


@dataclass
class TrainResult:
    """A completed job: what `deepvm train` prints (as JSON with --json), and what a managed job's head
    keeps as result.json for the user's machine to fetch."""

    job_id: str
    cluster: str
    status: JobStatus  # COMPLETED (a stopped or failed run raises instead)
    steps: int
    total_steps: int
    final_loss: float  # NaN: no step reported one, or it was not finite
    synthetic: bool
    restarts: int
    lost_steps: int
    cost_usd: float
    wall_s: float
    out_dir: str  # where model.pt and metrics.json were fetched to
    attempts: list[AttemptRecord] = field(default_factory=list)
    recoveries: list[Recovery] = field(default_factory=list)
    lost_s: float = 0.0  # the recoveries' lost_s together: work a script without steps did twice (0 before it was kept)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_json(self) -> str:
        return dumps(self.to_dict())

    @classmethod
    def from_json(cls, text: str) -> TrainResult:
        """The result as to_json wrote it, or as an earlier deepvm did (no relaunch phases then, NaN for null)."""
        data = json.loads(text)
        return cls(
            **{
                **data,
                "status": JobStatus(data["status"]),
                "final_loss": number(data["final_loss"]),
                "attempts": [AttemptRecord.from_dict(a) for a in data["attempts"]],
                "recoveries": [Recovery.from_dict(r) for r in data["recoveries"]],
            }
        )


LAUNCHER = "mpirun"  # JobReporter.log's prefix for a line that no rank wrote: the launcher's own


@dataclass(frozen=True)
class JobReporter:
    """How the controller shows what happens (the CLI renders it)."""

    note: Callable[[str], None] = lambda message: None  # a controller event: notice, relaunch, ...
    log: Callable[[str, str], None] = lambda prefix, text: None  # a rank's own output line
    progress: Callable[[Progress], None] = lambda progress: None
    push: Callable[[str, int, int], None] = lambda host, done, total: None  # bytes pushed to a host
    metrics: Callable[[MetricPoint], None] = lambda point: None  # trainer 0's scalars of a step (ctx.log)
    event: Callable[[str, str], None] = lambda kind, message: None  # what the cluster's event log gets: the hook's
