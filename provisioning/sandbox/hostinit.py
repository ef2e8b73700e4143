"""PID 1 of a sandbox host's namespace: mount the host's own files, make its SSH host key, serve metadata
(with the credentials of the instance profile the instance holds, looked up in the sandbox's moto server),
run sshd, reap.

Started by hosts.boot_host inside `unshare --pid --mount`. It exits (and so the kernel kills the whole
namespace) when sshd dies, and when the host's OS is shut down (systemd's SIGRTMIN+4: hosts.POWER_OFF_SIGNAL);
the rig kills it to terminate the instance.

It plays cloud-init's part in the host keys: it makes the host's ed25519 key inside the host, at boot, and
prints its public half to the host's serial console, as cloud-init does on EC2 — so the private key exists
on that host alone, and deepvm learns the public one through the (sandbox's) EC2 API like on AWS.

The deepvm checkout and the Python it runs on stay visible inside the host (jobs and the head's controller
run that Python) but read-only, and nothing started in the host may mount: sshd and every session lose
CAP_SYS_ADMIN, so a job cannot remount them writable and change the code its controller, or this machine's
sandbox, runs.
"""

from __future__ import annotations

import ctypes
import json
import os
import pwd
import signal
import subprocess
import sys
import threading
from pathlib import Path

from provisioning.cloud.serial_console import host_key_block
from provisioning.sandbox.credentials import InstanceCredentials
from provisioning.sandbox.hosts import CONSOLE, POWER_OFF_SIGNAL, POWERED_OFF, SSHD, HostFacts
from provisioning.sandbox.metadata import NOTICES, MetadataServer

_MS_RDONLY, _MS_REMOUNT, _MS_BIND, _MS_REC = 1, 32, 4096, 16384
_PR_CAPBSET_DROP, _CAP_SYS_ADMIN = 24, 21
_HOST_KEY = "/etc/ssh/ssh_host_ed25519_key"
_libc = ctypes.CDLL(None, use_errno=True)
_libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_void_p]
_libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]


def _mount(source: str, target: str, flags: int) -> None:
    if _libc.mount(source.encode(), target.encode(), None, flags, None) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount onto {target}: {os.strerror(err)}")


def _bind(source_fd: int, target: str, read_only: bool = False) -> None:
    """Bind-mount an open directory over `target` (by descriptor, so earlier mounts cannot hide it)."""
    _mount(f"/proc/self/fd/{source_fd}", target, _MS_BIND | _MS_REC)
    if read_only:  # a bind mount takes its own flags only when remounted
        _mount("none", target, _MS_REMOUNT | _MS_BIND | _MS_RDONLY)


def _runtime_paths() -> list[str]:
    """The deepvm checkout and the Python environment it runs on (the venv and its base installation),
    outermost first: what the host needs to see, and must not change."""
    checkout = Path(__file__).resolve().parents[2]
    paths = sorted({str(Path(p).resolve()) for p in (checkout, sys.prefix, sys.base_prefix)})
    return [p for p in paths if not any(p.startswith(q.rstrip("/") + "/") for q in paths if q != p)]


def _make_host_key(console_fd: int, instance_id: str) -> None:
    """The host's own ed25519 key, made at its first boot, its public half printed to its console."""
    if not os.path.exists(_HOST_KEY):
        subprocess.run(
            ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"root@{instance_id}", "-f", _HOST_KEY],
            check=True,
            stdout=subprocess.DEVNULL,
        )
    public = Path(_HOST_KEY + ".pub").read_text().strip()
    os.write(console_fd, host_key_block([public]).encode())


def _power_off(root_fd: int) -> None:
    """The host's OS shuts down (`shutdown`, systemd's SIGRTMIN+4): mark it, and end the namespace."""
    os.close(os.open(POWERED_OFF, os.O_WRONLY | os.O_CREAT, 0o600, dir_fd=root_fd))
    os._exit(0)


def main(root: Path) -> int:
    config = json.loads((root / "host.json").read_text())
    facts = config["facts"]
    notices_fd = os.open(root / NOTICES, os.O_RDONLY | os.O_DIRECTORY)
    root_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)  # reachable after the mounts hide its path
    signal.signal(POWER_OFF_SIGNAL, lambda *_: _power_off(root_fd))
    console_fd = os.open(root / CONSOLE, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    mounts = {"etc_ssh": "/etc/ssh", "passwd": "/etc/passwd", "home": "/home", "tmp": "/tmp"}
    sources = {name: os.open(root / name, os.O_PATH) for name in mounts}
    runtime = {path: os.open(path, os.O_PATH) for path in _runtime_paths()}
    log = open(root / "sshd.log", "ab")  # noqa: SIM115 - lives as long as this process
    for name, target in mounts.items():
        _bind(sources[name], target)
        os.close(sources[name])
    for path, fd in runtime.items():  # read-only, and back at the same place if under /home or /tmp
        os.makedirs(path, exist_ok=True)
        _bind(fd, path, read_only=True)
        os.close(fd)
    home = pwd.getpwuid(os.geteuid()).pw_dir  # read after the mounts: the host's own passwd
    host = HostFacts(**facts)
    _make_host_key(console_fd, host.instance_id)
    # a host booted by a supervisor from before instance profiles has no endpoint: it serves no credentials
    endpoint = config.get("control_endpoint")
    credentials = InstanceCredentials(endpoint, host.region, host.instance_id) if endpoint else None
    server = MetadataServer(host.local_ipv4, host.metadata(), config["user_data"], notices_fd, credentials)
    threading.Thread(target=server.serve_forever, name="imds", daemon=True).start()
    os.chdir(home)
    if _libc.prctl(_PR_CAPBSET_DROP, _CAP_SYS_ADMIN, 0, 0, 0) != 0:  # for sshd and all it starts
        raise OSError(ctypes.get_errno(), "dropping CAP_SYS_ADMIN from the host's sessions")
    sshd = subprocess.Popen([SSHD, "-D", "-e", "-f", "/etc/ssh/sshd_config"], stdout=log, stderr=log)
    while True:  # as PID 1, adopt and reap every orphan of the host
        pid, _ = os.wait()
        if pid == sshd.pid:
            return 1


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
