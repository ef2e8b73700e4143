"""Waiting until nodes answer over SSH, checking each host key against the cluster's pinned known_hosts.

A node counts as reachable only after a full login with the cluster key and a command run. A host key
that does not match the pinned one aborts at once: that is an impostor or a misconfigured node, never
something to retry or to accept.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import paramiko

from provisioning.cloud.types import SshEndpoint
from provisioning.errors import CloudError

_CONNECT_TIMEOUT_S = 5.0


class UnreadableKnownHosts(CloudError):
    """The pinned known_hosts file is missing or unreadable: a setup problem, never retried."""


def open_pinned(
    address: str, port: int, user: str, key_path: str, known_hosts: str, timeout_s: float
) -> paramiko.SSHClient:
    """An authenticated SSH client whose host key must be in `known_hosts` (unknown keys are rejected).

    The one place deepvm opens SSH: paramiko's own errors (bad host key, authentication, network)
    pass through for the caller to word; nothing is left open on failure.
    """
    client = paramiko.SSHClient()
    try:
        client.load_host_keys(known_hosts)
    except (OSError, paramiko.SSHException) as exc:
        raise UnreadableKnownHosts(f"cannot read known_hosts {known_hosts}: {exc}") from None
    client.set_missing_host_key_policy(paramiko.RejectPolicy())
    try:
        client.connect(
            address,
            port=port,
            username=user,
            key_filename=key_path,
            timeout=timeout_s,
            banner_timeout=timeout_s,
            auth_timeout=timeout_s,
            allow_agent=False,
            look_for_keys=False,
        )
    except BaseException:
        client.close()
        raise
    return client


def connect(endpoint: SshEndpoint, timeout_s: float = _CONNECT_TIMEOUT_S) -> paramiko.SSHClient:
    """An authenticated SSH client for the node; unknown or mismatching host keys are rejected."""
    return open_pinned(endpoint.address, endpoint.port, endpoint.user, endpoint.key_path,
                       endpoint.known_hosts_path, timeout_s)


def answers(endpoint: SshEndpoint) -> bool:
    """True when the node accepts the login and runs a command; host key problems raise CloudError."""
    try:
        client = connect(endpoint)
    except (paramiko.BadHostKeyException, paramiko.SSHException) as exc:
        if isinstance(exc, paramiko.BadHostKeyException) or "not found in known_hosts" in str(exc):
            raise CloudError(
                f"{endpoint.instance_id} ({endpoint.address}) presented a host key that is not "
                f"the cluster's pinned key: refusing to connect"
            ) from exc
        return False
    except (TimeoutError, OSError, EOFError):
        return False
    try:
        _, stdout, _ = client.exec_command("true", timeout=_CONNECT_TIMEOUT_S)
        return stdout.channel.recv_exit_status() == 0
    except (paramiko.SSHException, OSError, EOFError):
        return False
    finally:
        client.close()


def wait_reachable(
    endpoints: list[SshEndpoint],
    timeout_s: float,
    on_progress: Callable[[int, int], None] = lambda done, total: None,
    poll_s: float = 0.2,
) -> None:
    """Block until every node answers over SSH, or raise CloudError naming those that do not."""
    deadline = time.monotonic() + timeout_s
    pending = list(endpoints)
    on_progress(0, len(endpoints))
    with ThreadPoolExecutor(max_workers=min(16, max(1, len(endpoints)))) as pool:
        while pending:
            results = list(pool.map(answers, pending))
            pending = [e for e, ok in zip(pending, results, strict=True) if not ok]
            on_progress(len(endpoints) - len(pending), len(endpoints))
            if not pending:
                return
            if time.monotonic() > deadline:
                names = ", ".join(f"{e.instance_id} ({e.address})" for e in pending)
                raise CloudError(f"nodes did not answer over SSH within {timeout_s:.0f} s: {names}")
            time.sleep(poll_s)
