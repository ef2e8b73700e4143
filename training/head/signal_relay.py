"""The one process between training.head.mpirun_guard and mpirun: mpirun_guard's death, however often the kernel reports
it, becomes exactly one SIGTERM for mpirun.

Why it exists: PR_SET_PDEATHSIG is tied to the *thread* that started the child. mpirun_guard has several
threads, and when it is killed the kernel hands its children from one dying thread to the next, sending
the death signal at every hand-over. Open MPI's mpirun takes a second SIGTERM as "abort at once" and exits
without stopping its ranks, which then run on with no parent (seen in about one kill in three). This
process has a single thread, so mpirun, its child, gets the death signal once; its own repeated death
signals are folded into one. It forwards SIGUSR1 (the clean stop) and SIGUSR2 (the ranks' stacks), and once
mpirun has exited it ends whatever mpirun left below it (it is their subreaper: training.head.sweep says when
that matters) and exits with mpirun's exit status.

Usage (by mpirun_guard): `python -m training.head.signal_relay -- mpirun ARGS...`
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
from collections.abc import Sequence

from training.head.sweep import sweep
from training.shared.prctl import become_subreaper, die_with_parent

_SIG_IGN = 1  # the C library's value of SIG_IGN


def _mpirun_setup() -> None:
    """In mpirun before exec: SIGTERM when this signal_relay dies (once: it has one thread). SIGPIPE ignored:
    once nobody reads mpirun's output, a write must not kill it halfway through stopping its ranks."""
    die_with_parent(signal.SIGTERM)
    ctypes.CDLL(None, use_errno=True).signal(signal.SIGPIPE, _SIG_IGN)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["--"]:
        args = args[1:]
    if not args:
        print("usage: python -m training.head.signal_relay -- COMMAND [ARGS...]", file=sys.stderr)
        return 2
    child: subprocess.Popen | None = None
    terminating = False

    def on_terminate(signum: int, frame: object) -> None:
        nonlocal terminating
        if not terminating and child is not None:
            child.send_signal(signal.SIGTERM)
        terminating = True

    def forward(signum: int, frame: object) -> None:
        if child is not None:
            child.send_signal(signum)

    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, on_terminate)
    for sig in (signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(sig, forward)
    parent = os.getppid()
    die_with_parent(signal.SIGTERM)
    if os.getppid() != parent:  # mpirun_guard died before the death signal was armed
        return 128 + signal.SIGTERM
    become_subreaper()
    try:
        child = subprocess.Popen(args, preexec_fn=_mpirun_setup)  # single-threaded: safe
    except OSError as exc:
        print(f"signal_relay: cannot start {args[0]}: {exc}", file=sys.stderr)
        return 127
    if terminating:  # a death signal came while mpirun was starting
        child.send_signal(signal.SIGTERM)
    code = child.wait()
    sweep()
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main())
