"""What a framework adapter inside a launched script (run.calls_step: false) says to deepvm, and hears from it.

The script is a child process of its trainer rank (training.node.launched), its stdout the rank's: an adapter
reports by printing deepvm's event lines (training.shared.events), which mpirun tags with the rank and the
controller reads as it reads every rank's, so progress, `deepvm watch` and the lost steps count a framework's
steps as they count ctx.step()'s. Trainer 0 speaks for the run, as in every other kind of job.

deepvm tells the script to stop by a signal (DEEPVM_STOP_SIGNAL, the job's run.stop_signal): StopFlag notes it,
and the adapter saves the framework's own checkpoint at the step boundary that follows and ends training,
so that the kept files (training.node.keptfiles) hold that very step and the relaunch loses none.

Light on purpose: no torch, no MPI, nothing of the framework (each adapter imports its own).
"""

from __future__ import annotations

import json
import math
import os
import signal
import time
from collections.abc import Mapping
from fnmatch import fnmatchcase
from pathlib import Path, PurePosixPath

from training.shared.events import Resumed, Step, emit

DEFAULT_LOG_EVERY = 10


def kept(path: Path, environ: Mapping[str, str] | None = None) -> bool:
    """Whether deepvm keeps a file the script writes at `path`: under $DEEPVM_CHECKPOINT_DIR, or matched by one of
    the job's checkpoint.files (DEEPVM_KEPT_FILES, relative to the working directory) as training.node.keptfiles
    matches them (pathlib's glob: `*` within a name, `**` any depth; a matched directory keeps all below it).
    The adapters warn when the framework's checkpoints would not be."""
    env = os.environ if environ is None else environ
    place = path.resolve()
    if "DEEPVM_CHECKPOINT_DIR" in env and place.is_relative_to(Path(env["DEEPVM_CHECKPOINT_DIR"]).resolve()):
        return True
    cwd = Path.cwd().resolve()
    if not place.is_relative_to(cwd):
        return False
    parts = place.relative_to(cwd).parts
    patterns: list[str] = json.loads(env.get("DEEPVM_KEPT_FILES", "[]"))
    return any(_prefix_matches(parts, PurePosixPath(p).parts) for p in patterns)


def _prefix_matches(parts: tuple[str, ...], pattern: tuple[str, ...]) -> bool:
    """Whether the first names of `parts` match all of `pattern`, a glob's names."""
    if not pattern:
        return True
    if not parts:
        return False
    if pattern[0] == "**":
        return _prefix_matches(parts, pattern[1:]) or _prefix_matches(parts[1:], pattern)
    return fnmatchcase(parts[0], pattern[0]) and _prefix_matches(parts[1:], pattern[1:])


def under_deepvm(environ: Mapping[str, str] | None = None) -> bool:
    """Whether this process is a script deepvm launched (outside, an adapter does nothing: the script runs as
    it would without it)."""
    return "DEEPVM_CHECKPOINT_DIR" in (os.environ if environ is None else environ)


class StopFlag:
    """Set when deepvm's stop signal arrives; the training loop reads it at each step's end."""

    def __init__(self) -> None:
        self.asked = False
        self.signal = getattr(signal, os.environ.get("DEEPVM_STOP_SIGNAL", "SIGTERM"))

    def install(self) -> StopFlag:
        """Take the stop signal over (from the main thread, where Python lets a handler be set)."""
        signal.signal(self.signal, self._ask)
        return self

    def _ask(self, _signum: int, _frame: object) -> None:
        self.asked = True


class StepReporter:
    """A framework's steps as deepvm's events, from trainer 0 only: Resumed once, Step every log_every."""

    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        env = os.environ if environ is None else environ
        self.rank = int(env.get("RANK", "0"))
        self.world_size = int(env.get("WORLD_SIZE", "1"))
        self.log_every = int(env.get("DEEPVM_LOG_EVERY", DEFAULT_LOG_EVERY))
        self._window_samples, self._window_start = 0, time.perf_counter()

    def resumed(self, step: int, total_steps: int) -> None:
        if self.rank == 0:
            emit(Resumed(rank=0, step=step, total_steps=total_steps))
        self._window_start = time.perf_counter()

    def step(
        self, step: int, loss: float | None, *, samples: int = 0, epoch: int | None = None, last: bool = False
    ) -> None:
        """Step `step` trained (loss: this rank's, None when the framework has not computed one); reported every
        log_every steps, and at the last one (a stop, the end)."""
        self._window_samples += samples
        if self.rank != 0 or not (last or step % self.log_every == 0):
            return
        now = time.perf_counter()
        rate = self._window_samples * self.world_size / max(now - self._window_start, 1e-9)
        value = float("nan") if loss is None or not math.isfinite(loss) else round(loss, 6)
        emit(
            Step(
                rank=0,
                step=step,
                epoch=epoch,
                loss=value,
                global_loss=value,
                samples_per_s=round(rate, 2),
                synthetic=False,
            )
        )
        self._window_samples, self._window_start = 0, now
