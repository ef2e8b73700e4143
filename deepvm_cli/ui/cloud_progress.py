"""Rendering a provisioning Reporter: steps as lines on stderr, counts as one rich progress bar each.

Shared by `up`, `down` and `sandbox` so that every long wait looks the same; on a non-terminal stderr rich
falls back to plain lines.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

from deepvm_cli.ui import console
from provisioning.cloud.progress import Reporter


@contextmanager
def progress_reporter(quiet: bool = False) -> Iterator[Reporter]:
    """A Reporter drawing on stderr (nothing at all when quiet, e.g. with --json)."""
    if quiet:
        yield Reporter()
        return
    bars = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console.err,
        transient=False,
    )
    tasks: dict[str, TaskID] = {}

    def count(label: str, done: int, total: int) -> None:
        if not tasks:
            bars.start()  # only now: a command that never counts draws no (empty) live display
        if label not in tasks:
            tasks[label] = bars.add_task(label, total=total)
        bars.update(tasks[label], completed=done, total=total)

    try:
        yield Reporter(step=console.err.print, count=count)
    finally:
        if tasks:
            bars.stop()
