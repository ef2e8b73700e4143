"""Linux's prctl for the processes deepvm leaves running on a node: what signal they get when the process that
started them dies, and who reaps the orphans below them. One place for the ctypes call and its constants,
which mpirun's guard and signal relay on the head and the warm server's ranks on every node use."""

from __future__ import annotations

import ctypes

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36


def prctl(option: int, value: int) -> None:
    ctypes.CDLL(None, use_errno=True).prctl(option, value)


def die_with_parent(sig: int) -> None:
    """`sig` to this process when its parent dies. Armed only from now on: a caller that must not outlive its
    parent checks os.getppid() against the parent it expects right after."""
    prctl(PR_SET_PDEATHSIG, sig)


def become_subreaper() -> None:
    """Orphans below this process are re-parented to it rather than to init, so it can find and reap them."""
    prctl(PR_SET_CHILD_SUBREAPER, 1)
