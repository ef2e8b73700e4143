"""Logging in to a cluster's nodes over SSH: the one connect and the one probe.

`up` waits with the probe until every node answers (reachability.wait_reachable); the training
controller probes with it to tell live nodes from dead ones; training.shared.transport pushes files and runs
commands over the connect.

Host keys are pinned: a host is checked against the known_hosts file its HostSpec names (written by
`deepvm up` from the keys the nodes reported), and an unknown or different key is refused. Nothing is
ever added to known_hosts, so a spoofed node address receives nothing. A probe tells such a host apart
from a silent one: `up` stops at it (an impostor or a misconfigured node, never something to retry), the
controller drops it like a dead node (it is not the node it launched).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from enum import Enum
from pathlib import Path

import paramiko

from provisioning.cloud.types import HostSpec
from provisioning.core.errors import CloudError

_PROBE_TIMEOUT_S = 5.0
_PARALLEL = 32  # probes at once: a cluster of hundreds of nodes is probed in a few rounds


class TransportError(CloudError):
    """A node could not be reached, authenticated, trusted, written to or run on."""


class HostKeyRefused(TransportError):
    """The host presented a key that is not pinned for its address."""


class UnreadableKnownHosts(TransportError):
    """The pinned known_hosts file is missing or unreadable: a setup problem, never retried."""


class Answer(str, Enum):
    """What a probe found."""

    YES = "answers"  # logged in with the cluster key and ran a command
    NO = "silent"  # no connection, refused, timed out, no login, or the command failed
    NOT_PINNED = "not-pinned"  # a host key that is not the pinned one answered at the node's address


def connect(host: HostSpec, timeout_s: float = 10.0) -> paramiko.SSHClient:
    """An authenticated SSH client whose host key is the pinned one, or TransportError saying why not (one
    line; HostKeyRefused for a key that is not pinned). Nothing is left open on failure."""
    client = paramiko.SSHClient()
    try:
        client.load_host_keys(str(host.known_hosts))
    except (OSError, paramiko.SSHException) as exc:
        missing = not Path(host.known_hosts).exists()
        why = f"known_hosts file {host.known_hosts} does not exist" if missing else f"cannot read it: {exc}"
        raise UnreadableKnownHosts(f"{host.where}: {why}") from None
    client.set_missing_host_key_policy(paramiko.RejectPolicy())
    try:
        client.connect(
            host.address,
            port=host.port,
            username=host.user,
            key_filename=str(host.key_path),
            timeout=timeout_s,
            banner_timeout=timeout_s,
            auth_timeout=timeout_s,
            allow_agent=False,
            look_for_keys=False,
        )
    except paramiko.BadHostKeyException:
        client.close()
        raise HostKeyRefused(
            f"{host.where}: host key differs from the one pinned in {host.known_hosts}; refusing to connect"
        ) from None
    except paramiko.AuthenticationException:
        client.close()
        raise TransportError(f"{host.where}: authentication failed with key {host.key_path}") from None
    except paramiko.SSHException as exc:
        client.close()
        if "not found in known_hosts" in str(exc):
            raise HostKeyRefused(
                f"{host.where}: host key is not in {host.known_hosts}; refusing an unknown host"
            ) from None
        raise TransportError(f"{host.where}: SSH failed: {exc}") from None
    except (OSError, EOFError) as exc:
        client.close()
        raise TransportError(f"{host.where}: unreachable: {exc.__class__.__name__}: {exc}") from None
    except BaseException:
        client.close()
        raise
    return client


def probe(host: HostSpec, timeout_s: float = _PROBE_TIMEOUT_S) -> Answer:
    """Whether the node logs us in and runs a command now. A known_hosts file that cannot be read is a
    setup problem, not an answer: UnreadableKnownHosts."""
    try:
        client = connect(host, timeout_s)
    except HostKeyRefused:
        return Answer.NOT_PINNED
    except UnreadableKnownHosts:
        raise
    except TransportError:
        return Answer.NO
    try:
        _, stdout, _ = client.exec_command("true", timeout=timeout_s)
        return Answer.YES if stdout.channel.recv_exit_status() == 0 else Answer.NO
    except (paramiko.SSHException, OSError, EOFError):
        return Answer.NO
    finally:
        client.close()


def probe_all(hosts: list[HostSpec], timeout_s: float = _PROBE_TIMEOUT_S) -> list[Answer]:
    """`probe` of each host, in parallel (at most _PARALLEL at a time); in the hosts' order."""
    if not hosts:
        return []
    with ThreadPoolExecutor(max_workers=min(_PARALLEL, len(hosts)), thread_name_prefix="probe") as pool:
        return list(pool.map(lambda h: probe(h, timeout_s), hosts))
