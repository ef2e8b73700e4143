"""The user's side of `deepvm watch`: what a job's view is fed from.

- `HeadStream`: a running job (or one whose cluster is still up): one SSH session to the head runs
  `python -m training.head.query watch JOB` (training/head/watch_feed.py), which sends the job's log records
  and a Snapshot every few seconds; closing the stream closes the session, which ends that process.
- `finished_run`: a job whose head no longer has it (its cluster is gone, or going down at the job's end), from
  wherever its log is now (training.client.outputs.job_outputs): in S3, where the head copied it at the job's
  end (the money guard's `--down-when-done`, `--max-duration`), else the copy `deepvm fetch` brought beside its
  outputs; and the job's row (brought up to date with the summary in S3) and cluster record in this machine's
  store.
"""

from __future__ import annotations

import queue
import shlex
import threading
from dataclasses import dataclass
from pathlib import Path

from provisioning.clusters.store import Store
from provisioning.core.errors import CloudError, NotFoundError
from training.client.managed import Head, query_script
from training.client.outputs import OutputsPlace, Where, remember, s3_log, s3_summary
from training.shared.jobstore import JobRow
from training.shared.records import JobSummary, LogRecord
from training.shared.transport import OutputLine, RemoteCommand
from training.shared.watch_records import Snapshot, snapshot_of, watch_line

LOG_COPY = "log.jsonl"  # the job's log, as `deepvm fetch` brings it beside the outputs


@dataclass(frozen=True)
class StreamEnd:
    """The head's side of the stream ended: the job is over (code 0), or it failed (why)."""

    code: int
    why: str


class HeadStream:
    """The job's records and snapshots as the head sends them; `next` hands them over one at a time."""

    def __init__(self, head: Head, job_id: str, every_s: float) -> None:
        self._items: queue.Queue[LogRecord | Snapshot | StreamEnd] = queue.Queue()
        self._errors: list[str] = []
        args = f"watch {shlex.quote(job_id)} --every {every_s:g}"
        self._remote = RemoteCommand(head.host, query_script(head, args), self._line)
        self._job_id, self._cluster = job_id, head.cluster
        threading.Thread(target=self._wait, name="watch-stream", daemon=True).start()

    def next(self, timeout_s: float) -> LogRecord | Snapshot | StreamEnd | None:
        """The next item, or None when none came within `timeout_s`."""
        try:
            return self._items.get(timeout=timeout_s)
        except queue.Empty:
            return None

    def close(self) -> None:
        """Close the SSH session: the head's side ends with it."""
        self._remote.close()

    def _line(self, item: OutputLine) -> None:
        if item.stream == "stderr":
            self._errors.append(item.text)
            return
        record = watch_line(item.text)
        if record is not None:
            self._items.put(record)

    def _wait(self) -> None:
        code = self._remote.wait()
        if code == 2:
            why = f"no job {self._job_id} on cluster {self._cluster}'s head; `deepvm jobs {self._cluster}` lists them"
        else:
            why = self._errors[-1] if self._errors else f"exit {code}"
        self._items.put(StreamEnd(code if code is not None else -1, why))


def finished_run(place: OutputsPlace) -> tuple[list[LogRecord], Snapshot]:
    """A job its head no longer shows: its log from where `place` says it is now (S3 first, else the copy
    fetched beside its outputs), and its nodes, money and timeline as this machine's store has them.
    NotFoundError (saying why) when no copy of its log can be had."""
    row, why = place.row, place.why
    records: list[LogRecord] = []
    if place.where is Where.S3:
        try:
            summary = s3_summary(place)
            if summary is not None:
                row = remember(place, summary)  # "running" as this machine last heard, completed in fact
            records = s3_log(place)
            why = "" if records else f"its log is not in {place.url} (yet)"
        except (NotFoundError, CloudError) as exc:  # its S3 is out of reach (the sandbox's, stopped): the copy
            why = str(exc)
    if not records:
        records = _fetched_log(row, why)
    return records, snapshot_of(JobSummary.from_row(row, controller_alive=False), Store())


def _fetched_log(row: JobRow, why: str) -> list[LogRecord]:
    path = Path(row.out_dir) / LOG_COPY
    if not path.is_file():
        raise NotFoundError(
            f"job {row.job_id}'s cluster {row.cluster} is gone and no copy of its log is here "
            f"({path}{'; ' + why if why else ''}); `deepvm fetch {row.job_id}` brings it while "
            "the cluster is up"
        )
    return [r for r in map(watch_line, path.read_text().splitlines()) if isinstance(r, LogRecord)]
