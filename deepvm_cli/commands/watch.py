"""`deepvm watch [JOB]`: a managed job as it happens, on one screen that refreshes from its head.

Drawn with rich's Live, not Textual: the view only shows (Ctrl-C is the one key it needs), rich is
already deepvm's renderer and starts in milliseconds, and Textual would add an application framework (and
its dependencies) for nothing the view uses. rich is imported here, inside the command, so `deepvm plan`
loads none of it. Without a terminal (a pipe, a log file, CI) the view is a plain line every --every
seconds, and each new event of the timeline on a line of its own.

Ctrl-C closes the SSH session to the head; its watch process ends with its stdin (training/head/watch_feed.py),
so nothing of the watch stays behind on either side. The job goes on.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import typer

from deepvm_cli.ui import console
from deepvm_cli.ui.flags import positive

if TYPE_CHECKING:  # imported inside the command: `deepvm plan` loads none of the watch
    from deepvm_cli.render.watch_model import WatchModel
    from training.client.managed import Head
    from training.client.outputs import OutputsPlace
    from training.client.watching import HeadStream

MAX_EVERY_S = 3600.0
_DRAW_EVERY_S = 0.5  # a terminal redraws at most this often, however fast records come


def watch_command(
    job: str | None = typer.Argument(None, help="Job id (default: the newest job submitted from this machine)."),
    every: float = typer.Option(
        2.0,
        "--every",
        callback=positive(MAX_EVERY_S),
        help="Seconds between refreshes of the nodes and money (and between plain lines).",
    ),
) -> None:
    """Watch a managed job: its loss and metrics, step and ETA, nodes, timeline of notices and relaunches,
    and money ($/h now, so far, projected, what on-demand would have cost). Ctrl-C leaves; the job goes on."""
    from deepvm_cli.render.watch_model import WatchModel
    from training.client.managed import managed_job
    from training.client.outputs import job_outputs
    from training.client.watching import HeadStream, finished_run

    row = managed_job(job or _newest_job())
    model = WatchModel(row.job_id)
    place = job_outputs(row)
    head = _head(place)
    if head is None:  # the head has it no more: the finished run, from S3 or the copy `deepvm fetch` brought
        records, snapshot = finished_run(place)
        for record in records:
            model.add(record)
        model.add(snapshot)
        _show_once(model)
        return
    stream = HeadStream(head, row.job_id, every)
    try:
        if console.out.is_terminal:
            _live(stream, model)
        else:
            _plain(stream, model, every)
    except KeyboardInterrupt:
        pass
    finally:
        stream.close()
    if console.out.is_terminal:
        _show_once(model)  # the screen's last state stays in the terminal once its full-screen view is gone


def _head(place: OutputsPlace) -> Head | None:
    """The job's head, when its outputs and log are there and it answers; None: they are elsewhere now."""
    from provisioning.core.errors import NotFoundError
    from training.client.managed import find_head
    from training.client.outputs import Where

    if place.where is not Where.HEAD:
        return None
    try:
        return find_head(place.row.cluster, place.row.python)
    except NotFoundError:  # its cluster went down since this machine last looked
        return None


def _newest_job() -> str:
    from provisioning.core.errors import NotFoundError
    from training.shared.jobstore import JobStore

    managed = [row for row in JobStore().all() if row.controller != "local"]
    if not managed:
        raise NotFoundError("no managed job was submitted from this machine: `deepvm train JOB.yaml --cluster NAME`")
    return managed[0].job_id


def _live(stream: HeadStream, model: WatchModel) -> None:
    from rich.live import Live

    from deepvm_cli.render.watch_screen import screen

    with Live(console=console.out, screen=True, auto_refresh=False, transient=True) as live:
        drawn = 0.0
        while not _take(stream, model, wait_s=_DRAW_EVERY_S / 2):
            if time.monotonic() - drawn >= _DRAW_EVERY_S:
                width, height = console.out.size
                live.update(screen(model, width, height), refresh=True)
                drawn = time.monotonic()


def _plain(stream: HeadStream, model: WatchModel, every_s: float) -> None:
    from deepvm_cli.render.watch_screen import plain_line, timeline_line

    shown_events, printed = 0, float("-inf")
    while True:
        over = _take(stream, model, wait_s=0.2)
        timeline = model.snapshot.timeline if model.snapshot else ()
        for entry in timeline[shown_events:]:
            console.out.print(timeline_line(entry), markup=False, highlight=False, soft_wrap=True)
        shown_events = len(timeline)
        if over or time.monotonic() - printed >= every_s:
            console.out.print(plain_line(model), markup=False, highlight=False, soft_wrap=True)
            printed = time.monotonic()
        if over:
            return


def _take(stream: HeadStream, model: WatchModel, wait_s: float) -> bool:
    """Fold in what the stream has (waiting up to `wait_s` for the first); True once it has ended."""
    from provisioning.cloud.ssh import TransportError
    from provisioning.core.errors import NotFoundError
    from training.client.watching import StreamEnd

    item = stream.next(wait_s)
    while item is not None:
        if isinstance(item, StreamEnd):
            if item.code == 2:
                raise NotFoundError(item.why)
            if item.code != 0:
                raise TransportError(f"watching the job failed: {item.why}")
            return True
        model.add(item)
        item = stream.next(0)
    return False


def _show_once(model: WatchModel) -> None:
    from deepvm_cli.render.watch_screen import plain_line, screen, timeline_line

    if console.out.is_terminal:
        width, height = console.out.size
        console.out.print(screen(model, width, height))
        return
    for entry in model.snapshot.timeline if model.snapshot else ():
        console.out.print(timeline_line(entry), markup=False, highlight=False, soft_wrap=True)
    console.out.print(plain_line(model), markup=False, highlight=False, soft_wrap=True)


def register(app: typer.Typer) -> None:
    app.command("watch")(watch_command)
