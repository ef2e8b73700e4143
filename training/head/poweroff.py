"""The head's last resort: shut its own operating system down, which on EC2 terminates the instance.

Every deepvm node is launched with InstanceInitiatedShutdownBehavior=terminate
(provisioning/cloud/aws/template.py), so "when you initiate a shutdown from the instance (using an operating
system command), the instance is terminated"
(https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/Using_ChangingInstanceInitiatedShutdownBehavior.html).
The head uses it when its own TerminateInstances was refused or could not be sent (an API outage, a role
that lost its right): a head left running bills for ever.

On an instance, `shutdown -h now`; where no such command exists, init is asked directly with SIGRTMIN+4,
systemd's "power off" (systemd(1), SIGNALS). In the sandbox (an emulated endpoint) a host is a PID namespace
of this machine whose init is provisioning.sandbox.hostinit: only the signal is sent, to that init, which
powers the host off as a VM's would (the sandbox then ends the instance with StateReason
Client.InstanceInitiatedShutdown). The machine's own `shutdown` is never run there: it would reach this
machine's init through /run, not the host's.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

from provisioning.sandbox.hosts import HOST_INIT, POWER_OFF_SIGNAL


def power_off(emulated: bool, say: Callable[[str], None]) -> None:
    """Shut this machine's OS down (see the module docstring); returns at once, the shutdown follows."""
    command = shutil.which("shutdown")
    if not emulated and command is not None:
        done = subprocess.run([command, "-h", "now"], capture_output=True, text=True, check=False)
        if done.returncode == 0:
            say("shutting the head's OS down (shutdown -h now): EC2 terminates the instance")
            return
        say(f"shutdown -h now failed ({done.returncode}): {done.stderr.strip()[-300:]}")
    if emulated and HOST_INIT not in Path("/proc/1/cmdline").read_bytes().decode(errors="replace"):
        say("not powering off: this process is not on a sandbox host, and this machine is not the head's")
        return
    say("asking init to power the head off (SIGRTMIN+4): EC2 terminates the instance")
    os.kill(1, POWER_OFF_SIGNAL)
