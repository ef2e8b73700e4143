"""SSH material of a cluster, generated and kept locally under DEEPVM_HOME/clusters/NAME.

- the login key pair: the private key never leaves this machine (0600); only the public key is imported;
- the host key pair: installed on every node through user-data and written to a known_hosts file here, so
  every SSH connection is checked against a key deepvm chose itself — nothing is accepted on first use;
- the internal key pair: how the nodes log in to each other (mpirun on the head node starts Open MPI's
  daemons over SSH). Every node authorises its public key at boot, through user-data (replacements too,
  so the head reaches them without this machine); `deepvm train` puts its private key on the head node
  only, so that the login key never has to leave this machine.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from provisioning.home import deepvm_home


@dataclass(frozen=True)
class ClusterKeys:
    """Paths and public halves of a cluster's SSH keys."""

    directory: Path
    login_key_path: Path  # private login key, 0600
    login_public: str  # "ssh-ed25519 AAAA... deepvm-NAME"
    host_key_private: str  # OpenSSH PEM of the nodes' host key
    host_key_public: str
    known_hosts_path: Path
    internal_key_path: Path  # private key the head node logs in to the others with, 0600
    internal_public: str  # "ssh-ed25519 AAAA... deepvm-internal-NAME"


def cluster_dir(name: str) -> Path:
    path = deepvm_home() / "clusters" / name
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    return path


def ensure_cluster_keys(name: str) -> ClusterKeys:
    """The cluster's keys, generated on first use and reused afterwards (a retried `up` keeps them)."""
    directory = cluster_dir(name)
    login = directory / "id_ed25519"
    host = directory / "ssh_host_ed25519_key"
    internal = directory / "internal_ed25519"
    for path in (login, host, internal):
        if not path.exists():
            _write_private(path, Ed25519PrivateKey.generate())
    return ClusterKeys(
        directory=directory,
        login_key_path=login,
        login_public=f"{_public_line(login)} deepvm-{name}",
        host_key_private=host.read_text(),
        host_key_public=_public_line(host),
        known_hosts_path=directory / "known_hosts",
        internal_key_path=internal,
        internal_public=f"{_public_line(internal)} deepvm-internal-{name}",
    )


def write_known_hosts(keys: ClusterKeys, addresses: list[tuple[str, int]]) -> None:
    """Pin the cluster's host key for every node address (replacing the file atomically)."""
    lines = [f"{host_pattern(addr, port)} {keys.host_key_public}\n" for addr, port in addresses]
    tmp = keys.known_hosts_path.with_suffix(".tmp")
    tmp.write_text("".join(lines))
    os.replace(tmp, keys.known_hosts_path)


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
    return (
        key.public_key()
        .public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
        .decode()
    )
