"""A failed attempt's own cause, as a person reads it: which rank failed, its last lines, mpirun's exit code.

Pure: it reads the attempt's output lines (launcher.RankLine) and decides nothing. An attempt that fails
prints the failing rank's traceback or `deepvm rank: ...` line on stderr, then Open MPI's MPI_ABORT
banner (training/shared/mpinotes.py), whose first line names the rank that aborted first; the other ranks
may print errors of their own after they were killed. So the cause is that rank's stderr (the first rank
that wrote to stderr when no banner names one), its last MAX_LINES lines (a traceback's end), and
mpirun's own lines only when no rank wrote a word (mpirun could not start the job at all).

For the controller's retry rule (issue 23 point 2, training.control.attempts): two failures that say the same
(`same_as`: the same last lines, the same exit code) with no progress between them are the same failure, and
its `lines()` are what the user sees instead of the banner; `given_up()` is the job's last line when it is
not retried, the cause first. Which rank it was does not count: when every rank fails alike (a script that
exits at once), which of them reaches MPI_Abort first is a race, so the banner names one or another.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from training.control.launcher import RankLine
from training.shared.mpinotes import LauncherNotes, aborted_rank

MAX_LINES = 5
CAUSE_CHARS = 120  # the cause in the job's last line; its whole lines were shown with the attempt
_RANK_SAYS = "deepvm rank: "  # how deepvm's rank (training/node/rank.py) prefixes the error it ended with


@dataclass(frozen=True)
class ScriptError:
    rank: int | None  # the rank that failed (None: mpirun itself, no rank wrote anything)
    last_lines: tuple[str, ...]  # its last lines of stderr, blank ones left out, at most MAX_LINES
    returncode: int  # mpirun's exit code
    hung: bool = False  # the stall watch killed it: `last_lines` is the stall's cause (training/control/stall.py)

    @classmethod
    def of_hang(cls, cause: str, returncode: int) -> ScriptError:
        """An attempt the stall watch killed: what the ranks wrote says nothing of a hang; its cause does."""
        return cls(None, (cause,), returncode, hung=True)

    def who(self, node: str | None = None) -> str:
        """`rank 1 on trainer-5f5c0279` (`node`: the rank's node, when known), `mpirun`, or `killed as hung`."""
        if self.hung:
            return "killed as hung"
        return "mpirun" if self.rank is None else f"rank {self.rank}" + (f" on {node}" if node else "")

    def lines(self, node: str | None = None) -> list[str]:
        """A few readable lines: who failed and how, then what it wrote."""
        head = f"{self.who(node)}" + ("" if self.hung else " failed") + f" (mpirun exit {self.returncode})"
        return [head + (":" if self.last_lines else ", with no error output"), *(f"  {t}" for t in self.last_lines)]

    def same_as(self, other: ScriptError | None) -> bool:
        """Whether `other` is this failure again: the same words and exit code, from whichever rank."""
        return other is not None and (self.last_lines, self.returncode, self.hung) == (
            other.last_lines,
            other.returncode,
            other.hung,
        )

    @property
    def cause(self) -> str:
        """Its last line as the script (or mpirun) said it, without deepvm's rank prefix, within CAUSE_CHARS."""
        if not self.last_lines:
            return "no error output"
        text = self.last_lines[-1].strip().removeprefix(_RANK_SAYS)
        return text if len(text) <= CAUSE_CHARS else text[: CAUSE_CHARS - 1] + "…"

    def given_up(self, node: str | None, attempts: int, repeated: bool) -> str:
        """The job's last line when it is not retried (training.control.attempts): the cause, who, why it ends."""
        why = (
            f"the same failure in {attempts} attempts in a row, without a step: not retried"
            if repeated
            else f"{attempts} attempts in a row failed without a step: giving up"
        )
        return f"{self.cause} ({self.who(node)}, mpirun exit {self.returncode}): {why}"


def script_error(output: Sequence[RankLine], returncode: int) -> ScriptError:
    """The cause of a failed attempt from its output lines, in the order they were read."""
    named = next((rank for line in output if line.rank is None and (rank := aborted_rank(line.text)) is not None), None)
    writers = [line.rank for line in output if line.rank is not None and line.stream == "stderr" and line.text.strip()]
    rank = named if named is not None else (writers[0] if writers else None)
    if rank is not None:
        said = [line.text.rstrip() for line in output if line.rank == rank and line.stream == "stderr"]
    else:  # no rank wrote: mpirun's own words, without the banner
        notes = LauncherNotes()
        said = [kept.rstrip() for line in output if line.rank is None for kept in notes.keep(line.text)]
        said += notes.flush()
    return ScriptError(rank, tuple([text for text in said if text.strip()][-MAX_LINES:]), returncode)
