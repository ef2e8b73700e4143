"""How a job's events reach the screen: plain lines on stderr (no terminal, or --json), or rich progress
bars (pushes, steps) with the controller's notes and the ranks' own output printed above them. `train`
and `profile` both report through these."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from rich.console import RenderableType
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn
from rich.text import Text

from deepvm_cli.render.job import Eta, describe_progress, progress_line, screened
from deepvm_cli.ui import console
from training.shared.progress import JobReporter
from training.shared.progress import Progress as JobProgress


@contextmanager
def plain_reporter() -> Iterator[JobReporter]:
    """A job's events as plain lines on stderr (no terminal there, or --json)."""
    pushed: set[str] = set()
    eta = Eta()

    def push(host: str, done: int, total: int) -> None:
        if done == total and host not in pushed:
            pushed.add(host)
            console.plain(f"pushed {total:,} bytes to {host}")

    yield screened(
        JobReporter(
            note=console.plain,
            log=lambda prefix, text: console.plain(f"[{prefix}] {text}"),
            progress=lambda p: console.plain(progress_line(p, eta.update(p.step, p.total_steps))),
            push=push,
        )
    )


class _Bars(Progress):
    """rich's progress bars (pushes, steps) and, below them, one line with the newest step's details, fitted
    to the terminal's width by render.job.describe_progress (fields dropped, never wrapped: a wrapped line
    would also throw off the redraw)."""

    details = ""

    def get_renderables(self) -> Iterator[RenderableType]:
        yield self.make_tasks_table(self.tasks)
        if self.details:
            yield Text(self.details, no_wrap=True, overflow="ellipsis")


@contextmanager
def live_reporter() -> Iterator[JobReporter]:
    """A job's events above rich progress bars (pushes, steps) on a terminal."""
    bars = _Bars(
        TextColumn("{task.description}"),
        BarColumn(bar_width=16),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.fields[eta]}"),
        console=console.err,
    )
    eta = Eta()
    tasks: dict[str, TaskID] = {}

    def task(key: str, total: int) -> TaskID:
        if key not in tasks:
            tasks[key] = bars.add_task(key, total=total, eta="")
        return tasks[key]

    def push(host: str, done: int, total: int) -> None:
        bars.update(task(f"push {host}", total), completed=done, total=total)

    def progress(p: JobProgress) -> None:
        bars.details = "  " + describe_progress(p, width=bars.console.width - 2)
        if p.script is not None:  # a launched script without steps: no bar of 0/0, its details say what is known
            return
        left = eta.update(p.step, p.total_steps)
        bars.update(
            task("train", p.total_steps), completed=p.step, total=p.total_steps, eta=f"eta {left}" if left else ""
        )

    with bars:
        yield screened(
            JobReporter(
                note=lambda text: bars.console.print(text, markup=False, highlight=False),
                log=lambda prefix, text: bars.console.print(f"[{prefix}] {text}", markup=False, highlight=False),
                progress=progress,
                push=push,
            )
        )
