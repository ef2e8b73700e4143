"""`deepvm train`'s progress as a person sees it: an ETA, and at 80 columns the step counter is never cut."""

from __future__ import annotations

import io
import re

import pytest
from rich.console import Console

from deepvm_cli.render.job import Eta
from deepvm_cli.ui import console, reporters
from training.shared.progress import Progress


def _progress(step: int) -> Progress:
    return Progress(step=step, total_steps=420, epoch=3, loss=1.2345, samples_per_s=12345.6, world_size=17,
                    cost_usd=12.3456, synthetic=False)


def test_eta_follows_the_recent_rate_and_restarts_after_a_resume():
    now = [0.0]
    eta = Eta(clock=lambda: now[0])
    assert eta.update(0, 420) == ""  # one report says nothing about speed
    now[0] = 10.0
    assert eta.update(10, 420) == "6m50s"  # 1 step/s, 410 left
    now[0] = 20.0
    assert eta.update(30, 420) == "4m20s"  # 30 steps in 20 s, 390 left
    now[0] = 30.0
    assert eta.update(20, 420) == ""  # resumed from step 20: the old rate no longer holds
    now[0] = 40.0
    assert eta.update(40, 420) == "3m10s"  # 2 steps/s since the resume
    now[0] = 40.0 + 2 * 3600
    assert eta.update(41, 420) == "758h00m"  # 1 step in two hours: hours and minutes


@pytest.mark.parametrize("width", [80, 120])
def test_live_progress_keeps_counter_bar_and_eta_at_any_width(monkeypatch, width):
    screen = Console(file=io.StringIO(), width=width, force_terminal=True, color_system=None)
    monkeypatch.setattr(console, "err", screen)
    clock = iter(range(0, 1000, 5))
    monkeypatch.setattr("deepvm_cli.render.job.time.monotonic", lambda: float(next(clock)))
    with reporters.live_reporter() as report:
        for step in (100, 110, 120):
            report.progress(_progress(step))
    text = screen.file.getvalue()
    assert "120/420" in text and "eta " in text and "━" in text
    assert "$12.3456" in text and "12,345.6" in text  # details wrap below, never cut
    assert "…" not in text


@pytest.mark.parametrize("live", [False, True])
def test_mpirun_forwarding_signals_stays_in_the_log_and_off_the_screen(monkeypatch, capsys, live):
    """What a managed job's head logged reaches the screen through the train reporter; Open MPI's note on
    forwarding deepvm's stop signal does not, and `deepvm logs` (the log as recorded) still shows it."""
    from deepvm_cli.render.job import record_line, replay
    from training.shared.records import LogRecord

    screen = Console(file=io.StringIO(), width=120, force_terminal=True, color_system=None)
    monkeypatch.setattr(console, "err", screen)
    chatter = LogRecord("log", 0.0, text="mpirun: Forwarding signal 10 to job", source="mpirun")
    records = [chatter, LogRecord("log", 0.0, text="loss is fine", source="node-1 r0"),
               LogRecord("log", 0.0, text="mpirun: Forwarding signal 10 to job", source="node-1 r0"),  # a rank's own
               LogRecord("log", 0.0, text="mpirun noticed that process rank 1 exited on signal 9", source="mpirun")]
    with reporters.live_reporter() if live else reporters.plain_reporter() as report:
        for record in records:
            replay(report)(record)
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", screen.file.getvalue() + capsys.readouterr().err)  # cursor codes
    assert [line.strip() for line in text.splitlines() if line.strip()] == [
        "[node-1 r0] loss is fine", "[node-1 r0] mpirun: Forwarding signal 10 to job",
        "[mpirun] mpirun noticed that process rank 1 exited on signal 9"]
    assert record_line(chatter) == "[mpirun] mpirun: Forwarding signal 10 to job"
