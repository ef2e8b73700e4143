"""A managed job's log on the head: LogRecords appended to log.jsonl, one line each.

Each record is one write() of one line to a file opened with O_APPEND, so the service and the supervisor
(two processes) can both append without tearing each other's lines, and a reader never sees half a line
that is not being completed. Lines are flushed as they are written and fsynced at most once a second:
the log is durable across a crash of the controller or a reboot of the head within a second of the
event, without an fsync per training step.
"""

from __future__ import annotations

import os
import re
import threading
import time
from pathlib import Path

from training.shared.jobstore import JobStatus
from training.shared.progress import JobReporter, Progress
from training.shared.records import LogKind, LogRecord
from training.shared.scalars import MetricPoint

_FSYNC_EVERY_S = 1.0
_RANK = re.compile(r" r(\d+)$")  # the controller prefixes a rank's lines with "NODE rN"


class JobLog:
    """Appends LogRecords to one job's log file."""

    def __init__(self, path: Path) -> None:
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        self._lock = threading.Lock()
        self._synced = time.monotonic()

    def write(self, record: LogRecord) -> None:
        data = (record.to_json() + "\n").encode()
        with self._lock:
            os.write(self._fd, data)
            if time.monotonic() - self._synced >= _FSYNC_EVERY_S or record.kind is LogKind.STATE:
                os.fsync(self._fd)
                self._synced = time.monotonic()

    def note(self, text: str) -> None:
        self.write(LogRecord(LogKind.NOTE, time.time(), text=text))

    def state(self, status: JobStatus, text: str) -> None:
        self.write(LogRecord(LogKind.STATE, time.time(), text=text, status=status))

    def close(self) -> None:
        with self._lock:
            if self._fd < 0:
                return
            os.fsync(self._fd)
            os.close(self._fd)
            self._fd = -1

    def reporter(self) -> JobReporter:
        """The controller's reporter, writing every event to this log."""

        def log(prefix: str, text: str) -> None:
            match = _RANK.search(prefix)
            self.write(
                LogRecord(LogKind.LOG, time.time(), text=text, source=prefix, rank=int(match[1]) if match else None)
            )

        def progress(p: Progress) -> None:
            self.write(LogRecord(LogKind.PROGRESS, time.time(), progress=p))

        finished: set[tuple[str, int]] = set()

        def push(host: str, done: int, total: int) -> None:
            if done == total and (host, total) not in finished:  # one line per push, not one per block
                finished.add((host, total))
                self.write(LogRecord(LogKind.PUSH, time.time(), source=host, done=done, total=total))

        def metrics(point: MetricPoint) -> None:
            self.write(LogRecord(LogKind.METRICS, time.time(), metrics=point))

        return JobReporter(note=self.note, log=log, progress=progress, push=push, metrics=metrics)
