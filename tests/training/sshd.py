"""A real OpenSSH server on 127.0.0.1 for transport tests: fresh host and client keys, a free port."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

SSHD = Path("/usr/sbin/sshd")


@dataclass
class Sshd:
    port: int
    client_key: Path
    known_hosts: Path
    host_pub: str  # "ssh-ed25519 AAAA..."
    home: Path  # where relative SFTP paths land: each server looks like its own machine to a push
    process: subprocess.Popen


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _keygen(path: Path) -> str:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)
    return path.with_suffix(".pub").read_text().strip()


def start_sshd(root: Path) -> Sshd:
    root.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(PermissionError):  # sshd wants its privilege-separation directory
        Path("/run/sshd").mkdir(parents=True, exist_ok=True)
    host_pub = _keygen(root / "host_key")
    client_pub = _keygen(root / "client_key")
    (root / "authorized_keys").write_text(client_pub + "\n")
    port = _free_port()
    home = root / "home"
    home.mkdir()
    (root / "sshd_config").write_text(
        f"ListenAddress 127.0.0.1\nPort {port}\nHostKey {root / 'host_key'}\n"
        f"AuthorizedKeysFile {root / 'authorized_keys'}\nPermitRootLogin prohibit-password\n"
        f"PasswordAuthentication no\nStrictModes no\nUsePAM no\nPidFile {root / 'sshd.pid'}\n"
        f"Subsystem sftp internal-sftp -d {home}\nMaxStartups 100\nMaxSessions 100\n"
    )
    known = root / "known_hosts"
    known.write_text(f"[127.0.0.1]:{port} {host_pub}\n")
    process = subprocess.Popen(
        [str(SSHD), "-D", "-e", "-f", str(root / "sshd_config")],
        stdout=subprocess.DEVNULL,
        stderr=open(root / "sshd.log", "wb"),  # noqa: SIM115 - lives as long as the server
    )
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"sshd exited: {(root / 'sshd.log').read_text()}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            break
        except OSError:
            time.sleep(0.05)
    else:
        process.kill()
        raise RuntimeError("sshd did not start listening")
    return Sshd(port, root / "client_key", known, host_pub, home, process)


def stop_sshd(server: Sshd) -> None:
    server.process.terminate()
    try:
        server.process.wait(timeout=5)
    except subprocess.TimeoutExpired:
        server.process.kill()
        server.process.wait()


def can_run_sshd() -> bool:
    return SSHD.exists()
