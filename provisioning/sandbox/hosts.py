"""The host rig: turns a running sandbox instance into a real host, and kills it again.

A host is `unshare --pid --mount --fork --kill-child` around `provisioning.sandbox.hostinit` (PID 1 of the
new PID namespace). Killing that init makes the kernel kill every process of the namespace — sshd, login
sessions, training ranks — which is what terminating an EC2 instance does. `--kill-child` ties the init to
the unshare process, so killing either one takes the whole host down.

Each host owns a directory under DEEPVM_HOME/sandbox/hosts/INSTANCE_ID with its /etc/ssh (sshd_config
listening on the instance's IP; the host key is made inside the host at boot), its home (authorized_keys
from user-data) and its /tmp, all bind-mounted inside the namespace, and its serial console (console.log:
what the host printed at boot, served by the sandbox's EC2 as the instance's console output). The home is
`/home/USER` inside the host (the host's own /home, with a private /etc/passwd pointing USER there), as on
an Ubuntu image — and not a mount over the real home directory, which may hold the Python installation
everything runs on. The directory is deleted with the host, like an instance's root volume.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import signal
from dataclasses import asdict, dataclass
from pathlib import Path

from provisioning.cloud.userdata import parse_user_data
from provisioning.core.home import deepvm_home
from provisioning.sandbox.metadata import NOTICES, endpoint_url
from provisioning.sandbox.procs import children, kill_and_wait, pid_alive, python_module, spawn_daemon

SSHD = "/usr/sbin/sshd"
CONSOLE = "console.log"  # in the host's directory, outside its namespace: its serial console
SSH_PORT = 22
# The host's OS shutting down: its init hears systemd's "power off" signal (systemd(1), SIGNALS), leaves this
# mark in the host's directory and exits; the supervisor ends the instance as EC2 ends one launched with
# InstanceInitiatedShutdownBehavior=terminate (StateReason Client.InstanceInitiatedShutdown)
POWER_OFF_SIGNAL = signal.SIGRTMIN + 4
POWERED_OFF = "powered-off"
HOST_INIT = "provisioning.sandbox.hostinit"  # PID 1 of every host
_SYSTEM_SSH_FILES = ("ssh_config", "moduli")


@dataclass(frozen=True)
class HostFacts:
    """What the host's metadata endpoint reports about its instance."""

    instance_id: str
    instance_type: str
    local_ipv4: str
    availability_zone: str
    region: str
    instance_life_cycle: str  # "spot" | "on-demand"
    ami_id: str

    def metadata(self) -> dict[str, str]:
        return {
            "instance-id": self.instance_id,
            "instance-type": self.instance_type,
            "local-ipv4": self.local_ipv4,
            "placement/availability-zone": self.availability_zone,
            "placement/region": self.region,
            "instance-life-cycle": self.instance_life_cycle,
            "ami-id": self.ami_id,
        }


def hosts_root() -> Path:
    path = deepvm_home() / "sandbox" / "hosts"
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    return path


def host_dir(instance_id: str) -> Path:
    return hosts_root() / instance_id


def console_text(instance_id: str) -> str:
    """What the instance's host has printed to its serial console ("" before it has booted)."""
    try:
        return (host_dir(instance_id) / CONSOLE).read_text(errors="replace")
    except OSError:
        return ""


def ssh_user() -> str:
    return pwd.getpwuid(os.geteuid()).pw_name


def boot_host(facts: HostFacts, user_data: str, control_endpoint: str) -> int:
    """Prepare the host's files from its user-data and start it; return the unshare process's pid.
    `control_endpoint` is the sandbox's moto server, where the host's metadata endpoint looks up the
    instance profile it holds."""
    boot = parse_user_data(user_data)
    root = host_dir(facts.instance_id)
    if root.exists():
        shutil.rmtree(root)
    user = ssh_user()
    etc, homes, tmp = root / "etc_ssh", root / "home", root / "tmp"
    home = homes / user
    for path, mode in (
        (root, 0o700),
        (etc, 0o755),
        (homes, 0o755),
        (home, 0o700),
        (home / ".ssh", 0o700),
        (tmp, 0o1777),
        (root / NOTICES, 0o755),
    ):
        path.mkdir(parents=True, exist_ok=True)
        path.chmod(mode)
    _write(etc / "sshd_config", _sshd_config(facts), 0o644)
    for name in _SYSTEM_SSH_FILES:
        if Path("/etc/ssh", name).is_file():
            shutil.copyfile(Path("/etc/ssh", name), etc / name)
    _write(home / ".ssh" / "authorized_keys", "".join(k + "\n" for k in boot.authorized_keys), 0o600)
    _write(root / "passwd", _passwd_with_home(user, f"/home/{user}"), 0o644)
    config = {"facts": asdict(facts), "user_data": user_data, "control_endpoint": control_endpoint}
    _write(root / "host.json", json.dumps(config), 0o600)
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege-separation directory
    argv = [
        "unshare",
        "--pid",
        "--mount",
        "--mount-proc",
        "--fork",
        "--kill-child=SIGKILL",
        "--propagation",
        "private",
        *python_module(HOST_INIT, str(root)),
    ]
    env = {"PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"), "LANG": "C.UTF-8"}
    pid = spawn_daemon(argv, root / "host.log", env=env)
    _write(root / "pid", str(pid), 0o600)
    return pid


def host_pids() -> dict[str, int]:
    """Instance id -> unshare pid of every host directory (alive or not)."""
    found = {}
    for pid_file in hosts_root().glob("*/pid"):
        try:
            found[pid_file.parent.name] = int(pid_file.read_text())
        except (OSError, ValueError):
            continue
    return found


def host_processes(instance_id: str) -> list[int]:
    """The host's unshare process and its namespace init, whichever are alive."""
    pid = host_pids().get(instance_id)
    if pid is None or not pid_alive(pid):
        return []
    return [pid, *children(pid)]


def host_facts(instance_id: str) -> HostFacts | None:
    try:
        return HostFacts(**json.loads((host_dir(instance_id) / "host.json").read_text())["facts"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def kill_host(instance_id: str) -> list[int]:
    """Kill the host (its namespace init first, so every process in it dies) and delete its directory.
    Returns the pids that are still alive (empty on success)."""
    alive = kill_and_wait(list(reversed(host_processes(instance_id))))
    if not alive:
        shutil.rmtree(host_dir(instance_id), ignore_errors=True)
    return alive


def _sshd_config(facts: HostFacts) -> str:
    return "\n".join(
        [
            f"ListenAddress {facts.local_ipv4}:{SSH_PORT}",
            "HostKey /etc/ssh/ssh_host_ed25519_key",
            "PermitRootLogin prohibit-password",
            "PubkeyAuthentication yes",
            "PasswordAuthentication no",
            "KbdInteractiveAuthentication no",
            "UsePAM no",
            "UseDNS no",
            "PrintMotd no",
            "PidFile none",
            "MaxStartups 200:30:400",
            "MaxSessions 64",
            "AuthorizedKeysFile .ssh/authorized_keys",
            f"SetEnv AWS_EC2_METADATA_SERVICE_ENDPOINT={endpoint_url(facts.local_ipv4)}",
            "AcceptEnv LANG LC_*",
            "Subsystem sftp /usr/lib/openssh/sftp-server",
            "",
        ]
    )


def _passwd_with_home(user: str, home: str) -> str:
    """The system's /etc/passwd with `user`'s home directory replaced."""
    lines = []
    for line in Path("/etc/passwd").read_text().splitlines():
        fields = line.split(":")
        if len(fields) == 7 and fields[0] == user:
            fields[5] = home
        lines.append(":".join(fields))
    return "\n".join(lines) + "\n"


def _write(path: Path, text: str, mode: int) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    path.chmod(mode)
