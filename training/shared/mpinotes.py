"""Open MPI's own notes in a job's output, told apart from what the job's ranks wrote.

When a rank fails, deepvm's rank calls MPI_Abort so that no peer waits for it, and mpirun then prints its
banner (between two rules of dashes) and, for the other ranks, help-aggregation notes:

    --------------------------------------------------------------------------
    MPI_ABORT was invoked on rank 1 in communicator MPI_COMM_WORLD
    with errorcode 1.

    NOTE: invoking MPI_ABORT causes Open MPI to kill all MPI processes.
    You may or may not see output from other processes, depending on
    exactly when Open MPI kills them.
    --------------------------------------------------------------------------
    [vm:01759] 1 more process has sent help message help-mpi-api.txt / mpi-abort
    [vm:01759] Set MCA parameter "orte_base_help_aggregate" to 0 to see all help / error messages

Ten lines that say nothing the rank's own error does not, and that bury it; they stay in the job's log.
Other blocks between rules (mpirun cannot launch, a daemon is unreachable) are real errors and pass.
"""

from __future__ import annotations

import re

_RULE = re.compile(r"^-{20,}\s*$")
_ABORT = re.compile(r"^MPI_ABORT was invoked on rank (\d+) in communicator")
_AGGREGATED = re.compile(r"^\[[^\]]*\] \d+ more process(es)? ha(s|ve) sent help message help-mpi-api\.txt / mpi-abort")
_AGGREGATE_HINT = re.compile(r'^\[[^\]]*\] Set MCA parameter "orte_base_help_aggregate" to 0')
_FORWARDING = re.compile(r"^(mpirun|prterun): Forwarding signal \d+ to job\s*$")  # deepvm's own stop signal


def aborted_rank(text: str) -> int | None:
    """The rank a banner's first line says called MPI_Abort (the rank that failed first), else None."""
    match = _ABORT.match(text)
    return int(match.group(1)) if match else None


class LauncherNotes:
    """Reads mpirun's own lines one at a time and hands back those a person needs: everything but the
    MPI_ABORT banner, its aggregation notes and the note on forwarding deepvm's stop signal. A rule is
    held back until the next line says whether a banner starts."""

    def __init__(self) -> None:
        self._held: str | None = None  # a rule that may open a banner
        self._in_banner = False
        self._after_aggregate = False

    def keep(self, text: str) -> list[str]:
        """The lines to show now (none, this one, or a held rule and this one)."""
        if self._in_banner:
            self._in_banner = not _RULE.match(text)
            return []
        held, self._held = self._held, None
        if held is not None and _ABORT.match(text):
            self._in_banner = True
            return []
        if _RULE.match(text):
            self._held = text
            return [held] if held is not None else []
        quiet = (
            _FORWARDING.match(text)
            or _AGGREGATED.match(text)
            or (self._after_aggregate and _AGGREGATE_HINT.match(text))
        )
        self._after_aggregate = bool(_AGGREGATED.match(text))
        return ([held] if held is not None else []) + ([] if quiet else [text])

    def flush(self) -> list[str]:
        """At the end of the output: a rule still held back (it opened no banner)."""
        held, self._held = self._held, None
        return [held] if held is not None and not self._in_banner else []
