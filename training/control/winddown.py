"""What a job that ends leaves behind it: nothing bought for it may bill on.

A replacement being bought when the job ends (cancelled, failed, at a limit, Ctrl-C) would arrive after
the controller stopped listening, be staged for nothing and bill until `deepvm down`. So the controller,
ending, waits a while for its orders to settle and terminates what they bought and what is still being
prepared (the pool's BOUGHT slots): nodes the plan already had stay, as they were before the job. A
purchase still under way after the wait is said, with the command that ends it. With autodown the head's
sweep by the cluster's tag ends it anyway (training/head/autodown.py).
"""

from __future__ import annotations

import time

from training.control.nodepool import NodeStatus
from training.control.nodes import ClusterNodes
from training.control.replacements import ReplacementBought, ReplacementReady
from training.control.session import AttemptSession
from training.shared.progress import JobReporter

WAIT_S = 120.0  # a purchase takes seconds to buy and a minute or two to boot and answer
_WHY = "bought for a job that has ended"


def drop_replacements(
    nodes: ClusterNodes, session: AttemptSession, report: JobReporter, wait_s: float = WAIT_S
) -> None:
    """Wait up to `wait_s` for the job's orders to settle and retire what they bought (see the module docstring)."""
    deadline = time.monotonic() + wait_s
    pool = nodes.pool
    if nodes.replacements.busy():
        report.note("waiting for the replacements being bought, to terminate them")
    while True:
        item = session.wait_for_post(timeout_s=0.2)
        if isinstance(item, ReplacementBought):
            nodes.bought(item)
        elif isinstance(item, ReplacementReady):
            pool.bought(item.added)
            for instance_id in (*item.stranded, *(e.instance_id for e in item.added)):
                pool.lost(instance_id, _WHY)
        elif item is None and (not nodes.replacements.busy() or time.monotonic() > deadline):
            break
    for slot in pool.with_status({NodeStatus.BOUGHT}):
        pool.lost(slot.instance_id, _WHY)
    nodes.act()
    if nodes.replacements.busy():
        report.note(
            f"a replacement is still being bought for cluster {nodes.cluster.name}: "
            f"`deepvm down {nodes.cluster.name}` ends it if it outlives this job"
        )
