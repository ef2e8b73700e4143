"""Starting and stopping the sandbox's background processes by pid, never by name."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def spawn_daemon(argv: list[str], log_path: Path, env: dict[str, str] | None = None) -> int:
    """Start a process that outlives this one (own session, no terminal) and return its pid."""
    full_env = dict(os.environ if env is None else env)
    full_env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), full_env.get("PYTHONPATH", "")]))
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            env=full_env,
            start_new_session=True,
            close_fds=True,
        )
    return proc.pid


def python_module(module: str, *args: str) -> list[str]:
    return [sys.executable, "-m", module, *args]


def pid_alive(pid: int | None) -> bool:
    """True if the process exists and is not a zombie."""
    if not pid:
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(p) for p in f.read().split()]
    except OSError:
        return []


def kill_and_wait(pids: list[int], timeout_s: float = 10.0, sig: int = signal.SIGKILL) -> list[int]:
    """Signal the processes and wait until they are gone; return those still alive."""
    for pid in pids:
        with contextlib.suppress(OSError):  # already gone
            os.kill(pid, sig)
    deadline = time.monotonic() + timeout_s
    while True:
        alive = [p for p in pids if pid_alive(p)]
        if not alive or time.monotonic() > deadline:
            return alive
        _reap()
        time.sleep(0.05)


def _reap() -> None:
    """Collect exited children of this process so they do not linger as zombies."""
    try:
        while os.waitpid(-1, os.WNOHANG)[0] > 0:
            pass
    except ChildProcessError:
        pass
