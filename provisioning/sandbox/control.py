"""The sandbox's control plane: start or reuse its moto server and supervisor, say what runs, stop it all.

Why a moto *server* as a separate daemon (not moto's in-process decorator or ThreadedMotoServer): the EC2
state must outlive each CLI call — `up` in one process, `status`, `interrupt` and `down` in others — and
the supervisor must watch it between calls. Its pid and port live in DEEPVM_HOME/sandbox/sandbox.json.
"""

from __future__ import annotations

import fcntl
import json
import os
import random
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from provisioning.cloud.aws.context import AwsContext
from provisioning.core.atomicfile import write_text_atomic
from provisioning.core.errors import CloudError
from provisioning.core.home import deepvm_home
from provisioning.sandbox.hosts import host_facts, host_pids, host_processes, kill_host
from provisioning.sandbox.procs import kill_and_wait, pid_alive, python_module, spawn_daemon
from provisioning.sandbox.shared import CREDENTIALS

BANNER = "sandbox: local emulation, no AWS charges"
_MOTO_START_S = 30.0


@dataclass
class SandboxInfo:
    """What runs for one sandbox, as recorded in sandbox.json."""

    moto_pid: int = 0
    moto_port: int = 0
    supervisor_pid: int = 0
    second_octet: int = 0  # the VPCs use 127.<second_octet>.0.0/16
    networks: dict[str, dict[str, str]] = field(default_factory=dict)  # region -> {"vpc": id, az: subnet}

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.moto_port}"

    def context(self, region: str) -> AwsContext:
        return AwsContext(region=region, endpoint_url=self.endpoint, credentials=CREDENTIALS)


def sandbox_dir() -> Path:
    path = deepvm_home() / "sandbox"
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    return path


def load_info() -> SandboxInfo | None:
    try:
        return SandboxInfo(**json.loads((sandbox_dir() / "sandbox.json").read_text()))
    except (OSError, ValueError, TypeError):
        return None


def save_info(info: SandboxInfo) -> None:
    write_text_atomic(sandbox_dir() / "sandbox.json", json.dumps(asdict(info), indent=1))


@contextmanager
def sandbox_lock() -> Iterator[None]:
    """Serialise changes to sandbox.json between deepvm processes."""
    with open(sandbox_dir() / "lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield


def running_sandbox() -> SandboxInfo | None:
    """The sandbox if its moto server runs; starts nothing."""
    info = load_info()
    return info if info and pid_alive(info.moto_pid) and _answers(info.moto_port) else None


def ensure_sandbox() -> SandboxInfo:
    """The running sandbox, starting its moto server and supervisor where they are not running."""
    if os.geteuid() != 0:
        raise CloudError(
            "the sandbox boots hosts in PID/mount namespaces with sshd on loopback port 22 and needs root; "
            "run deepvm as root (user-namespace mode is not available yet)"
        )
    with sandbox_lock():
        info = load_info() or SandboxInfo()
        if not (pid_alive(info.moto_pid) and _answers(info.moto_port)):
            for instance_id in host_pids():  # hosts of a dead control plane's instances
                kill_host(instance_id)
            kill_and_wait([info.supervisor_pid] if pid_alive(info.supervisor_pid) else [])
            info = SandboxInfo(second_octet=info.second_octet or random.randint(64, 254))
            info.moto_port = _free_port()
            info.moto_pid = spawn_daemon(
                python_module("provisioning.sandbox.controlplane", "-H", "127.0.0.1", "-p", str(info.moto_port)),
                sandbox_dir() / "moto.log",
                # moto's catalogue of public AMIs costs seconds per region; the sandbox needs none of it
                env={**os.environ, "MOTO_EC2_LOAD_DEFAULT_AMIS": "false"},
            )
            _wait_answers(info)
        if not pid_alive(info.supervisor_pid):
            info.supervisor_pid = spawn_daemon(
                python_module("provisioning.sandbox.supervisor"), sandbox_dir() / "supervisor.log"
            )
        save_info(info)
    return info


def stop_sandbox() -> list[str]:
    """Stop the supervisor, every host and the moto server; return what was stopped."""
    stopped = []
    with sandbox_lock():
        info = load_info() or SandboxInfo()
        if pid_alive(info.supervisor_pid):
            kill_and_wait([info.supervisor_pid])
            stopped.append(f"supervisor (pid {info.supervisor_pid})")
        for instance_id in host_pids():
            if kill_host(instance_id):
                raise CloudError(f"could not stop sandbox host {instance_id}")
            stopped.append(f"host {instance_id}")
        if pid_alive(info.moto_pid):
            kill_and_wait([info.moto_pid])
            stopped.append(f"moto server (pid {info.moto_pid}, port {info.moto_port})")
        (sandbox_dir() / "sandbox.json").unlink(missing_ok=True)
    return stopped


def sandbox_report() -> dict[str, Any]:
    """What runs: the moto server, the supervisor, and each host with its address and live pids."""
    info = load_info() or SandboxInfo()
    hosts = []
    for instance_id in sorted(host_pids()):
        facts = host_facts(instance_id)
        hosts.append(
            {
                "instance_id": instance_id,
                "address": facts.local_ipv4 if facts else None,
                "pids": host_processes(instance_id),
            }
        )
    return {
        "moto": {
            "running": pid_alive(info.moto_pid) and _answers(info.moto_port),
            "pid": info.moto_pid,
            "endpoint": info.endpoint if info.moto_port else None,
        },
        "supervisor": {"running": pid_alive(info.supervisor_pid), "pid": info.supervisor_pid},
        "networks": info.networks,
        "hosts": hosts,
    }


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _answers(port: int) -> bool:
    if not port:
        return False
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def _wait_answers(info: SandboxInfo) -> None:
    deadline = time.monotonic() + _MOTO_START_S
    while not _answers(info.moto_port):
        if not pid_alive(info.moto_pid) or time.monotonic() > deadline:
            kill_and_wait([info.moto_pid])
            raise CloudError(f"the sandbox's moto server did not start; see {sandbox_dir() / 'moto.log'}")
        time.sleep(0.1)
