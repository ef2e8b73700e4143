"""MPI plumbing: tags, chunked buffer-protocol transfers, non-blocking small messages, polite polling.

Bulk bytes go as uppercase Isend/Irecv of memoryview slices (MPI.BYTE), at most `chunk` bytes each, so no
single message approaches MPI's 2 GiB count limit and nothing large is pickled. Small control messages
are pickled with isend and received with matched probes (improbe + recv), which is safe when several
threads use MPI. Waiting is done by testing and sleeping with a short backoff instead of blocking MPI
calls: Open MPI's blocking calls spin a core, and DeepCheck's background thread must not steal the
training loop's CPU while it is idle.
"""

from __future__ import annotations

import contextlib
import threading
import time
from array import array
from typing import Any

from mpi4py import MPI

from .errors import CheckpointTimeout

TAG_CTRL = 11  # small pickled messages of the checkpoint flow (protocol.py)
TAG_DATA = 12  # shard bytes, trainer -> holder
TAG_REQ = 21  # restore requests, trainer -> holder (restore communicator)
TAG_REPLY = 22  # restore replies
TAG_FETCH = 23  # restored shard bytes, holder -> trainer

DEFAULT_CHUNK = 8 << 20
MAX_CHUNK = 1 << 30


def spans(length: int, chunk: int) -> list[tuple[int, int]]:
    return [(a, min(a + chunk, length)) for a in range(0, length, chunk)]


def post_chunks(comm: MPI.Comm, view: memoryview, peer: int, tag: int, chunk: int, *, send: bool) -> list[MPI.Request]:
    """Start a chunked transfer of `view` to (send) or from `peer`; both sides must use the same chunk."""
    op = comm.Isend if send else comm.Irecv
    return [op([view[a:b], MPI.BYTE], peer, tag) for a, b in spans(len(view), chunk)]


def poll_message(comm: MPI.Comm, tag: int, source: int = MPI.ANY_SOURCE) -> tuple[Any, int] | None:
    """Receive one pending pickled message, or None; returns (message, source rank)."""
    status = MPI.Status()
    msg = comm.improbe(source=source, tag=tag, status=status)
    if msg is None:
        return None
    return msg.recv(), status.Get_source()


IDLE_CAP = 0.002  # longest sleep between polls when nothing is expected
BUSY_CAP = 0.0002  # ... and while a message that ends a transfer is due (a digest trailer, an ack, Complete)
REST_CAP = 0.02  # ... and once the service loop has had nothing to do for REST_AFTER_S (between checkpoints)
REST_AFTER_S = 0.5


class Bell:
    """A sleep that another thread can cut short with `ring()`; a ring while nobody sleeps ends the next sleep.

    A bare lock rather than threading.Event: acquiring with a timeout costs no more than time.sleep, and the
    service loop sleeps hundreds of times a second.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._lock.acquire()  # held = not rung

    def ring(self) -> None:
        with contextlib.suppress(RuntimeError):  # already rung
            self._lock.release()

    def sleep(self, seconds: float) -> None:
        self._lock.acquire(timeout=seconds)


class Backoff:
    """Sleep a little longer each idle round (up to a cap) and not at all after progress.

    With `rest` (the service loop), an idle cap that has held for REST_AFTER_S becomes REST_CAP: between two
    checkpoints a rank has nothing to move for seconds, and polling every 2 ms then cost each rank 4 % of a
    core (measured: 0.4 CPU-s per rank over 10 idle seconds, trainers and holders alike), CPU the training
    loop on the same node needs. What it costs is latency once per quiet spell: the first message of the
    next save or restore waits up to REST_CAP on the receiving side (a post from this rank's own threads
    rings the bell and wakes it at once); from then on the loop is hot again."""

    def __init__(self, bell: Bell | None = None, rest: bool = False):
        self.sleep = time.sleep if bell is None else bell.sleep
        self.idle = 0
        self.rest = rest
        self.quiet_since: float | None = None  # when the current run of idle rounds began

    def pause(self, progressed: bool, cap: float = IDLE_CAP) -> None:
        self.idle = 0 if progressed else min(self.idle + 1, 12)
        if progressed:
            self.quiet_since = None
            time.sleep(0)  # let other threads have the GIL
            return
        if self.rest and cap < IDLE_CAP:  # a transfer's end is due: not a quiet spell
            self.quiet_since = None
        elif self.rest:
            now = time.monotonic()
            if self.quiet_since is None:
                self.quiet_since = now
            elif now - self.quiet_since >= REST_AFTER_S:
                self.sleep(REST_CAP)
                return
        self.sleep(min(cap, 1e-6 * (1 << self.idle)))


def _deadline(timeout: float | None) -> float:
    return float("inf") if timeout is None else time.monotonic() + timeout


def wait_requests(reqs: list[MPI.Request], timeout: float | None, what: str, cap: float = IDLE_CAP) -> None:
    deadline, backoff = _deadline(timeout), Backoff()
    while not MPI.Request.Testall(reqs):
        if time.monotonic() > deadline:
            raise CheckpointTimeout(f"timed out after {timeout}s waiting for {what}")
        backoff.pause(False, cap)


def allreduce(comm: MPI.Comm, values: array, op: MPI.Op) -> array:
    """`values` reduced with `op` over `comm` (collective), waited for by polling with a short backoff.

    Why not `comm.allreduce`: a blocking Open MPI collective spins a core until the last rank arrives, and
    trainers agree once a step, each arriving when its own step ends. On the sandbox (3 trainers and a holder on
    two cores, TCP between hosts, 300 steps of configs/own_train.py) the trainers' spinning agreements took 43.6
    CPU-s of the ranks and 33.5 s, polled ones 15.8 CPU-s and 20.0 s, at the same loss. benchmarks/agree_bench.py
    measures the agreement alone: x0.12-0.23 of the CPU, for up to 1 ms more a step (0.2 ms of backoff cap per
    round of the collective, and Python's sleep)."""
    out = array(values.typecode, values)
    wait_requests([comm.Iallreduce(values, out, op)], None, "the other ranks' agreement", cap=BUSY_CAP)
    return out


def any_each(comm: MPI.Comm, *flags: bool) -> tuple[bool, ...]:
    """Collective: each flag True on every rank of `comm` when it is True on any, all in one allreduce (a bit per
    flag), so that a step's checks cost one round trip."""
    bits = sum(1 << i for i, flag in enumerate(flags) if flag)
    agreed = allreduce(comm, array("q", [bits]), MPI.BOR)[0]
    return tuple(bool(agreed >> i & 1) for i in range(len(flags)))


def wait_message(comm: MPI.Comm, source: int, tag: int, timeout: float | None, what: str) -> Any:
    deadline, backoff = _deadline(timeout), Backoff()
    while (got := poll_message(comm, tag, source)) is None:
        if time.monotonic() > deadline:
            raise CheckpointTimeout(f"timed out after {timeout}s waiting for {what}")
        backoff.pause(False)
    return got[0]


class Outbox:
    """Fire-and-forget small messages; keeps each request (and its pickled buffer) alive until sent."""

    def __init__(self, comm: MPI.Comm):
        self.comm = comm
        self.pending: list[MPI.Request] = []

    def send(self, obj: Any, dest: int, tag: int = TAG_CTRL) -> None:
        self.pending.append(self.comm.isend(obj, dest=dest, tag=tag))

    def add(self, reqs: list[MPI.Request]) -> None:
        self.pending.extend(reqs)

    def poll(self) -> bool:
        before = len(self.pending)
        self.pending = [r for r in self.pending if not r.Test()]
        return len(self.pending) != before

    @property
    def idle(self) -> bool:
        return not self.pending
