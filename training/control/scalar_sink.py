"""Where a job's scalars (training.shared.scalars) go from its controller: TensorBoard event files always
(ScalarSink), and MLflow as well when the job file sets MLFLOW_TRACKING_URI (training.control.mlflow_sink).
The controller holds one MetricSinks (job_sinks) and tells it what it tells each: a launch's first step,
each point, the end.

TensorBoard's files are written where the job's controller runs.

For a managed job that is the head: trainer 0 is a Spot node and changes across relaunches, so its own
disk would scatter the run; the head outlives every attempt. With `--controller local` it is the user's
machine. Either way the files are OUT/tensorboard/ beside the job's outputs (`deepvm fetch` brings them;
`tensorboard --logdir OUT/tensorboard` shows them). They are written by TensorBoard's own event file writer
(tensorboard.summary.writer: what torch.utils.tensorboard writes with), from the package the user views
them with, which AWS's PyTorch images carry: the controller's side needs it, no rank does. Why not
tensorboardX's SummaryWriter: importing it imports torch wherever torch is installed, 3.2 CPU-s and
hundreds of MB at every controller start on the head, which trains nothing; this writer imports numpy and
protobuf (0.7 CPU-s). A controller whose Python lacks tensorboard says so once in the job's log and writes
none (the scalars stay in the log, for `deepvm watch`).

One run across relaunches and controller restarts: TensorBoard's run is the directory, and every writer
of the job writes there. A launch that resumes at step F while points past F may have been written (a
relaunch from an older checkpoint, a restarted controller) opens its file with a SessionLog START event at step F+1
(what torch's and tensorboardX's SummaryWriter write for purge_step F+1): TensorBoard then hides the earlier
points from F+1 on, its documented rule for a resumed run
(https://pytorch.org/docs/stable/tensorboard.html, SummaryWriter's purge_step), so a redone step shows
once, with the value the run went on from. After a notice the trainers flush at the step they
stop at and the relaunch resumes there: nothing is hidden.

Calls come on the controller's thread; add_event only queues the event for the writer's own thread.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Protocol

from training.control.mlflow_sink import RUN_FILE, MlflowSink, MlflowTarget
from training.shared.jobstore import JobRow
from training.shared.scalars import MetricPoint
from training.shared.tracking import EXPERIMENT, TRACKING_URI

TENSORBOARD_DIR = "tensorboard"  # under the job's out directory
_EVENT_FILES = "events.out.tfevents.*"
_FLUSH_S = 10  # the writer's thread writes its queue to disk at least this often
_QUEUE = 1000  # events the writer holds before add_event waits for its thread


class MetricSink(Protocol):
    """What the controller tells a place that keeps the job's scalars (every call on its thread)."""

    def launched(self, first_step: int) -> None:
        """Trainer 0 started a launch at `first_step` (steps done before it): points past it are redone."""

    def add(self, point: MetricPoint, wall: float) -> None:
        """One point of trainer 0's, received at `wall` (time.time())."""

    def close(self) -> None:
        """The controller ends: what is queued is written."""


class ScalarSink:
    """The job's TensorBoard run; see the module docstring."""

    def __init__(self, directory: Path, note: Callable[[str], None]) -> None:
        self.directory = directory
        self._note = note
        self._writer: Any = None  # the EventFileWriter of the current launch, opened at its first point
        self._resumed_at: int | None = None  # the current launch's first step (None: no launch yet)
        self._highest = -1  # the newest step this controller wrote
        self._lacking = False  # tensorboard is not installed here: said once, then nothing is written

    def launched(self, first_step: int) -> None:
        """Trainer 0 started a launch at `first_step` (steps done before it): points past it are redone."""
        if self._writer is not None and self._highest > first_step:
            self._writer.close()  # the next point opens a file that hides the redone steps
            self._writer = None
        self._resumed_at = first_step

    def add(self, point: MetricPoint, wall: float) -> None:
        """One point (received at `wall`, time.time()) into the run."""
        writer = self._writer or self._open()
        if writer is None:
            return
        tb = _tensorboard()
        values = [tb.Summary.Value(tag=name, simple_value=value) for name, value in point.values.items()]
        writer.add_event(tb.Event(wall_time=wall, step=point.step, summary=tb.Summary(value=values)))
        self._highest = max(self._highest, point.step)

    def close(self) -> None:
        """Write what is queued and close the file (the controller ends)."""
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    def _open(self) -> Any:
        if self._lacking:
            return None
        try:
            tb = _tensorboard()
        except ImportError:
            self._lacking = True
            self._note(
                "no TensorBoard files: this controller's Python lacks tensorboard (`pip install "
                "tensorboard`); the scalars stay in the job's log and `deepvm watch`"
            )
            return None
        files = len(list(self.directory.glob(_EVENT_FILES))) if self.directory.is_dir() else 0
        resumed = self._resumed_at if self._resumed_at is not None else max(self._highest, 0)
        self._writer = tb.EventFileWriter(
            str(self.directory),
            max_queue_size=_QUEUE,
            flush_secs=_FLUSH_S,
            # a file's name starts with the second it was opened in: two of one second (a controller that
            # restarted at once) must neither share a name nor sort out of order
            filename_suffix=f".{files + 1:05d}",
        )
        if files:  # earlier files may hold steps past `resumed`: TensorBoard hides them from here on
            self._writer.add_event(tb.Event(step=resumed + 1, session_log=tb.SessionLog(status=tb.SessionLog.START)))
        return self._writer


def _tensorboard() -> SimpleNamespace:
    """tensorboard's event file writer and the protos it writes, imported at the first point (numpy and
    protobuf: 0.7 CPU-s, once; Python keeps the modules); ImportError where the controller's Python lacks
    tensorboard."""
    from tensorboard.compat.proto.event_pb2 import Event, SessionLog
    from tensorboard.compat.proto.summary_pb2 import Summary
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    return SimpleNamespace(Event=Event, SessionLog=SessionLog, Summary=Summary, EventFileWriter=EventFileWriter)


@dataclass(frozen=True)
class MetricSinks:
    """Every sink of the job, told the same things in turn."""

    sinks: tuple[MetricSink, ...]

    def launched(self, first_step: int) -> None:
        for sink in self.sinks:
            sink.launched(first_step)

    def add(self, point: MetricPoint, wall: float) -> None:
        for sink in self.sinks:
            sink.add(point, wall)

    def close(self) -> None:
        for sink in self.sinks:
            sink.close()


def job_sinks(row: JobRow, env: Mapping[str, str], note: Callable[[str], None]) -> MetricSinks:
    """The job's sinks: its TensorBoard run under its out directory, and its MLflow run when `env` (the job
    file's) names a tracking URI."""
    out = Path(row.out_dir)
    sinks: list[MetricSink] = [ScalarSink(out / TENSORBOARD_DIR, note)]
    if env.get(TRACKING_URI):
        target = MlflowTarget(env[TRACKING_URI], env.get(EXPERIMENT, ""), row.job_id, row.name)
        sinks.append(MlflowSink(target, out / RUN_FILE, note))
    return MetricSinks(tuple(sinks))
