"""Learning nodes' SSH host keys from EC2's console output (GetConsoleOutput).

The call is signed with the caller's credentials and answered by EC2 over TLS, and the text is what the
instance's own boot printed: a channel that nobody outside the instance can write to. AWS's own guide
verifies host keys this way. Nitro instances give the latest output on request (`Latest`); older (Xen)
types only the buffered one, posted a little after boot.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from botocore.exceptions import ClientError

from provisioning.cloud.aws.context import AwsContext, cloud_errors, error_code
from provisioning.cloud.serial_console import ed25519_host_key
from provisioning.core.errors import CloudError

_NOT_NITRO = ("UnsupportedOperation", "InvalidParameterCombination", "InvalidParameterValue")


def console_host_key(ctx: AwsContext, instance_id: str) -> str | None:
    """The node's ed25519 host key as its console shows it, or None when it has not been printed yet
    (or the instance is not visible to the API yet)."""
    ec2 = ctx.client("ec2")
    try:
        try:
            answer = ec2.get_console_output(InstanceId=instance_id, Latest=True)
        except ClientError as exc:
            if error_code(exc) not in _NOT_NITRO:
                raise
            answer = ec2.get_console_output(InstanceId=instance_id)
    except ClientError as exc:
        if error_code(exc) == "InvalidInstanceID.NotFound":
            return None
        raise
    return ed25519_host_key(answer.get("Output") or "")


def read_host_keys(ctx: AwsContext, instance_ids: list[str]) -> dict[str, str]:
    """Instance id -> host key, for the instances whose console shows it now (one call each)."""
    found = {}
    for instance_id in instance_ids:
        with cloud_errors(f"reading the console output of {instance_id}"):
            key = console_host_key(ctx, instance_id)
        if key is not None:
            found[instance_id] = key
    return found


def wait_host_keys(
    ctx: AwsContext,
    instance_ids: list[str],
    timeout_s: float,
    on_progress: Callable[[int, int], None] = lambda done, total: None,
) -> dict[str, str]:
    """Instance id -> host key, for every instance, polling until each has printed its key."""
    deadline = time.monotonic() + timeout_s
    found: dict[str, str] = {}
    delay = 0.2
    while True:
        found.update(read_host_keys(ctx, [i for i in instance_ids if i not in found]))
        on_progress(len(found), len(instance_ids))
        missing = [i for i in instance_ids if i not in found]
        if not missing:
            return found
        if time.monotonic() > deadline:
            raise CloudError(
                f"no SSH host key in the console output of {', '.join(missing)} after {timeout_s:g} s: "
                "deepvm pins each node's own key from what cloud-init prints there at first boot (the "
                "image must run cloud-init)"
            )
        time.sleep(delay)
        delay = min(delay * 1.5, 5.0)
