"""Issue 23 point 2, the parts outside the controller: a failed attempt's own cause found in its output
(training/control/scripterror.py), and Open MPI's MPI_ABORT banner kept off the screen
(training/shared/mpinotes.py through deepvm_cli.render.job.screened). The lines are those a sandbox run
of a script that exits with 3 printed (Open MPI 4)."""

from __future__ import annotations

import io
import re

import pytest
from rich.console import Console

from deepvm_cli.ui import console, reporters
from training.control.launcher import RankLine
from training.control.scripterror import ScriptError, script_error
from training.shared.mpinotes import LauncherNotes, aborted_rank
from training.shared.progress import LAUNCHER

RULE = "-" * 74
BANNER = [
    RULE,
    "MPI_ABORT was invoked on rank 1 in communicator MPI_COMM_WORLD",
    "with errorcode 3.",
    "",
    "NOTE: invoking MPI_ABORT causes Open MPI to kill all MPI processes.",
    "You may or may not see output from other processes, depending on",
    "exactly when Open MPI kills them.",
    RULE,
]
AGGREGATE = [
    "[vm:01759] 1 more process has sent help message help-mpi-api.txt / mpi-abort",
    '[vm:01759] Set MCA parameter "orte_base_help_aggregate" to 0 to see all help / error messages',
]
TRACEBACK = [
    "Traceback (most recent call last):",
    '  File "train.py", line 9, in <module>',
    "    load(batch)",
    '  File "train.py", line 4, in load',
    "    raise ValueError('bad batch 7')",
    "ValueError: bad batch 7",
]


def _out(rank: int | None, *texts: str, stream: str = "stderr") -> list[RankLine]:
    return [RankLine(1, rank, stream, text, 0.0) for text in texts]


def test_the_failing_ranks_last_lines_not_the_banner():
    output = (
        _out(0, "step 1", stream="stdout")
        + _out(1, *TRACEBACK)
        + _out(None, *BANNER)
        + _out(0, "deepvm rank: killed while waiting for rank 1")
        + _out(None, *AGGREGATE)
    )
    error = script_error(output, 1)
    assert error == ScriptError(1, tuple(TRACEBACK[-5:]), 1)
    assert error.lines("trainer-5f5c0279") == [
        "rank 1 on trainer-5f5c0279 failed (mpirun exit 1):",
        *(f"  {text}" for text in TRACEBACK[-5:]),
    ]
    assert script_error(output, 1) == error  # the same failure twice compares equal (the retry rule's test)


def test_without_a_banner_the_first_rank_that_wrote_and_without_ranks_mpirun():
    assert script_error(_out(2, "deepvm rank: train.py exited with 3") + _out(0, "later"), 1) == ScriptError(
        2, ("deepvm rank: train.py exited with 3",), 1
    )
    launch = _out(
        None, RULE, "mpirun was unable to launch the specified application as it could not find", "an executable:", RULE
    )
    assert script_error(launch, 134).lines() == [
        "mpirun failed (mpirun exit 134):",
        f"  {RULE}",
        "  mpirun was unable to launch the specified application as it could not find",
        "  an executable:",
        f"  {RULE}",
    ]
    assert script_error([], 1).lines() == ["mpirun failed (mpirun exit 1), with no error output"]


def test_launcher_notes_drop_the_abort_banner_only():
    notes = LauncherNotes()
    kept = [
        k
        for text in [
            "starting",
            *BANNER,
            *AGGREGATE,
            RULE,
            "ORTE was unable to start a daemon",
            RULE,
            "mpirun: Forwarding signal 10 to job",
            "bye",
        ]
        for k in notes.keep(text)
    ]
    assert kept == ["starting", RULE, "ORTE was unable to start a daemon", RULE, "bye"]
    assert aborted_rank(BANNER[1]) == 1 and aborted_rank("MPI_ABORT was invoked") is None


@pytest.mark.parametrize("live", [False, True])
def test_the_banner_stays_off_the_screen(monkeypatch, capsys, live):
    screen = Console(file=io.StringIO(), width=120, force_terminal=True, color_system=None)
    monkeypatch.setattr(console, "err", screen)
    with reporters.live_reporter() if live else reporters.plain_reporter() as report:
        for text in TRACEBACK[-1:]:
            report.log("trainer-5f5c0279 r1", text)
        for text in BANNER + AGGREGATE:
            report.log(LAUNCHER, text)
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", screen.file.getvalue() + capsys.readouterr().err)
    shown = [line.strip() for line in text.splitlines() if line.strip()]
    assert shown == ["[trainer-5f5c0279 r1] ValueError: bad batch 7"]
