"""How a training job's events read on screen: shared by `deepvm train` (live) and `deepvm logs`."""

from __future__ import annotations

import dataclasses
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from deepvm_cli.ui.console import duration
from training.shared.jobstore import JobRow, JobStatus
from training.shared.mpinotes import LauncherNotes
from training.shared.progress import LAUNCHER, JobReporter, Progress, ScriptProgress, TrainResult, lost_work
from training.shared.records import LogKind, LogRecord

if TYPE_CHECKING:
    from training.control.leftovers import Leftovers


def screened(report: JobReporter) -> JobReporter:
    """`report`, without Open MPI's notes on what it does itself (training/shared/mpinotes.py): the MPI_ABORT
    banner around a rank's error, passing on deepvm's stop signal ("signal 10" reads like a crash). They
    stay in the job's log (`deepvm logs JOB`); this is the one filter between a job's lines and the screen."""
    log, notes = report.log, LauncherNotes()

    def shown(prefix: str, text: str) -> None:
        for kept in notes.keep(text) if prefix == LAUNCHER else [text]:
            log(prefix, kept)

    return dataclasses.replace(report, log=shown)


def describe_progress(p: Progress, width: int | None = None) -> str:
    """The newest progress as ` · `-separated fields, in reading order; within `width` characters, those
    that matter least go first (the synthetic-data note, the epoch, trainers, samples/s), so that a line
    never wraps at 80 columns: loss and money stay. No epoch for a job that counts none (a `run:` script).
    A launched script that reports no steps has no step, loss or rate to show: what is known of it instead
    (script_fields)."""
    trainers = (f"{p.world_size} trainer" + ("" if p.world_size == 1 else "s"), 2)
    fields = (
        script_fields(p.script, trainers, p.cost_usd)
        if p.script is not None
        else [  # (text, rank: the
            *([(f"epoch {p.epoch}", 4)] if p.epoch is not None else []),  # lower, the longer it stays)
            (f"loss {p.loss:.4f}", 0),
            (f"{p.samples_per_s:,.1f} samples/s", 3),
            trainers,
            (f"${p.cost_usd:.4f}", 1),
            *([("synthetic data", 5)] if p.synthetic else []),
        ]
    )
    text = _SEP.join(t for t, _ in fields)
    while width is not None and len(text) > width and len(fields) > 1:
        fields.remove(max(fields, key=lambda field: field[1]))
        text = _SEP.join(t for t, _ in fields)
    return text


def script_fields(s: ScriptProgress, trainers: tuple[str, int], cost_usd: float) -> list[tuple[str, int]]:
    """A launched script's progress fields (describe_progress's, ranked alike): how long it has run, what is safe
    of its work (the newest kept file and its age) and its newest line, which goes first when room is short."""
    said = s.last_line.strip()
    kept = (
        f"kept {s.newest}"
        + (f" (+{s.kept_files - 1} more)" if s.kept_files > 1 else "")
        + f", written {duration(s.newest_age_s)} ago"
        if s.newest
        else "nothing kept yet"
    )
    return [
        (f"running {duration(s.running_s)}", 0),
        (kept, 1),
        trainers,
        (f"${cost_usd:.4f}", 1),
        *([(f"> {said[:_SAID] + '...' * (len(said) > _SAID)}", 3)] if said else []),
    ]


def progress_line(p: Progress, eta: str = "", width: int | None = None) -> str:
    """`step 10/60 · <fields> · eta 1m05s`, within `width` (the step and the eta always stay); a launched script
    that reports no steps has no step to show, nor an eta: its fields alone (script_fields)."""
    if p.script is not None:
        return describe_progress(p, width)
    head, tail = f"step {p.step}/{p.total_steps}", f"{_SEP}eta {eta}" if eta else ""
    room = None if width is None else max(width - len(head) - len(tail) - len(_SEP), 0)
    return f"{head}{_SEP}{describe_progress(p, room)}{tail}"


_SEP = " · "
_SAID = 60  # characters of a script's own line a progress line quotes


class Eta:
    """Time left from the steps of the last minute or so: a relaunch (fewer trainers, steps redone) shows in
    the estimate within a window instead of being averaged into the whole run."""

    WINDOW_S = 90.0

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._seen: deque[tuple[float, int]] = deque()

    def update(self, step: int, total_steps: int) -> str:
        """The estimate after trainer 0 reported `step`, as "12m05s"; "" until two reports say how fast."""
        left = self.left_s(step, total_steps)
        return "" if left is None else duration(left)

    def left_s(self, step: int, total_steps: int) -> float | None:
        """update's estimate in seconds (None until two reports say how fast)."""
        now = self._clock()
        if self._seen and step < self._seen[-1][1]:  # resumed from an older checkpoint: the rate starts over
            self._seen.clear()
        self._seen.append((now, step))
        while len(self._seen) > 2 and now - self._seen[0][0] > self.WINDOW_S:
            self._seen.popleft()
        (t0, s0), (t1, s1) = self._seen[0], self._seen[-1]
        if s1 <= s0 or t1 <= t0:
            return None
        return (total_steps - step) * (t1 - t0) / (s1 - s0)


@dataclass(frozen=True)
class Detached:
    """A managed job left running on its head: `train --detach`, or Ctrl-C while following it. The caller
    prints its lines once its progress bars are gone."""

    job_id: str
    head: str  # the head node's instance id
    interrupted: bool  # Ctrl-C (else --detach)

    def lines(self) -> list[str]:
        first = (
            f"detached: job {self.job_id} keeps running on the cluster's head node {self.head}"
            if self.interrupted
            else f"job {self.job_id} runs on the cluster's head node {self.head}; nothing of it runs on this machine"
        )
        return [first, f"  follow it: deepvm logs {self.job_id} -f", f"  stop it:   deepvm cancel {self.job_id}"]


def record_line(record: LogRecord, width: int | None = None) -> str:
    """One log record as one line of text (a progress line within `width`, when a terminal shows it)."""
    match record.kind:
        case LogKind.LOG:
            return f"[{record.source}] {record.text}"
        case LogKind.PROGRESS if record.progress is not None:
            return progress_line(record.progress, width=width)
        case LogKind.PUSH:
            return f"pushed {record.total:,} bytes to {record.source}"
        case LogKind.STATE:
            return f"job {record.status}: {record.text}"
    return record.text


def result_lines(result: TrainResult) -> list[str]:
    """A completed job's summary, as `deepvm train` prints it."""
    synthetic = " (synthetic data)" if result.synthetic else ""
    trained = (
        f"step {result.steps}/{result.total_steps}, final loss {result.final_loss:.4f}{synthetic}"
        if result.total_steps
        else "its script takes no steps (run.calls_step: false)"
    )
    lines = [
        f"{result.job_id} completed: {trained}, {result.restarts} restarts, "
        f"{lost_work(result.lost_steps, result.lost_s)}, ${result.cost_usd:.4f}, {result.wall_s:.0f}s"
    ]
    for r in result.recoveries:
        resumed = "-" if r.detect_to_resumed_s is None else f"{r.detect_to_resumed_s:.1f}s"
        lines.append(
            f"  {r.reason}: {r.world_before} -> {r.world_after} trainers, {r.resumed_text} ({r.lost_text}), {resumed} "
            f"from detection to {r.again} again"
        )
    lines.append(f"model and metrics: {result.out_dir}")
    return lines


def replay(report: JobReporter) -> Callable[[LogRecord], None]:
    """Show a managed job's log records through a reporter, as if its controller ran here."""

    def show(record: LogRecord) -> None:
        match record.kind:
            case LogKind.LOG:
                report.log(record.source, record.text)
            case LogKind.PROGRESS if record.progress is not None:
                report.progress(record.progress)
            case LogKind.PUSH:
                report.push(record.source, record.done, record.total)
            case _:
                report.note(record_line(record))

    return show


Line = tuple[str, bool]  # (text, verbatim: a command or a path, printed whole on a line of its own)


def leftover_lines(left: Leftovers, row: JobRow, out: Path) -> list[Line]:
    """What `deepvm fetch` says of a job that did not complete: how it ended, the metrics it brought, where the
    newest checkpoint lives, and how to go on from it."""
    job, s = row.job_id, left.summary
    ended = (
        f"job {job} {s.status} at step {s.step} of {s.total_steps}" + (f": {s.message}" if s.message else "")
        if s is not None
        else f"job {job} is over (its head no longer knows it)"
    )
    lines: list[Line] = [(ended, False)]
    if left.out_from is not None:
        names = ", ".join(sorted(str(p.relative_to(out)) for p in left.fetched))
        lines.append((f"fetched what trainer 0 wrote ({names}) from {left.out_from} into", False))
        lines.append((f"    {out}", True))
    else:
        figures = (
            f" (the head's figures: loss {s.loss:.4f}, ${s.cost_usd:.4f}; `deepvm jobs {row.cluster}`)"
            if s is not None and s.loss is not None
            else ""
        )
        lines.append((f"no metrics.json on any node: trainer 0 writes it when a launch ends cleanly{figures}", False))
    cancelled = s is not None and s.status is JobStatus.CANCELLED
    if left.checkpoint is None:
        lines.append(
            (
                "no complete checkpoint on any node's disk (levels without l2 keep checkpoints in the "
                "holders' memory, gone with the job)",
                False,
            )
        )
    else:
        c = left.checkpoint
        lines.append(
            (
                f"newest checkpoint: step {c.step}, on {c.node}, deleted with the cluster "
                f"(`deepvm down {row.cluster}`):",
                False,
            )
        )
        lines.append((f"    ~/{c.path}", True))
    if left.checkpoint is not None and not cancelled:
        lines.append(("resume from it (its controller then runs on this machine):", False))
        lines.append((f"    deepvm train {row.spec_path} --cluster {row.cluster} --controller local --resume", True))
    elif cancelled:
        lines.append(
            ("a cancelled job is not resumed (`deepvm cancel` is final); to start it again from step 0:", False)
        )
        lines.append((f"    deepvm train {row.spec_path} --cluster {row.cluster}", True))
    return lines
