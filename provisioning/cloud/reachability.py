"""Waiting until nodes answer over SSH (provisioning/cloud/ssh.py's probe), each with its pinned host key.

A node counts as reachable only after a full login with the cluster key and a command run. A host key
that is not the pinned one aborts at once: that is an impostor or a misconfigured node, never something
to retry or to accept.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from provisioning.cloud.ssh import Answer, probe_all
from provisioning.cloud.types import SshEndpoint
from provisioning.core.errors import CloudError


def wait_reachable(
    endpoints: list[SshEndpoint],
    timeout_s: float,
    on_progress: Callable[[int, int], None] = lambda done, total: None,
    poll_s: float = 0.2,
) -> None:
    """Block until every node answers over SSH, or raise CloudError naming those that do not."""
    deadline = time.monotonic() + timeout_s
    pending = list(endpoints)
    on_progress(0, len(endpoints))
    while pending:
        answers = probe_all([e.host for e in pending])
        impostors = [e for e, a in zip(pending, answers, strict=True) if a is Answer.NOT_PINNED]
        if impostors:
            raise CloudError(
                f"{impostors[0].instance_id} ({impostors[0].address}) presented a host key that is "
                "not the cluster's pinned key: refusing to connect"
            )
        pending = [e for e, a in zip(pending, answers, strict=True) if a is not Answer.YES]
        on_progress(len(endpoints) - len(pending), len(endpoints))
        if not pending:
            return
        if time.monotonic() > deadline:
            names = ", ".join(f"{e.instance_id} ({e.address})" for e in pending)
            raise CloudError(f"nodes did not answer over SSH within {timeout_s:.0f} s: {names}")
        time.sleep(poll_s)
