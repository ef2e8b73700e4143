"""What runs on this machine, for the sandbox e2e tests: processes by pid, and which of them run on a
sandbox host (below its namespace init) of one DEEPVM_HOME."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

HOST_INIT = "provisioning.sandbox.hostinit"  # the command line of a sandbox host's PID 1


def processes() -> dict[int, str]:
    """Command lines of live processes, by pid."""
    found = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            found[int(pid)] = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
    return found


def node_processes(home: str) -> dict[int, str]:
    """Processes on the sandbox hosts of DEEPVM_HOME `home` (below any of their inits), by pid."""
    found = processes()
    parents: dict[int, int] = {}
    for pid in found:
        try:
            parents[pid] = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
    hosts = {pid for pid, line in found.items() if HOST_INIT in line and home in line}

    def on_node(pid: int) -> bool:
        seen = set()
        while pid in parents and pid not in seen:
            if pid in hosts:
                return True
            seen.add(pid)
            pid = parents[pid]
        return False

    return {pid: line for pid, line in found.items() if on_node(pid)}


def pid_namespace(pid: int) -> str:
    return os.readlink(f"/proc/{pid}/ns/pid")


def host_namespaces(instance_id: str) -> set[str]:
    """The PID namespace of a sandbox host: its init's (the unshare around it lives in ours)."""
    inits = [pid for pid, line in processes().items() if HOST_INIT in line and f"/hosts/{instance_id}" in line]
    found = set()
    for pid in inits:
        with contextlib.suppress(FileNotFoundError, ProcessLookupError):  # it ended since it was listed
            found.add(pid_namespace(pid))
    return found - {pid_namespace(os.getpid())}
