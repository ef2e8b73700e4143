"""The sandbox supervisor: a daemon that keeps local hosts equal to the EC2 instances moto reports.

Why a daemon rather than reconciling inside each CLI call: an interruption's deadline must be honoured
when no deepvm command is running (`deepvm interrupt --after 120` returns at once), and an instance
terminated through the EC2 API by anyone must lose its processes promptly. Each pass:
1. boot a host for every running instance with a sandbox (loopback) address that has none;
2. kill the host of every instance that is no longer running (terminated, stopped, or gone with moto);
3. end, as EC2 does, every instance whose posted interruption deadline has passed (StateReason
   Server.SpotInstanceTermination), whose host's OS shut down (Client.InstanceInitiatedShutdown: every node is
   launched with InstanceInitiatedShutdownBehavior=terminate) or whose host died (Server.InternalError): the
   realism layer's reclaim, where a TerminateInstances call would say the user ended it.
One supervisor per sandbox: a second one exits at once (file lock).
"""

from __future__ import annotations

import fcntl
import sys
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from provisioning.sandbox.control import SandboxInfo, load_info, sandbox_dir
from provisioning.sandbox.hosts import POWERED_OFF, HostFacts, boot_host, host_dir, host_pids, kill_host
from provisioning.sandbox.metadata import interruption_deadline
from provisioning.sandbox.network import in_sandbox_network
from provisioning.sandbox.procs import pid_alive
from provisioning.sandbox.realism import INSTANCE_SHUTDOWN, INTERNAL_ERROR, SPOT_TERMINATION, RealismControl

POLL_S = 0.25


def log(message: str) -> None:
    print(f"{datetime.now(timezone.utc).isoformat(timespec='milliseconds')} {message}", flush=True)


_clients: dict[tuple[str, str], Any] = {}


def _ec2(info: SandboxInfo, region: str) -> Any:
    """One EC2 client per endpoint and region for the daemon's life (building one costs ~0.1 s)."""
    key = (info.endpoint, region)
    if key not in _clients:
        _clients[key] = info.context(region).client("ec2")
    return _clients[key]


def running_instances(info: SandboxInfo) -> dict[str, HostFacts]:
    """Running instances with sandbox addresses, in every region the sandbox has a network in, from the
    control plane's inventory (realism.InventoryRow: what EC2's machines follow, read for a fraction of a
    DescribeInstances' cost)."""
    found = {}
    for row in RealismControl(info.endpoint).inventory(tuple(info.networks)):
        if row.state == "running" and in_sandbox_network(info, row.private_ip):
            found[row.instance_id] = HostFacts(
                instance_id=row.instance_id,
                instance_type=row.instance_type,
                local_ipv4=row.private_ip or "",
                availability_zone=row.availability_zone,
                region=row.region,
                instance_life_cycle="spot" if row.spot else "on-demand",
                ami_id=row.image_id,
            )
    return found


def reconcile(info: SandboxInfo, unbootable: set[str], pool: ThreadPoolExecutor) -> None:
    """One pass of the three steps in the module docstring; new hosts boot in parallel."""
    running = running_instances(info)
    hosts = host_pids()
    for instance_id in hosts:
        if instance_id not in running:
            log(f"instance {instance_id} is not running: killing its host")
            kill_host(instance_id)
    to_boot = [f for iid, f in running.items() if iid not in hosts and iid not in unbootable]
    for facts, booted in zip(to_boot, pool.map(lambda f: _boot(info, f), to_boot), strict=True):
        if not booted:
            unbootable.add(facts.instance_id)
    for instance_id, pid in hosts.items():
        facts = running.get(instance_id)
        if facts is None:
            continue
        control = RealismControl(info.endpoint)
        if not pid_alive(pid):
            shut_down = (host_dir(instance_id) / POWERED_OFF).exists()  # its OS: terminated, as launched
            log(f"host {instance_id} {'shut down' if shut_down else 'died'}: ending its instance")
            control.reclaim(facts.region, instance_id, INSTANCE_SHUTDOWN if shut_down else INTERNAL_ERROR)
            kill_host(instance_id)
            continue
        deadline = interruption_deadline(host_dir(instance_id))
        if deadline is not None and datetime.now(timezone.utc) >= deadline:
            log(f"interruption deadline of {instance_id} reached: interrupting it")
            control.reclaim(facts.region, instance_id, SPOT_TERMINATION)
            kill_host(instance_id)


def _boot(info: SandboxInfo, facts: HostFacts) -> bool:
    """Boot the instance's host from its user-data; False when the instance is not a deepvm node."""
    ec2 = _ec2(info, facts.region)
    user_data = ec2.describe_instance_attribute(InstanceId=facts.instance_id, Attribute="userData")
    try:
        boot_host(facts, user_data.get("UserData", {}).get("Value", ""), info.endpoint)
    except ValueError as exc:
        log(f"instance {facts.instance_id} has no deepvm user-data ({exc}); it gets no host")
        return False
    log(f"booted host {facts.instance_id} at {facts.local_ipv4}")
    return True


def main() -> int:
    lock = open(sandbox_dir() / "supervisor.lock", "w")  # noqa: SIM115 - held for the process's life
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return 0  # another supervisor serves this sandbox
    log("supervisor started")
    unbootable: set[str] = set()
    pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="boot")
    while True:
        info = load_info()
        if info is None or not pid_alive(info.moto_pid):
            log("control plane gone: stopping every host and exiting")
            for instance_id in host_pids():
                kill_host(instance_id)
            return 0
        try:
            reconcile(info, unbootable, pool)
        except (BotoCoreError, ClientError, OSError):  # urllib's errors (the reclaim) are OSErrors
            log("reconcile failed (will retry):\n" + traceback.format_exc())
        time.sleep(POLL_S)


if __name__ == "__main__":
    sys.exit(main())
