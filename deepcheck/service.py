"""The one background thread per rank that drives DeepCheck's MPI traffic.

Parts (trainer, holder, lead) register handlers for control messages and a `poll()` that makes progress
on their transfers; the loop receives messages, runs callbacks posted by other threads, polls every part
and sleeps briefly when nothing moved: up to 2 ms when idle (20 ms once idle for half a second: between
checkpoints), 0.2 ms while some part expects the message that ends a transfer (a digest trailer, acks,
Complete, L1 reports: each hop of the L1 handshake costs well under a millisecond, while long waits cost
little CPU), and a callback posted by another thread (a save job, a finished disk write) wakes it at once.
All protocol state is owned by this thread; the training thread only hands over save jobs and waits on
conditions. An exception here is kept and re-raised to the user on the next API call instead of dying
silently.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from typing import Any, Protocol

from mpi4py import MPI

from .errors import DeepCheckError
from .protocol import Shutdown
from .transport import BUSY_CAP, IDLE_CAP, TAG_CTRL, TAG_REQ, Backoff, Bell, Outbox, poll_message
from .world import World

log = logging.getLogger("deepcheck")
Handler = Callable[[Any, int], None]


class Part(Protocol):
    def handlers(self) -> dict[type, Handler]: ...
    def poll(self) -> bool: ...
    def busy(self) -> bool: ...  # a message that completes a transfer is due soon: poll often
    def idle(self) -> bool: ...
    def stopped(self) -> None: ...


class Service:
    def __init__(self, comm: MPI.Comm, rcomm: MPI.Comm, world: World):
        self.comm = comm  # checkpoint flow
        self.rcomm = rcomm  # restore requests and replies
        self.world = world
        self.outbox = Outbox(comm)
        self.replies = Outbox(rcomm)
        self.inbox: queue.SimpleQueue = queue.SimpleQueue()
        self.bell = Bell()
        self.parts: list[Part] = []
        self.handlers: dict[type, list[Handler]] = {Shutdown: [self._on_shutdown]}
        self.requests: dict[type, Handler] = {}
        self.stopping = False
        self.error: BaseException | None = None
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, name="deepcheck-service", daemon=True)

    def add(self, part: Part, requests: dict[type, Handler] | None = None) -> None:
        self.parts.append(part)
        for kind, handler in part.handlers().items():
            self.handlers.setdefault(kind, []).append(handler)
        self.requests.update(requests or {})

    def post(self, fn: Callable[[], Any]) -> None:
        """Run `fn` on the service thread soon (thread-safe); wakes the loop if it is sleeping."""
        self.inbox.put(fn)
        self.bell.ring()

    def start(self) -> None:
        self.thread.start()

    def check(self) -> None:
        """Re-raise a failure of the background thread in the caller's thread."""
        if self.error is not None:
            raise DeepCheckError(f"DeepCheck's background thread failed: {self.error!r}") from self.error

    def _on_shutdown(self, msg: Shutdown, src: int) -> None:
        self.stopping = True

    def _dispatch(self, comm: MPI.Comm, tag: int, table: dict[type, Any]) -> bool:
        moved = False
        for _ in range(64):
            got = poll_message(comm, tag)
            if got is None:
                break
            msg, src = got
            handlers = table.get(type(msg))
            if handlers is None:
                raise DeepCheckError(f"rank {self.world.rank} got an unexpected {type(msg).__name__} from rank {src}")
            for handler in handlers if isinstance(handlers, list) else [handlers]:
                handler(msg, src)
            moved = True
        return moved

    def _loop(self) -> None:
        backoff = Backoff(self.bell, rest=True)
        while True:
            moved = self._dispatch(self.comm, TAG_CTRL, self.handlers)
            if self.requests:
                moved |= self._dispatch(self.rcomm, TAG_REQ, self.requests)
            while not self.inbox.empty():
                self.inbox.get_nowait()()
                moved = True
            for part in self.parts:
                moved |= part.poll()
            moved |= self.outbox.poll()
            moved |= self.replies.poll()
            if self.stopping and self.outbox.idle and self.replies.idle and all(p.idle() for p in self.parts):
                return
            backoff.pause(moved, BUSY_CAP if any(p.busy() for p in self.parts) else IDLE_CAP)

    def _run(self) -> None:
        try:
            self._loop()
        except BaseException as exc:
            self.error = exc
            log.exception("DeepCheck background thread on rank %d failed", self.world.rank)
        finally:
            for part in self.parts:
                part.stopped()
            self.done.set()
