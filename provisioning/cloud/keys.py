"""SSH material of a cluster, kept locally under DEEPVM_HOME/clusters/NAME.

- the login key pair: the private key never leaves this machine (0600); only the public key is imported;
- the internal key pair: how the nodes log in to each other (mpirun on the head node starts Open MPI's
  daemons over SSH). Every node authorises its public key at boot, through user-data (replacements too,
  so the head reaches them without this machine); `deepvm train` puts its private key on the head node
  only, so that the login key never has to leave this machine;
- the host keys: each node generates its own at first boot and never hands its private half to anyone.
  Its public half is learnt once, from the cloud's API (provisioning.cloud.pinning), and pinned here for
  that instance alone (host_keys/INSTANCE_ID); known_hosts pins each node's address to its own key. So a
  connection proves "this node", not "some node of the cluster", and nothing secret is in user data.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from provisioning.cloud.types import NodeRecord
from provisioning.core.atomicfile import write_text_atomic
from provisioning.core.errors import CloudError
from provisioning.core.home import deepvm_home

HOST_KEYS_DIR = "host_keys"  # in the cluster's directory: one pinned public host key per instance id


@dataclass(frozen=True)
class ClusterKeys:
    """Paths and public halves of a cluster's SSH keys."""

    directory: Path
    login_key_path: Path  # private login key, 0600
    login_public: str  # "ssh-ed25519 AAAA... deepvm-NAME"
    known_hosts_path: Path  # each running node's address with its own pinned host key
    internal_key_path: Path  # private key the head node logs in to the others with, 0600
    internal_public: str  # "ssh-ed25519 AAAA... deepvm-internal-NAME"

    @property
    def host_keys_dir(self) -> Path:
        return self.directory / HOST_KEYS_DIR


def cluster_dir(name: str) -> Path:
    path = deepvm_home() / "clusters" / name
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    return path


def ensure_cluster_keys(name: str) -> ClusterKeys:
    """The cluster's keys, generated on first use and reused afterwards (a retried `up` keeps them)."""
    directory = cluster_dir(name)
    login = directory / "id_ed25519"
    internal = directory / "internal_ed25519"
    for path in (login, internal):
        if not path.exists():
            _write_private(path, Ed25519PrivateKey.generate())
    return ClusterKeys(
        directory=directory,
        login_key_path=login,
        login_public=f"{_public_line(login)} deepvm-{name}",
        known_hosts_path=directory / "known_hosts",
        internal_key_path=internal,
        internal_public=f"{_public_line(internal)} deepvm-internal-{name}",
    )


def pinned_host_keys(keys: ClusterKeys) -> dict[str, str]:
    """Instance id -> its pinned host key ("ssh-ed25519 AAAA...")."""
    if not keys.host_keys_dir.is_dir():
        return {}
    return {path.name: path.read_text().strip() for path in keys.host_keys_dir.iterdir() if path.is_file()}


def pin_host_key(keys: ClusterKeys, instance_id: str, public: str) -> None:
    """Pin an instance's host key, once: a pin is never replaced, so a key that changes later (a node
    someone else now answers for, or a console forged after boot) is refused, not learnt."""
    keys.host_keys_dir.mkdir(mode=0o700, exist_ok=True)
    path = keys.host_keys_dir / instance_id
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        if path.read_text().strip() != public:
            raise CloudError(
                f"{instance_id} now shows a host key other than the one pinned for it; refusing it (pinned: {path})"
            ) from None
        return
    with os.fdopen(fd, "w") as f:
        f.write(public + "\n")


def write_known_hosts(keys: ClusterKeys, nodes: Iterable[NodeRecord]) -> list[str]:
    """Pin each node's address to its own host key (replacing the file atomically); return the instance
    ids that have no pinned key yet (they are left out, so SSH refuses them)."""
    pins = pinned_host_keys(keys)
    lines, unpinned = [], []
    for node in nodes:
        if node.instance_id in pins:
            lines.append(f"{host_pattern(node.address or '', node.ssh_port)} {pins[node.instance_id]}\n")
        else:
            unpinned.append(node.instance_id)
    write_text_atomic(keys.known_hosts_path, "".join(lines))
    return unpinned


def forget_cluster_keys(name: str) -> None:
    """Delete the cluster's local keys once nothing in the cloud accepts them any more."""
    shutil.rmtree(deepvm_home() / "clusters" / name, ignore_errors=True)


def host_pattern(address: str, port: int) -> str:
    """How known_hosts names a host: the bare address on port 22, else [address]:port."""
    return address if port == 22 else f"[{address}]:{port}"


def _write_private(path: Path, key: Ed25519PrivateKey) -> None:
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption()
    )
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(pem)


def _public_line(private_path: Path) -> str:
    key = serialization.load_ssh_private_key(private_path.read_bytes(), password=None)
    return key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH).decode()
