"""A thread for blocking I/O (disk writes with fsync, S3 uploads) that must not stall the MPI loop.

Results come back as callbacks run on the service thread (through `post`, which also wakes it), so all protocol state is
touched by one thread only and needs no locks. Workers never call MPI.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from typing import Any

log = logging.getLogger("deepcheck")
Done = Callable[[Any, BaseException | None], None]


class Worker:
    def __init__(self, name: str, post: Callable[[Callable[[], Any]], None]):
        self.post = post
        self.jobs: queue.SimpleQueue = queue.SimpleQueue()
        self.pending = 0  # touched by the service thread only
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.thread.start()

    def submit(self, fn: Callable[[], Any], done: Done) -> None:
        self.pending += 1
        self.jobs.put((fn, done))

    def _finish(self, done: Done, result: Any, error: BaseException | None) -> None:
        self.pending -= 1
        done(result, error)

    def _run(self) -> None:
        while (job := self.jobs.get()) is not None:
            fn, done = job
            try:
                result, error = fn(), None
            except Exception as exc:
                log.exception("background %s job failed", self.thread.name)
                result, error = None, exc
            self.post(lambda d=done, r=result, e=error: self._finish(d, r, e))

    @property
    def idle(self) -> bool:
        return self.pending == 0

    def stop(self) -> None:
        self.jobs.put(None)
        self.thread.join()
