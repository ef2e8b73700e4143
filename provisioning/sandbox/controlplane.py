"""The sandbox's EC2 control plane: moto's server, with the instances' console output made real.

moto answers GetConsoleOutput with one fixed sample text for every instance. EC2 answers with what the
instance printed to its serial console, and that is where deepvm learns each node's SSH host key
(provisioning/cloud/aws/console.py). So this server answers it from the console the instance's host wrote
(provisioning/sandbox/hosts.py), and the same code pins host keys on AWS and in the sandbox, on this
machine and on a head node alike. Where moto is not AWS in ways deepvm's code must meet (eventual
consistency, instant fleets, capacity, how instances end), the realism layer makes it so
(provisioning/sandbox/realism.py), with the sandbox's settings, `SANDBOX`, in force from the start.

Run as `python -m provisioning.sandbox.controlplane` with moto.server's arguments.
"""

from __future__ import annotations

import sys

from moto.core.responses import ActionResult
from moto.core.types import Base64EncodedString
from moto.core.utils import utcnow
from moto.ec2.responses.general import General
from moto.server import main as moto_main

from provisioning.sandbox.hosts import console_text
from provisioning.sandbox.realism import SANDBOX
from provisioning.sandbox.realism_moto import install


def console_output(self: General) -> ActionResult:
    instance = self.ec2_backend.get_instance(self._get_param("InstanceId"))  # InvalidInstanceID.NotFound
    return ActionResult(
        {
            "InstanceId": instance.id,
            "Timestamp": utcnow(),
            "Output": Base64EncodedString.from_raw_string(console_text(instance.id)),
        }
    )


def main(argv: list[str]) -> None:
    General.get_console_output = console_output  # type: ignore[method-assign]
    install(SANDBOX)
    moto_main(argv)


if __name__ == "__main__":
    main(sys.argv[1:])
