"""The head's side of `deepvm watch`: the job's log as `query log --follow` gives it, with a Snapshot
(training.shared.watch_records) every few seconds, read from the head's own store: its nodes (the
replacements it bought included), the money, and the cluster's events since the job started.

It stops when the job is over (after a last snapshot) or when the watcher goes: `deepvm watch` closes its
SSH session on Ctrl-C, which ends this process's stdin; a thread waiting on it ends the process at once,
so nothing of a watch is left on the head.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable

from provisioning.clusters.store import Store
from training.shared.records import JobSummary
from training.shared.watch_records import snapshot_of


class SnapshotTicker:
    """Prints a snapshot of the job when one is due (`every_s`); the follow loop calls it each round."""

    def __init__(self, job: Callable[[], JobSummary | None], every_s: float) -> None:
        self._job, self._every_s, self._last = job, every_s, float("-inf")

    def __call__(self, final: bool = False) -> None:
        if not final and time.monotonic() - self._last < self._every_s:
            return
        summary = self._job()
        if summary is not None:
            sys.stdout.write(snapshot_of(summary, Store()).to_json() + "\n")
            sys.stdout.flush()
        self._last = time.monotonic()


def exit_when_stdin_closes() -> None:
    """End this process as soon as its stdin ends (the watcher's SSH session closed)."""

    def wait() -> None:
        while os.read(0, 4096):  # the raw descriptor: a buffered stdin's lock would stall the interpreter's exit
            pass
        os._exit(0)

    threading.Thread(target=wait, name="stdin-watch", daemon=True).start()
