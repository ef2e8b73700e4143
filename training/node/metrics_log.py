"""Trainer 0's scalars on their way to the controller, off the training step's path.

`ctx.log(step, loss=loss)` may be handed a CUDA tensor: reading it (`.item()`) waits for the GPU to reach
that point, which inside the step loop stalls the next step's kernel launches. So the call only checks
its arguments and queues them; one thread reads the values and prints the Metrics line (a pipe write that
may block while mpirun's reader is slow). The queue is bounded: a script that logs faster than lines can
leave loses the newest points, counted and said once on stderr, rather than memory or the step's time.

Only trainer 0's points travel (the issue's contract: one run, one writer on the controller's side);
the other ranks' calls are checked and dropped, so a script runs the same on every rank.
"""

from __future__ import annotations

import queue
import sys
import threading
from typing import Any

from training.shared.events import Metrics, emit
from training.shared.scalars import MetricPoint, point_problem

QUEUE_POINTS = 4096  # points waiting to be sent, at most
_CLOSE = object()


class MetricsLog:
    """Queues trainer 0's points and sends them from a thread of its own (started on the first point)."""

    def __init__(self, rank: int) -> None:
        self.rank = rank
        self.dropped = 0  # points lost to a full queue
        self._queue: queue.Queue[object] = queue.Queue(QUEUE_POINTS)
        self._thread: threading.Thread | None = None

    def log(self, step: int, values: dict[str, Any]) -> None:
        """Check the point (ValueError says what is wrong) and queue it; never waits."""
        plain = {name: _number(value) for name, value in values.items()}  # tensors are read by the thread
        problem = point_problem(step, plain)
        if problem:
            raise ValueError(problem)
        if self.rank != 0:
            return
        if self._thread is None:
            self._thread = threading.Thread(target=self._send, name="deepvm-metrics", daemon=True)
            self._thread.start()
        try:
            self._queue.put_nowait((step, {name: _detached(value) for name, value in values.items()}))
        except queue.Full:
            self.dropped += 1
            if self.dropped == 1:
                print(f"deepvm: ctx.log drops points: more than {QUEUE_POINTS} wait to be sent", file=sys.stderr)

    def close(self, timeout_s: float = 10.0) -> None:
        """Send what is queued (within `timeout_s`), then stop the thread: before the rank's End."""
        if self._thread is None:
            return
        self._queue.put(_CLOSE)
        self._thread.join(timeout_s)
        self._thread = None

    def _send(self) -> None:
        while (item := self._queue.get()) is not _CLOSE:
            step, values = item  # type: ignore[misc]
            read = {name: float(value) for name, value in values.items()}  # a tensor's .item() waits here
            emit(Metrics(rank=self.rank, point=MetricPoint(step, read)))


def _number(value: Any) -> Any:
    """A one-element tensor stands for a number when the call is checked (it is read later, on the thread)."""
    if hasattr(value, "numel") and hasattr(value, "dtype"):  # a torch.Tensor, without importing torch here
        return 0.0 if value.numel() == 1 and not value.dtype.is_complex else value
    return value


def _detached(value: Any) -> Any:
    """A tensor without its autograd graph (no copy, no wait), so that a queued point holds no graph."""
    return value.detach() if hasattr(value, "detach") else value
