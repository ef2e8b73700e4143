"""`deepvm up --autodown N` on the head: `python -m training.head.idle_cluster ROOT` takes the cluster down once it
has had no job for N minutes.

A job's own end takes its cluster down only when the job asks (`train --down-when-done`); this watch is for
the cluster itself: one `up` with no job ever submitted, or a job that ended and no next one came, bills
until somebody remembers it. It runs beside any job's supervisor, started detached by `up`
(training/client/idle_watch.py), and counts a job as running while its supervisor process runs
(training/head/query.supervisor_alive): from its own start, and again from each moment a job was seen
running. It looks every 15 s, or every tenth of N when that is shorter, so that the cluster goes down within a
tenth of N of its time: a short N (fractions of a minute, as the sandbox's tests use) is not stretched by the
poll. When the count reaches N minutes the head takes the cluster down as autodown does
(training/head/autodown.py), with its record of the end in the cluster's bucket.

ROOT (deepvm/managed/cluster) holds watch.json (records.IdleWatch), watch.pid and watch.log (its notes,
one LogRecord a line).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

from provisioning.core.home import deepvm_home
from training.head.autodown import Autodown, take_down
from training.head.job_service import seed_cluster
from training.head.joblog import JobLog
from training.head.notify import Notifier
from training.head.query import supervisor_alive
from training.shared.guard import NotifyTarget
from training.shared.layout import WATCH_RECORD
from training.shared.records import IdleWatch

POLL_S = 15.0


def busy(jobs_dir: Path) -> bool:
    """Whether a job's supervisor runs on this head now."""
    return jobs_dir.is_dir() and any(supervisor_alive(root) for root in jobs_dir.iterdir())


def watch(
    root: Path,
    poll_s: float = POLL_S,
    clock: Callable[[], float] = time.monotonic,
    down: Callable[..., None] = take_down,
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    """Watch until the cluster has had no job for the watch's minutes, then take it down (see the module
    docstring). `clock`, `down` and `sleep` are a test's to replace."""
    record = IdleWatch.from_json((root / WATCH_RECORD).read_text())
    (root / "watch.pid").write_text(str(os.getpid()))
    seed_cluster(record.cluster, record.nodes)
    log = JobLog(root / "watch.log")
    name = record.cluster.name
    log.note(f"cluster {name} goes down after {record.minutes:g} minutes without a job")
    idle_since = clock()
    pause = min(poll_s, max(1.0, record.minutes * 60 / 10))
    while True:
        if busy(deepvm_home() / "jobs"):
            idle_since = clock()
        elif clock() - idle_since >= record.minutes * 60:
            reason = f"no job for {record.minutes:g} minutes (up --autodown)"
            down(Autodown(name, reason, "", record.bucket), log.note, Notifier(NotifyTarget(), b"", "", name, log.note))
            return 0
        sleep(pause)


if __name__ == "__main__":
    sys.exit(watch(Path(sys.argv[1]).resolve()))
