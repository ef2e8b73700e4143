"""Pinning every node's own SSH host key before deepvm logs in to it.

A node generates its host key at first boot and prints the public half to its serial console; the key is
learnt from there through the cloud's API (provisioning/cloud/aws/console.py), once per instance, and
pinned for that instance alone (provisioning/cloud/keys.py). Whoever launched the node learns it: `up`,
a replacement bought by `deepvm train` or by the managed controller on the head, and, for nodes this
machine did not buy (the head's replacements) or that `up --no-wait` left unpinned, the first command
that needs the cluster's nodes.
"""

from __future__ import annotations

from collections.abc import Callable

from provisioning.cloud.aws.console import read_host_keys, wait_host_keys
from provisioning.cloud.aws.context import AwsContext
from provisioning.cloud.keys import ClusterKeys, ensure_cluster_keys, pin_host_key, pinned_host_keys, write_known_hosts
from provisioning.cloud.types import NodeRecord


def pin_nodes(
    ctx: AwsContext,
    cluster: str,
    nodes: list[NodeRecord],
    timeout_s: float | None,
    on_progress: Callable[[int, int], None] = lambda done, total: None,
) -> ClusterKeys:
    """Learn and pin the host key of every node that has none pinned, then write known_hosts for `nodes`.
    With a timeout, wait until each node has printed its key (else a CloudError names the others); with
    None, take what the consoles show now and leave the rest unpinned (SSH refuses them until later)."""
    keys = ensure_cluster_keys(cluster)
    pinned = pinned_host_keys(keys)
    missing = [n.instance_id for n in nodes if n.instance_id not in pinned]
    if missing:
        learnt = (
            read_host_keys(ctx, missing) if timeout_s is None else wait_host_keys(ctx, missing, timeout_s, on_progress)
        )
        for instance_id, key in learnt.items():
            pin_host_key(keys, instance_id, key)
    write_known_hosts(keys, nodes)
    return keys
