"""A failed attempt's own cause, as a person reads it: which rank failed, its last lines, mpirun's exit code.

Pure: it reads the attempt's output lines (launcher.RankLine) and decides nothing. An attempt that fails
prints the failing rank's traceback or `deepvm rank: ...` line on stderr, then Open MPI's MPI_ABORT
banner (training/shared/mpinotes.py), whose first line names the rank that aborted first; the other ranks
may print errors of their own after they were killed. So the cause is that rank's stderr (the first rank
that wrote to stderr when no banner names one), its last MAX_LINES lines (a traceback's end), and
mpirun's own lines only when no rank wrote a word (mpirun could not start the job at all).

For the controller's retry rule (issue 23 point 2): two failures with equal `ScriptError`s and no
progress between them are the same failure, and its `lines()` are what the user sees instead of the
banner.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from training.control.launcher import RankLine
from training.shared.mpinotes import LauncherNotes, aborted_rank

MAX_LINES = 5


@dataclass(frozen=True)
class ScriptError:
    rank: int | None  # the rank that failed (None: mpirun itself, no rank wrote anything)
    last_lines: tuple[str, ...]  # its last lines of stderr, blank ones left out, at most MAX_LINES
    returncode: int  # mpirun's exit code

    def lines(self, node: str | None = None) -> list[str]:
        """A few readable lines: who failed and how, then what it wrote."""
        who = "mpirun" if self.rank is None else f"rank {self.rank}" + (f" on {node}" if node else "")
        head = f"{who} failed (mpirun exit {self.returncode})" + (":" if self.last_lines else ", with no error output")
        return [head, *(f"  {text}" for text in self.last_lines)]


def script_error(output: Sequence[RankLine], returncode: int) -> ScriptError:
    """The cause of a failed attempt from its output lines, in the order they were read."""
    named = next((rank for line in output if line.rank is None and (rank := aborted_rank(line.text)) is not None),
                 None)  # fmt: skip
    writers = [line.rank for line in output if line.rank is not None and line.stream == "stderr" and line.text.strip()]
    rank = named if named is not None else (writers[0] if writers else None)
    if rank is not None:
        said = [line.text.rstrip() for line in output if line.rank == rank and line.stream == "stderr"]
    else:  # no rank wrote: mpirun's own words, without the banner
        notes = LauncherNotes()
        said = [kept.rstrip() for line in output if line.rank is None for kept in notes.keep(line.text)]
        said += notes.flush()
    return ScriptError(rank, tuple([text for text in said if text.strip()][-MAX_LINES:]), returncode)
