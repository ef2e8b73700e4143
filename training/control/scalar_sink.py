"""A job's scalars (training.shared.scalars) in TensorBoard event files, written where its controller runs.

For a managed job that is the head: trainer 0 is a Spot node and changes across relaunches, so its own
disk would scatter the run; the head outlives every attempt. With `--controller local` it is the user's
machine. Either way the files are OUT/tensorboard/ beside the job's outputs (`deepvm fetch` brings them;
`tensorboard --logdir OUT/tensorboard` shows them). They are written by tensorboardX's SummaryWriter, a
maintained library with few dependencies (numpy, protobuf): the controller's side needs it, no rank
does. A controller whose Python lacks it says so once in the job's log and writes none (the scalars stay
in the log, for `deepvm watch`).

One run across relaunches and controller restarts: TensorBoard's run is the directory, and every writer
of the job writes there. A launch that resumes at step F while points past F may have been written (a
relaunch from an older checkpoint, a restarted controller) opens its file with purge_step F+1: TensorBoard
then hides the earlier points from F+1 on, its documented rule for a resumed run
(https://tensorboardx.readthedocs.io/en/latest/tensorboard.html, SummaryWriter's purge_step), so a redone
step shows once, with the value the run went on from. After a notice the trainers flush at the step they
stop at and the relaunch resumes there: nothing is hidden.

Calls come on the controller's thread; add_scalar only queues the event for tensorboardX's own writer thread.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from training.shared.scalars import MetricPoint

TENSORBOARD_DIR = "tensorboard"  # under the job's out directory
_EVENT_FILES = "events.out.tfevents.*"
_FLUSH_S = 10  # tensorboardX's writer thread writes its queue to disk at least this often
_QUEUE = 1000  # events tensorboardX holds before add_scalar waits for its writer thread


class ScalarSink:
    """The job's TensorBoard run; see the module docstring."""

    def __init__(self, directory: Path, note: Callable[[str], None]) -> None:
        self.directory = directory
        self._note = note
        self._writer: Any = None  # tensorboardX.SummaryWriter of the current launch, opened at its first point
        self._resumed_at: int | None = None  # the current launch's first step (None: no launch yet)
        self._highest = -1  # the newest step this controller wrote
        self._lacking = False  # tensorboardX is not installed here: said once, then nothing is written

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
        for name, value in point.values.items():
            writer.add_scalar(name, value, point.step, walltime=wall)
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
            from tensorboardX import SummaryWriter  # imports numpy and, when installed, torch: seconds, once
        except ImportError:
            self._lacking = True
            self._note("no TensorBoard files: this controller's Python lacks tensorboardX (`pip install "
                       "tensorboardX`); the scalars stay in the job's log and `deepvm watch`")  # fmt: skip
            return None
        files = len(list(self.directory.glob(_EVENT_FILES))) if self.directory.is_dir() else 0
        resumed = self._resumed_at if self._resumed_at is not None else max(self._highest, 0)
        self._writer = SummaryWriter(
            str(self.directory),
            purge_step=resumed + 1 if files else None,
            max_queue=_QUEUE,
            flush_secs=_FLUSH_S,
            # a file's name starts with the second it was opened in: two of one second (a controller that
            # restarted at once) must neither share a name nor sort out of order
            filename_suffix=f".{files + 1:05d}",
        )
        return self._writer
