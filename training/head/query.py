"""What the user's machine asks the head about its managed jobs, over SSH:

    python -m training.head.query jobs                 one JobSummary (JSON) per line, newest first
    python -m training.head.query log JOB_ID [--from N] [--follow]
                                                              the job's log records from line N; with
                                                              --follow, until the job is over
    python -m training.head.query cancel JOB_ID [--now]
    python -m training.head.query watch JOB_ID [--from N] [--every S]
                                                              the log as with --follow, and a snapshot of
                                                              the nodes and money every S seconds, until the
                                                              job is over or stdin ends (deepvm watch)
    python -m training.head.query summary JOB_ID       the run's summary (RunSummary, JSON): the one written at
                                                              its end, or as of now while it runs

It reads the head's files and state store and changes nothing but the cancel request, so any number of
clients can ask at once while the job runs. Run with DEEPVM_HOME set to the head's managed home.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

from provisioning.core.home import deepvm_home
from training.head.watch_feed import SnapshotTicker, exit_when_stdin_closes
from training.shared.jobstore import JobRow, JobStatus, JobStore
from training.shared.layout import END_MARK
from training.shared.records import JobSummary, LogKind, LogRecord
from training.shared.summary import SUMMARY_FILE

_POLL_S = 0.2


def job_root(job_id: str) -> Path:
    return deepvm_home() / "jobs" / job_id


def supervisor_alive(root: Path) -> bool:
    """Whether the job's supervisor process runs (its pid file names a live process running it)."""
    try:
        pid = int((root / "supervisor.pid").read_text())
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (OSError, ValueError):
        return False
    return b"training.head.job_supervisor" in cmdline


def summaries() -> list[JobSummary]:
    found = [JobSummary.from_row(row, supervisor_alive(job_root(row.job_id))) for row in _job_rows()]
    known = {s.job_id for s in found}
    jobs_dir = deepvm_home() / "jobs"
    for root in sorted(jobs_dir.iterdir()) if jobs_dir.is_dir() else []:
        if root.name not in known:  # its controller has not written its row (yet, or ever)
            alive = supervisor_alive(root)
            status, text = (JobStatus.RUNNING, "starting") if alive else _last_state(root)
            found.append(
                JobSummary(root.name, "", root.name, status, 0, 0, None, 0, -1, 0, 0, 0.0, "", "", text, alive)
            )
    return found


def _summary(job_id: str) -> JobSummary | None:
    return next((s for s in summaries() if s.job_id == job_id), None)


def _last_state(root: Path) -> tuple[JobStatus, str]:
    """The last state the job's log records (FAILED when it records none: nothing runs it any more)."""
    status, text = JobStatus.FAILED, "its controller stopped before it started"
    with contextlib.suppress(OSError), open(root / "log.jsonl") as log:
        for line in log:
            with contextlib.suppress(ValueError, TypeError):
                record = LogRecord.from_json(line)
                if record.kind is LogKind.STATE and record.status is not None:
                    status, text = record.status, record.text
    return status, text


def _job_rows() -> list[JobRow]:
    return JobStore().all() if (deepvm_home() / "state.db").exists() else []


def follow(
    job_id: str, start: int, tail: int | None, keep_following: bool, tick: Callable[[bool], None] | None = None
) -> int:
    """Print the log's lines from line `start` (or its last `tail` lines); with `keep_following`, until
    the job is over and its supervisor gone. `tick(last)` runs whenever the log has nothing new (`last`: the
    follow ends). Returns 0, or 2 when there is no such job."""
    root = job_root(job_id)
    if not (root / "job.json").exists():
        print(f"no job {job_id} on this head", file=sys.stderr)
        return 2
    path, seen, partial = root / "log.jsonl", 0, b""
    if tail is not None and path.exists():
        with open(path, "rb") as counting:
            start = max(start, sum(1 for _ in counting) - tail)
    with contextlib.ExitStack() as stack:
        handle = None
        while True:
            if handle is None and path.exists():
                handle = stack.enter_context(open(path, "rb"))
            over = (not supervisor_alive(root) or (root / END_MARK).exists()) and _final(job_id)
            chunk = handle.read() if handle is not None else b""
            if chunk:
                *lines, partial = (partial + chunk).split(b"\n")
                for line in lines:
                    if seen >= start:
                        sys.stdout.buffer.write(line + b"\n")
                    seen += 1
                sys.stdout.flush()
                continue
            done = not keep_following or over
            if tick is not None:
                tick(done)
            if done:
                return 0
            time.sleep(_POLL_S)


def _final(job_id: str) -> bool:
    """Whether the job's state is final (or it never got a row and nothing runs it)."""
    if not (deepvm_home() / "state.db").exists():
        return True
    row = JobStore().get(job_id)
    return row is None or row.status.final


def cancel(job_id: str, now: bool) -> int:
    from training.control.attempts import CancelMode  # the controller's side (0.14 CPU-s): for a cancel alone

    root = job_root(job_id)
    if not (root / "job.json").exists():
        print(f"no job {job_id} on this head", file=sys.stderr)
        return 2
    temp = root / "cancel.tmp"
    temp.write_text(str(CancelMode.NOW if now else CancelMode.CHECKPOINT))
    os.replace(temp, root / "cancel")
    return 0


def print_summary(job_id: str) -> int:
    """Print the job's run summary (see the module docstring); 2 when this head does not know the job."""
    root = job_root(job_id)
    if not (root / "job.json").exists():
        print(f"no job {job_id} on this head", file=sys.stderr)
        return 2
    if (root / SUMMARY_FILE).exists():
        print((root / SUMMARY_FILE).read_text())
        return 0
    row = JobStore().get(job_id) if (deepvm_home() / "state.db").exists() else None
    if row is None:
        print(f"job {job_id} has not started yet", file=sys.stderr)
        return 2
    from training.head.summary import run_summary  # the store and the cost arithmetic, only for this question
    from training.shared.records import HeadJob

    print(run_summary(HeadJob.from_json((root / "job.json").read_text()), row).to_json())
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m training.head.query")
    sub = parser.add_subparsers(dest="what", required=True)
    sub.add_parser("jobs")
    log = sub.add_parser("log")
    log.add_argument("job_id")
    log.add_argument("--from", dest="start", type=int, default=0)
    log.add_argument("--tail", type=int)
    log.add_argument("--follow", action="store_true")
    stop = sub.add_parser("cancel")
    stop.add_argument("job_id")
    stop.add_argument("--now", action="store_true")
    watch = sub.add_parser("watch")
    watch.add_argument("job_id")
    watch.add_argument("--from", dest="start", type=int, default=0)
    watch.add_argument("--every", type=float, default=2.0)
    sub.add_parser("summary").add_argument("job_id")
    args = parser.parse_args(argv)
    if args.what == "jobs":
        for summary in summaries():
            print(summary.to_json())
        return 0
    if args.what == "log":
        return follow(args.job_id, args.start, args.tail, args.follow)
    if args.what == "watch":
        exit_when_stdin_closes()
        job = args.job_id
        return follow(job, args.start, None, True, SnapshotTicker(lambda: _summary(job), args.every))
    if args.what == "summary":
        return print_summary(args.job_id)
    return cancel(args.job_id, args.now)


if __name__ == "__main__":
    sys.exit(main())
