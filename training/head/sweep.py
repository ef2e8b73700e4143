"""What mpirun left behind on the head, found and ended: the processes below this one, from /proc.

mpirun_guard and the signal relay between it and mpirun are each a subreaper (training.shared.prctl), so a rank
whose mpirun ended stays below them rather than below init, and `sweep` ends it. Both sweep once mpirun has exited:
the guard for whatever mpirun left however it ended; the relay for when the guard is gone (an OOM kill, a SIGKILL)
and mpirun, told to stop by the relay's one SIGTERM, exits before its daemon has signalled its local ranks
(Open MPI 4.1.4 does so about once in twenty stops under load: the ranks ran on, re-parented to init).
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

REAP_S = 5.0  # killed processes are gone within milliseconds; this bounds a pathological wait


def descendants() -> list[int]:
    """The live (not zombie) processes below this one."""
    children: dict[int, list[int]] = {}
    zombies = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # gone meanwhile
        children.setdefault(int(fields[1]), []).append(int(entry))
        if fields[0] == "Z":
            zombies.add(int(entry))
    found, todo = [], [os.getpid()]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return [pid for pid in found if pid not in zombies]


def kill(pids: list[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def reap() -> None:
    """Collect the exit status of every child that has ended (orphans included: this is their subreaper)."""
    with contextlib.suppress(ChildProcessError):
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass


def sweep() -> None:
    """SIGKILL every process below this one and reap them, for at most REAP_S."""
    deadline = time.monotonic() + REAP_S
    while (left := descendants()) and time.monotonic() < deadline:
        kill(left)
        time.sleep(0.02)
        reap()
