"""Which node of a cluster is its head: where mpirun and the managed job controller run.

The head must be the node least likely to disappear, since the job's controller, its logs and its state
live there: the on-demand anchor (Single Anchor), else the first on-demand holder (Tiering). `deepvm up`
gives this node, and only this node, the controller's cloud rights; `deepvm train` starts the
controller on it. One rule, here, so that both pick the same node.
"""

from __future__ import annotations

from collections.abc import Sequence

from provisioning.catalog.model import Market
from provisioning.cloud.types import NodeRecord
from provisioning.planner.plan import Role

_RUNNING = "running"


def head_node(nodes: Sequence[NodeRecord]) -> NodeRecord | None:
    """The running on-demand anchor, else the first running on-demand holder (launch order); None when
    the cluster has no running on-demand node."""
    running = sorted(
        (n for n in nodes if n.state == _RUNNING and n.market is Market.ON_DEMAND),
        key=lambda n: (n.launched_at, n.instance_id),
    )
    for role in (Role.ANCHOR, Role.HOLDER):
        found = next((n for n in running if n.role is role), None)
        if found is not None:
            return found
    return None
