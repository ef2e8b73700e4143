"""What a launched script that reports no steps (run.calls_step: false, no framework adapter) shows as progress.

deepvm's progress is a step of a total; such a script takes none of deepvm's steps, so "step 0/0" says nothing
true about it. What deepvm does know goes out instead (Progress.script, training.shared.progress.ScriptProgress):
how long the script has run in this launch, trainer 0's newest output line in the script's own words, and the
newest of the files deepvm keeps for it with when it was written. A record goes out when one of them changed,
and at least every REFRESH_S while the script runs, so that the running time and the file's age on a screen move.
"""

from __future__ import annotations

from provisioning.core.inputfile import size_text
from training.shared.events import Kept, KeptHow
from training.shared.jobspec import JobSpec
from training.shared.progress import ScriptProgress
from training.shared.timespan import duration
from training.shared.wording import count

REFRESH_S = 10.0


class ScriptView:
    """The controller's view of the running launched script, between its events (see the module docstring)."""

    def __init__(self) -> None:
        self.started_at: float | None = None  # time.monotonic() trainer 0 started this launch's script
        self.kept: Kept | None = None  # the newest report of its kept files (kept, flushed, put back): any launch's
        self._said: tuple[str, str, int] | None = None  # (line, newest file, version) of the last record
        self._said_at = 0.0

    def launched(self) -> None:
        """A new mpirun: its script has not started yet."""
        self.started_at = None

    def started(self, at: float) -> None:
        self.started_at = at

    def kept_files(self, event: Kept) -> None:
        self.kept = event

    def due(self, last_line: str, now: float, wall: float) -> ScriptProgress | None:
        """The script's progress at `now` (time.monotonic(); `wall`, time.time(), for the file's age), when a
        record is due; None: none is."""
        if self.started_at is None:
            return None
        kept = self.kept if self.kept is not None and self.kept.newest else None  # none kept yet: nothing is safe
        said = (last_line, kept.newest if kept else "", kept.version if kept else -1)
        if said == self._said and now - self._said_at < REFRESH_S:
            return None
        self._said, self._said_at = said, now
        return ScriptProgress(
            running_s=round(now - self.started_at, 1),
            last_line=last_line,
            kept_files=kept.files if kept else 0,
            newest=kept.newest if kept else "",
            newest_age_s=round(max(0.0, wall - kept.written_at), 1) if kept else 0.0,
        )


def kept_note(event: Kept, wall: float) -> str | None:
    """The job report's line for a launched script's kept files (`wall`: time.time(), for the age of the put back
    files); None for a keep while it runs, which the progress line shows."""
    what = f"{count(event.files, 'kept file')} ({size_text(event.bytes)})"
    if event.how is KeptHow.RESTORED:
        age = max(0.0, wall - event.written_at)
        return (
            f"put back {what} from {event.level} in {event.seconds:.2f}s: the newest, {event.newest}, written "
            f"{duration(age)} ago"
        )
    if event.how is KeptHow.FLUSHED:
        return f"{what} safe at {event.level} in {event.seconds:.2f}s"
    return None


def at_notice(spec: JobSpec) -> str:
    """What the trainers do at a notice, in words: a ctx.step job checkpoints; a launched script's is its own
    checkpoint, deepvm only keeps its files (training.node.launched)."""
    if spec.calls_step or spec.run is None:
        return "checkpointing"
    return (
        f"stopping the script ({spec.run.stop_signal}) and keeping its files (checkpoint.files, $DEEPVM_CHECKPOINT_DIR)"
    )
