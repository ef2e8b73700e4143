"""PID 1 of a sandbox host's namespace: mount the host's own files, serve metadata (with the credentials of
the instance profile the instance holds, looked up in the sandbox's moto server), run sshd, reap.

Started by hosts.boot_host inside `unshare --pid --mount`. It exits (and so the kernel kills the whole
namespace) when sshd dies; the rig kills it to terminate the instance.
"""

from __future__ import annotations

import ctypes
import json
import os
import pwd
import subprocess
import sys
import threading
from pathlib import Path

from provisioning.sandbox.credentials import InstanceCredentials
from provisioning.sandbox.hosts import SSHD, HostFacts
from provisioning.sandbox.metadata import NOTICES, MetadataServer

_MS_BIND = 4096
_libc = ctypes.CDLL(None, use_errno=True)


def _bind(source_fd: int, target: str) -> None:
    """Bind-mount an open directory over `target` (by descriptor, so earlier mounts cannot hide it)."""
    source = f"/proc/self/fd/{source_fd}".encode()
    if _libc.mount(source, target.encode(), None, _MS_BIND, None) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"bind mount onto {target}: {os.strerror(err)}")


def _runtime_under(private: tuple[str, ...]) -> list[str]:
    """The deepvm checkout and Python environment, where they live under the host's private directories
    (a CI clone in /tmp, a checkout in /home): they must stay visible there, or nothing of deepvm runs.
    """
    checkout = Path(__file__).resolve().parents[2]
    paths = {str(Path(p).resolve()) for p in (checkout, sys.prefix, sys.base_prefix)}
    hidden = sorted(p for p in paths if any(p.startswith(d + "/") for d in private))
    return [p for p in hidden if not any(p.startswith(q + "/") for q in hidden)]


def main(root: Path) -> int:
    config = json.loads((root / "host.json").read_text())
    facts = config["facts"]
    notices_fd = os.open(root / NOTICES, os.O_RDONLY | os.O_DIRECTORY)
    mounts = {"etc_ssh": "/etc/ssh", "passwd": "/etc/passwd", "home": "/home", "tmp": "/tmp"}
    sources = {name: os.open(root / name, os.O_PATH) for name in mounts}
    runtime = {path: os.open(path, os.O_PATH) for path in _runtime_under(("/home", "/tmp"))}
    log = open(root / "sshd.log", "ab")  # noqa: SIM115 - lives as long as this process
    for name, target in mounts.items():
        _bind(sources[name], target)
        os.close(sources[name])
    for path, fd in runtime.items():  # back into the host's own /home or /tmp, at the same place
        os.makedirs(path, exist_ok=True)
        _bind(fd, path)
        os.close(fd)
    home = pwd.getpwuid(os.geteuid()).pw_dir  # read after the mounts: the host's own passwd
    host = HostFacts(**facts)
    # a host booted by a supervisor from before instance profiles has no endpoint: it serves no credentials
    endpoint = config.get("control_endpoint")
    credentials = InstanceCredentials(endpoint, host.region, host.instance_id) if endpoint else None
    server = MetadataServer(host.local_ipv4, host.metadata(), config["user_data"], notices_fd, credentials)
    threading.Thread(target=server.serve_forever, name="imds", daemon=True).start()
    os.chdir(home)
    sshd = subprocess.Popen([SSHD, "-D", "-e", "-f", "/etc/ssh/sshd_config"], stdout=log, stderr=log)
    while True:  # as PID 1, adopt and reap every orphan of the host
        pid, _ = os.wait()
        if pid == sshd.pid:
            return 1


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
