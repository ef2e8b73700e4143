"""`deepvm train`'s progress as a person sees it: an ETA, and at 80 columns the step counter is never cut."""

from __future__ import annotations

import io
import re

import pytest
from rich.console import Console

from deepvm_cli.render.job import Eta, progress_line
from deepvm_cli.render.watch_model import WatchModel
from deepvm_cli.render.watch_screen import job_line
from deepvm_cli.ui import console, reporters
from training.shared.progress import Progress, ScriptProgress
from training.shared.records import LogKind, LogRecord


def _progress(step: int) -> Progress:
    return Progress(
        step=step,
        total_steps=420,
        epoch=3,
        loss=1.2345,
        samples_per_s=12345.6,
        world_size=17,
        cost_usd=12.3456,
        synthetic=False,
    )


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
    records = [
        chatter,
        LogRecord("log", 0.0, text="loss is fine", source="node-1 r0"),
        LogRecord("log", 0.0, text="mpirun: Forwarding signal 10 to job", source="node-1 r0"),  # a rank's own
        LogRecord("log", 0.0, text="mpirun noticed that process rank 1 exited on signal 9", source="mpirun"),
    ]
    with reporters.live_reporter() if live else reporters.plain_reporter() as report:
        for record in records:
            replay(report)(record)
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", screen.file.getvalue() + capsys.readouterr().err)  # cursor codes
    assert [line.strip() for line in text.splitlines() if line.strip()] == [
        "[node-1 r0] loss is fine",
        "[node-1 r0] mpirun: Forwarding signal 10 to job",
        "[mpirun] mpirun noticed that process rank 1 exited on signal 9",
    ]
    assert record_line(chatter) == "[mpirun] mpirun: Forwarding signal 10 to job"


def _script(last_line: str = "Epoch 3 | Batchsize: 32 | Steps: 64", newest: str = "job/snapshot.pt") -> Progress:
    """A launched script's progress (run.calls_step: false, no step reported): no step, loss or rate of its own."""
    return Progress(
        step=0,
        total_steps=0,
        epoch=None,
        loss=float("nan"),
        samples_per_s=0.0,
        world_size=3,
        cost_usd=0.0123,
        synthetic=False,
        script=ScriptProgress(
            running_s=250.0, last_line=last_line, kept_files=2 if newest else 0, newest=newest, newest_age_s=40.0
        ),
    )


def test_a_launched_scripts_progress_says_how_long_it_runs_what_is_kept_and_its_last_line_never_step_0_of_0():
    """Issue 36 finding 7: "step 0/0 · loss nan · 0.0 samples/s" for a script that reports no steps."""
    assert progress_line(_script(), eta="1m00s") == (
        "running 4m10s · kept job/snapshot.pt (+1 more), written 0m40s ago · 3 trainers · $0.0123 · > Epoch 3 | "
        "Batchsize: 32 | Steps: 64"
    )
    assert progress_line(_script(newest=""), width=45) == "running 4m10s · nothing kept yet · $0.0123"  # its line first
    assert progress_line(_script("x" * 80)).endswith(" · > " + "x" * 60 + "...")
    model = WatchModel("job-1")
    model.add(LogRecord.from_json(LogRecord(LogKind.PROGRESS, at=5.0, progress=_script()).to_json()))
    assert model.progress is not None and model.progress.script == _script().script  # through the log's JSON
    assert model.loss_curve == [] and model.eta_s is None
    assert job_line(model).startswith("job-1 · running · running 4m10s · kept job/snapshot.pt")


def test_a_progress_record_of_before_launched_scripts_still_reads():
    old = (
        '{"kind":"progress","at":1.0,"progress":{"step":3,"total_steps":40,"epoch":0,"loss":null,'
        '"samples_per_s":10.0,"world_size":3,"cost_usd":0.5,"synthetic":false}}'
    )
    progress = LogRecord.from_json(old).progress
    assert progress is not None and progress.script is None and progress_line(progress).startswith("step 3/40 · ")


def test_a_launched_scripts_live_progress_has_no_bar_of_0_of_0(monkeypatch):
    screen = Console(file=io.StringIO(), width=100, force_terminal=True, color_system=None)
    monkeypatch.setattr(console, "err", screen)
    with reporters.live_reporter() as report:
        report.progress(_script())
    text = screen.file.getvalue()
    assert "running 4m10s · kept job/snapshot.pt" in text and "0/0" not in text
