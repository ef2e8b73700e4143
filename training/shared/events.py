"""What ranks tell the controller: typed events, one JSON object per line on a rank's stdout.

mpirun merges every rank's stdout and tags each line with the rank it came from; the controller
(training.control.controller) turns each line back into a record with `parse` and acts on its type. Ranks print
other lines too (a user script's own prints, library warnings): a line is an event only when `parse`
makes one of it, and the controller shows every other line as the rank's output.

Who sends what:
- every trainer: Start, Step (every log_every steps, the last one, and the one it stops at), End;
  a trainer's watcher: NoticeSeen, or WatcherOff when the node has no instance metadata to watch;
- trainer 0 only (training.node.checkpointing): Restored, Saved, Flush; Metrics (`ctx.log`, and deepvm's
  worker at its progress steps), from a thread of its own (training.node.metrics_log), never the step's;
- every holder rank: Holder, once, before it serves checkpoints.

The wire format, pinned by tests/training/test_events.py because the tests that run ranks read their
stdout as plain JSON: {"event": KIND, "rank": RANK, FIELD: VALUE, ...}, flat, the fields in the record's
order. A field that only some senders have (deepvm's worker and a user's script do not report
the same facts) defaults to None and is left out of the line when None. JSON arrays come back as tuples.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from dataclasses import asdict, dataclass
from datetime import datetime
from enum import Enum
from typing import Any, ClassVar

from training.shared.scalars import MetricPoint


class NoticeKind(str, Enum):
    """Which of EC2's two Spot documents a notice is, named by its instance-metadata path.

    They mean different things: an interruption notice says the instance will be interrupted at its
    `time` (two minutes after it appears); a rebalance recommendation only says its capacity pool is at
    elevated risk, and many are never followed by an interruption
    (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/rebalance-recommendations.html). A node may get
    the recommendation alone, or first and the interruption notice later."""

    INTERRUPTION = "instance-action"  # spot/instance-action: interrupted at its `time`
    REBALANCE = "rebalance"  # events/recommendations/rebalance: at elevated risk of interruption

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Notice:
    """A Spot notice as a node's watcher (training.node.watcher) saw it: carried by NoticeSeen, read back
    from `python -m training.node.watcher --once` before a launch, and handed to the decision as is."""

    kind: NoticeKind  # an interruption notice, or a rebalance recommendation (a str on the wire)
    body: str  # the metadata document, e.g. {"action": "terminate", "time": "2026-...Z"}
    seen_at: float  # time.time() on the node when the watcher first saw it

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", NoticeKind(self.kind))  # a line's "kind" arrives as a str

    def takes_node_at(self) -> float | None:
        """When an interruption notice says its node goes (epoch seconds: its body's `time`); None for a
        recommendation, or a body without a readable time."""
        if not self.is_interruption:
            return None
        try:
            body = json.loads(self.body)
            return datetime.fromisoformat(str(body["time"]).replace("Z", "+00:00")).timestamp()
        except (ValueError, TypeError, KeyError):
            return None

    @property
    def is_interruption(self) -> bool:
        """True for the two-minute interruption notice, False for a rebalance recommendation."""
        return self.kind is NoticeKind.INTERRUPTION

    def to_dict(self) -> dict[str, object]:
        return {**asdict(self), "kind": self.kind.value}


@dataclass(frozen=True, kw_only=True)
class Event:
    """One event from a rank; the subclasses are the kinds."""

    EVENT: ClassVar[str]  # the kind's name on the wire, the value of "event"

    rank: int  # the trainer's index (training.node.distenv RANK); for Holder, the MPI world rank

    def _fields(self) -> dict[str, Any]:
        """The line's fields after "event": every field, less the optional ones that are None."""
        return {
            f.name: getattr(self, f.name)
            for f in dataclasses.fields(self)
            if getattr(self, f.name) is not None or f.default is not None
        }

    @classmethod
    def _from_fields(cls, fields: dict[str, Any]) -> Event:
        """The record from a line's fields after "event"; TypeError or KeyError when they are not its own."""
        return cls(**{name: tuple(v) if isinstance(v, list) else v for name, v in fields.items()})


@dataclass(frozen=True, kw_only=True)
class Start(Event):
    """A trainer is about to take its first step of this launch (after restoring any checkpoint)."""

    EVENT: ClassVar[str] = "start"

    job: str  # the job spec's name
    model: str | None = None  # deepvm's worker: the model's name
    dataset: str | None = None  # deepvm's worker: the dataset's kind
    script: str | None = None  # a user's script: its path, as the job spec names it
    synthetic: bool  # trained on generated data (deepvm's worker only; a user's script: always False)
    world_size: int  # trainers in this launch
    local_rank: int | None = None  # deepvm's worker: the trainer's index on its node
    planned_world_size: int | None = None  # a user's script: trainers the plan was made for
    batch: int | None = None  # deepvm's worker: this trainer's share of the global batch
    global_batch: int | None = None  # deepvm's worker: samples per step over all trainers
    lr: float | None = None  # deepvm's worker: the base learning rate, scaled for the global batch
    total_steps: int  # the step the job completes at
    first_step: int  # steps done before this launch: where it resumes (0: a fresh start)
    device: str  # the torch device it trains on, e.g. "cpu" or "cuda:0"
    pid: int  # the trainer's process id on its node


@dataclass(frozen=True, kw_only=True)
class Restored(Event):
    """Trainer 0 restored a checkpoint before its first step."""

    EVENT: ClassVar[str] = "restored"

    step: int  # the step the checkpoint was taken at
    checkpoint: str  # the checkpoint's name in DeepCheck
    levels: tuple[str, ...]  # the DeepCheck levels it was read from, e.g. ("L1",)
    seconds: float  # how long restoring took
    fallbacks: tuple[str, ...]  # newer checkpoints skipped because they failed verification, and why


@dataclass(frozen=True, kw_only=True)
class Step(Event):
    """Progress after a step: every log_every steps, at the last step, and at the step a run stops at."""

    EVENT: ClassVar[str] = "step"

    step: int  # steps done, counting from 1
    epoch: int | None  # the epoch the step was in; None: the job counts none (a `run:` script that gave none)
    loss: float  # this trainer's loss at the step
    global_loss: float  # the loss averaged over all trainers
    lr: float | None = None  # deepvm's worker: the learning rate the step used
    samples_per_s: float  # this trainer's samples per second since the previous Step
    synthetic: bool  # trained on generated data


@dataclass(frozen=True, kw_only=True)
class Saved(Event):
    """Trainer 0: a checkpoint due by the job's policy was taken (asynchronously; safe later)."""

    EVENT: ClassVar[str] = "saved"

    step: int  # the step it was taken at
    stall_s: float  # how long training waited for it
    bytes: int  # the size of the whole state stream


@dataclass(frozen=True, kw_only=True)
class Safe(Event):
    """Trainer 0: the newest checkpoint complete at the level the job's claims rest on (its checkpoint plan's
    safe_level): the step `status` says the job is checkpointed at. Saved says only that one was taken."""

    EVENT: ClassVar[str] = "safe"

    step: int
    level: str  # "L2", or "L1" for a job without L2


@dataclass(frozen=True, kw_only=True)
class NotSafe(Event):
    """Trainer 0: a checkpoint will never be complete at `level`, and DeepCheck's reason (a holder's disk is
    full, an upload was refused): said once per checkpoint and level."""

    EVENT: ClassVar[str] = "not_safe"

    step: int
    level: str
    reason: str


class FlushReason(str, Enum):
    """Why trainer 0 flushed a checkpoint (Flush's reason)."""

    NOTICE = "notice"  # an interruption notice on some trainer: the run ends after it
    STOP = "stop"  # a clean stop was asked (a fold-in, Ctrl-C, a cancel): the run ends after it
    REBALANCE = "rebalance"  # a rebalance recommendation on some trainer: the run goes on (training.node.checkpointing)

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True, kw_only=True)
class Flush(Event):
    """Trainer 0: a checkpoint was flushed and is safe: before the run ends (a notice, a clean stop), or at
    once while it trains on (a rebalance recommendation)."""

    EVENT: ClassVar[str] = "flush"

    step: int  # the step it was taken at
    reason: FlushReason  # a str on the wire
    level: str  # the DeepCheck level it is safe at, e.g. "L2"
    seconds: float  # how long the flush took
    stall_s: float  # how long training waited for it

    def __post_init__(self) -> None:
        object.__setattr__(self, "reason", FlushReason(self.reason))  # a line's "reason" arrives as a str

    @property
    def ends_run(self) -> bool:
        """Whether the trainers leave after it (a recommendation's flush is taken on the way)."""
        return self.reason is not FlushReason.REBALANCE


@dataclass(frozen=True, kw_only=True)
class Resumed(Event):
    """Trainer 0 of a launched script (run.calls_step: false) through a framework adapter
    (training.integrations): where the framework's own checkpoint put the run, and how far it goes. The rank
    that started the script said Start at step 0: only the framework knows its steps."""

    EVENT: ClassVar[str] = "resumed"

    step: int  # the step the framework resumed at (0: a fresh start)
    total_steps: int  # the step it completes at (0: it does not say)


class KeptHow(str, Enum):
    """What happened to a launched script's kept files (Kept's how)."""

    KEPT = "kept"  # complete files that changed went to the holders while the script ran
    FLUSHED = "flushed"  # the last changes were flushed as the script stopped (a notice, a clean stop)
    RESTORED = "restored"  # the newest complete copies were put back on every trainer before the launch

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True, kw_only=True)
class Kept(Event):
    """Trainer 0: a launched script's own checkpoint files (run.calls_step: false) were kept through DeepCheck,
    or put back (training.node.launched); the script takes no steps, so its files are its progress."""

    EVENT: ClassVar[str] = "kept"

    how: KeptHow  # a str on the wire
    version: int  # the DeepCheck checkpoint of the files (their step there), growing by one each time kept
    files: int  # files in it
    bytes: int  # their size together
    newest: str  # the newest file's path (job/REL or checkpoint_dir/REL), "" when none
    written_at: float  # when the newest file was written (time.time() on its node), 0 when none
    level: str | None = None  # the DeepCheck level it is safe at when flushed, e.g. "L1"
    seconds: float  # how long keeping (or putting back) took

    def __post_init__(self) -> None:
        object.__setattr__(self, "how", KeptHow(self.how))  # a line's "how" arrives as a str


@dataclass(frozen=True, kw_only=True)
class NoticeSeen(Event):
    """A trainer's watcher saw a notice on its node: an interruption notice (the trainers flush, then stop),
    or a rebalance recommendation (they flush, and train on)."""

    EVENT: ClassVar[str] = "notice"

    notice: Notice  # what the watcher saw; on the wire its fields sit flat beside "rank"

    def _fields(self) -> dict[str, Any]:
        return {"rank": self.rank, **self.notice.to_dict()}

    @classmethod
    def _from_fields(cls, fields: dict[str, Any]) -> Event:
        fields = dict(fields)
        return cls(rank=fields.pop("rank"), notice=Notice(**fields))


@dataclass(frozen=True, kw_only=True)
class Metrics(Event):
    """Trainer 0's scalars of one step (`ctx.log`; deepvm's worker logs WORKER_SCALARS), for the job's log,
    its TensorBoard files and `deepvm watch`. On the wire: {"event": "metrics", "rank": 0, "step": N,
    "values": {NAME: VALUE, ...}}; the names are the job's own, hence a map (training.shared.scalars)."""

    EVENT: ClassVar[str] = "metrics"

    point: MetricPoint  # on the wire its fields sit flat beside "rank"

    def _fields(self) -> dict[str, Any]:
        return {"rank": self.rank, **self.point.to_dict()}

    @classmethod
    def _from_fields(cls, fields: dict[str, Any]) -> Event:
        fields = dict(fields)
        rank = fields.pop("rank")
        if set(fields) != {"step", "values"}:
            raise KeyError("metrics: fields other than step and values")
        return cls(rank=rank, point=MetricPoint.from_dict(fields))


class EndStatus(str, Enum):
    """How a trainer's run ended without error: End's status, and the "status" of the run's metrics.json."""

    COMPLETED = "completed"  # it trained every step
    STOPPED = "stopped"  # it left early and cleanly after its checkpoint (a notice, a fold-in, a stop request)

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True, kw_only=True)
class End(Event):
    """A trainer's run ended without error (completed, or stopped cleanly after its checkpoint)."""

    EVENT: ClassVar[str] = "end"

    status: EndStatus
    steps: int  # steps done when it ended
    final_loss: float  # the last global loss reported (NaN when no Step was)
    wall_s: float | None = None  # deepvm's worker: seconds from the first step to the end

    @classmethod
    def _from_fields(cls, fields: dict[str, Any]) -> Event:
        return cls(**{**fields, "status": EndStatus(fields["status"])})


@dataclass(frozen=True, kw_only=True)
class WatcherOff(Event):
    """A trainer's node has no instance metadata to watch for notices (not on EC2, no sandbox)."""

    EVENT: ClassVar[str] = "watcher_off"

    reason: str  # why, as the metadata client said it


@dataclass(frozen=True, kw_only=True)
class Holder(Event):
    """A holder rank started serving checkpoints (it trains nothing, and says nothing more)."""

    EVENT: ClassVar[str] = "holder"

    pid: int  # its process id on its node
    directory: str  # where it keeps checkpoints on disk


_KINDS: dict[str, type[Event]] = {
    cls.EVENT: cls
    for cls in (
        Start,
        Restored,
        Resumed,
        Step,
        Saved,
        Safe,
        NotSafe,
        Flush,
        Kept,
        NoticeSeen,
        Metrics,
        End,
        WatcherOff,
        Holder,
    )
}


def line(event: Event) -> str:
    """`event` as its line on the wire (without the newline)."""
    return json.dumps({"event": event.EVENT, **event._fields()})


def emit(event: Event) -> None:
    """Print `event` on stdout as one line, written in one piece so ranks' lines never mix."""
    sys.stdout.write(line(event) + "\n")
    sys.stdout.flush()


def parse(line: str) -> Event | None:
    """The event on `line`, or None when it carries none.

    None also for a line that looks like an event but is not one of ours (an unknown kind, fields missing
    or unknown): a user's script may print JSON of its own, and such a line is then shown as the rank's
    output instead of being taken for progress or stopping the controller. Values are taken as the JSON
    gives them, unchecked: every rank runs the deepvm code the controller staged, these very records.
    """
    if not line.startswith("{"):  # most output is not JSON: skip the parser
        return None
    try:
        data = json.loads(line)
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    kind = data.pop("event", None)
    cls = _KINDS.get(kind) if isinstance(kind, str) else None
    if cls is None:
        return None
    try:
        return cls._from_fields(data)
    except (TypeError, KeyError, ValueError):  # not exactly the record's fields, or a value none of ours
        return None
