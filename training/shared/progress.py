"""What a training run reports while it runs and when it ends: plain data the CLI renders.

The controller never prints. It hands the CLI a JobReporter (callbacks, called from the controller's
own thread) and returns a TrainResult; both are built from the dataclasses here, so a test can read
exactly what a user sees, and `deepvm train --json` prints the result as is.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any

from training.shared.jobstore import JobStatus


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


@dataclass(frozen=True)
class Recovery:
    """One relaunch and what it cost."""

    reason: str  # notice | node-lost | fold-in | controller-restart | user-resume | restart
    nodes: tuple[str, ...]  # instance ids that left (notice, node-lost) or joined (fold-in)
    from_step: int  # the newest step reached before the relaunch
    resumed_step: int  # the step the relaunch restored
    lost_steps: int  # from_step - resumed_step: work done twice
    world_before: int
    world_after: int
    detected_wall: float  # time.time() when the controller learned of it (relates it to other clocks)
    detect_to_checkpoint_s: float | None  # the notice (or stop request) to the flushed checkpoint
    detect_to_resumed_s: float | None  # to the first step trained after the relaunch


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


@dataclass
class TrainResult:
    job_id: str
    cluster: str
    status: JobStatus  # COMPLETED (a stopped or failed run raises instead)
    steps: int
    total_steps: int
    final_loss: float | None
    synthetic: bool
    restarts: int
    lost_steps: int
    cost_usd: float
    wall_s: float
    out_dir: str  # where model.pt and metrics.json were fetched to
    attempts: list[AttemptRecord] = field(default_factory=list)
    recoveries: list[Recovery] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


LAUNCHER = "mpirun"  # JobReporter.log's prefix for a line that no rank wrote: the launcher's own


@dataclass(frozen=True)
class JobReporter:
    """How the controller shows what happens (the CLI renders it)."""

    note: Callable[[str], None] = lambda message: None  # a controller event: notice, relaunch, ...
    log: Callable[[str, str], None] = lambda prefix, text: None  # a rank's own output line
    progress: Callable[[Progress], None] = lambda progress: None
    push: Callable[[str, int, int], None] = lambda host, done, total: None  # bytes pushed to a host
