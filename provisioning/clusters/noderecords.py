"""A cluster's nodes as records: each instance the cloud describes, with the role and price deepvm bought it for,
and how to log in to it. `up` matches its instances to the plan's groups; a node bought later (a replacement, an
on-demand stand-in, a repair of another type: training/control) carries its role and price in its tags, since the
plan may have no group of its type and market."""

from __future__ import annotations

from dataclasses import replace

from provisioning.cloud.keys import ClusterKeys
from provisioning.cloud.types import InstanceInfo, NodeRecord, SshEndpoint
from provisioning.clusters.store import ClusterRow
from provisioning.core.errors import CloudError
from provisioning.planner.plan import NodeGroup, Plan


def assign_roles(plan: Plan, infos: list[InstanceInfo], ssh_user: str, ssh_port: int) -> list[NodeRecord]:
    """Give each instance the role and planned price of the plan group it fills (matched by type and
    market, in plan order; with an accepted shortage the later nodes of a group are the missing ones)."""
    free = sorted(infos, key=lambda i: i.launched_at)
    nodes = []
    for group in plan.nodes:
        for _ in range(group.count):
            match = next((i for i in free if (i.instance_type, i.market) == (group.instance_type, group.market)), None)
            if match is None:
                break
            free.remove(match)
            nodes.append(_node(match, group, ssh_user, ssh_port))
    if free:
        raise CloudError(f"EC2 launched instances the plan did not ask for: {', '.join(i.instance_id for i in free)}")
    return nodes


def adopt(row: ClusterRow, infos: list[InstanceInfo], ssh_port: int) -> list[NodeRecord]:
    """Records for instances of the cluster that this store did not buy (the managed controller on the
    head bought them): each takes the role and price it was bought for (its tags), else those of the plan
    group of its type and market. Instances with neither are not the cluster's nodes and are left out
    (`down` sweeps them by tag all the same)."""
    groups = {(g.instance_type, g.market): g for g in row.plan.nodes}
    fitting = [(info, _bought_group(info) or groups.get((info.instance_type, info.market))) for info in infos]
    return [_node(info, group, row.ssh_user, ssh_port) for info, group in fitting if group is not None]


def _bought_group(info: InstanceInfo) -> NodeGroup | None:
    """The group a node bought after `up` was bought as (its tags), or None."""
    if info.bought_as is None or info.bought_at_usd is None:
        return None
    return NodeGroup(info.instance_type, info.market, 1, info.bought_as, info.bought_at_usd)


def _node(info: InstanceInfo, group: NodeGroup, ssh_user: str, ssh_port: int) -> NodeRecord:
    """The record of an instance that fills a node of `group`: its role, at the group's planned price."""
    return NodeRecord(
        instance_id=info.instance_id,
        instance_type=info.instance_type,
        market=info.market,
        role=group.role,
        availability_zone=info.availability_zone,
        state=info.state,
        private_ip=info.private_ip,
        public_ip=info.public_ip,
        usd_per_hour=group.usd_per_hour,
        launched_at=info.launched_at,
        ssh_user=ssh_user,
        ssh_port=ssh_port,
    )


def private_only(node: NodeRecord) -> NodeRecord:
    """The node as a machine inside its cluster's network sees it: reached at its private address."""
    return replace(node, public_ip=None)


def endpoints(keys: ClusterKeys, nodes: list[NodeRecord]) -> list[SshEndpoint]:
    """How to log in to each of the nodes with the cluster's login key and pinned host keys."""
    return [
        SshEndpoint(
            instance_id=n.instance_id,
            address=n.address or "",
            private_address=n.private_ip or n.address or "",
            port=n.ssh_port,
            user=n.ssh_user,
            role=n.role,
            market=n.market,
            key_path=str(keys.login_key_path),
            known_hosts_path=str(keys.known_hosts_path),
        )
        for n in nodes
    ]
