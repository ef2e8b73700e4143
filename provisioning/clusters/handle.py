"""One recorded cluster, opened once: its record, the store it lives in, the cloud it runs on and its keys.

`Cluster.open(name)` reads the record once. The training controller, the managed client and the CLI
then ask the handle — its nodes and how to log in to them, its state refreshed from the cloud, its cost so
far, what the nodes' AWS clients need, a replacement bought, a node terminated — instead of each
reopening the state store and checking the name again. `up` and `down` (lifecycle.py) work by name:
before `up` there is no record, and `down` must work without one.

A handle may be used from several threads (the controller buys replacements in the background): the
store serialises its connection (provisioning/core/db.py), and the record is read again where it may have
changed (`row`).
"""

from __future__ import annotations

import contextlib
import uuid
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Any

from provisioning.catalog.model import Market
from provisioning.cloud.aws.context import AwsContext, cloud_errors
from provisioning.cloud.aws.instances import describe
from provisioning.cloud.aws.provider import (
    add_instances,
    attach_to_holders,
    query_instances,
    terminate_instances,
    wait_instances,
)
from provisioning.cloud.keys import ClusterKeys, ensure_cluster_keys, write_known_hosts
from provisioning.cloud.names import check_cluster_name
from provisioning.cloud.pinning import pin_nodes
from provisioning.cloud.progress import Reporter
from provisioning.cloud.reachability import wait_reachable
from provisioning.cloud.types import CloudKind, InstanceInfo, LaunchRefused, NodeRecord, ShortageError, SshEndpoint
from provisioning.clusters.cost import ClusterCost, cost_fields
from provisioning.clusters.noderecords import adopt, assign_roles, endpoints, private_only
from provisioning.clusters.store import ClusterRow, ClusterStatus, Store, cluster_lock
from provisioning.clusters.target import AwsTarget, CloudTarget, resolve_target
from provisioning.core.errors import CloudError, DeepvmError, InputError, NotFoundError
from provisioning.planner.plan import NodeGroup, Plan, Role

RUNNING = "running"  # the EC2 state of a node that works


@dataclass(frozen=True)
class ClusterView:
    """A cluster for `status`: its record, nodes, and what it costs."""

    cluster: ClusterRow
    nodes: list[NodeRecord]
    usd_per_hour: float  # running nodes at their planned prices
    cost: ClusterCost  # so far; a cluster that is down: what it cost in all, and how long it ran
    refreshed: bool  # node states were read from the cloud just now
    banner: str = ""  # what every command on its cloud says first ("" for AWS)

    def to_dict(self) -> dict[str, Any]:
        c = self.cluster
        return {
            "name": c.name,
            "cloud": c.cloud,
            "status": c.status.value,
            "region": c.region,
            "availability_zone": c.availability_zone,
            "architecture": c.plan.architecture.value,
            "created_at": c.created_at,
            **cost_fields(self.cost),
            "usd_per_hour": round(self.usd_per_hour, 6),
            "prices_as_of": c.plan.prices_as_of,
            "catalog_source": c.plan.catalog_source,
            "refreshed": self.refreshed,
            "nodes": [
                {
                    "instance_id": n.instance_id,
                    "role": n.role.value,
                    "market": n.market.value,
                    "instance_type": n.instance_type,
                    "state": n.state,
                    "availability_zone": n.availability_zone,
                    "private_ip": n.private_ip,
                    "public_ip": n.public_ip,
                    "ssh_user": n.ssh_user,
                    "ssh_port": n.ssh_port,
                    "usd_per_hour": n.usd_per_hour,
                    "launched_at": n.launched_at,
                }
                for n in self.nodes
            ],
        }


class Cluster:
    """A recorded cluster; see the module docstring."""

    def __init__(self, store: Store, row: ClusterRow) -> None:
        self.name = row.name
        self._store = store
        self._row = row

    @classmethod
    def open(cls, name: str, store: Store | None = None, why: str = "") -> Cluster:
        """The recorded cluster `name`; NotFoundError listing the clusters there are when there is none.
        `why` says where the name came from when the user did not give it ("the last one used")."""
        store = store or Store()
        found = cls.find(name, store)
        if found is None:
            raise NotFoundError(f"no cluster named {name!r}{_why(why)}; {cluster_listing(store)}")
        return found

    @classmethod
    def open_running(cls, name: str, why: str = "") -> Cluster:
        """The cluster `name` if it is up; NotFoundError listing the clusters and saying how to start it."""
        store = Store()
        found = cls.find(name, store)
        if found is None or not found.is_up:
            raise NotFoundError(
                f"no running cluster named {name!r}{_why(why)}; {cluster_listing(store)}; "
                f"start it with `deepvm up --name {name}`"
            )
        return found

    @classmethod
    def find(cls, name: str, store: Store | None = None) -> Cluster | None:
        """The recorded cluster `name`, or None."""
        store = store or Store()
        row = store.cluster(check_cluster_name(name))
        return None if row is None else cls(store, row)

    @classmethod
    def of_node(cls, instance_id: str) -> tuple[Cluster, NodeRecord]:
        """The cluster a node belongs to, and the node; NotFoundError when no cluster has it."""
        store = Store()
        found = store.find_node(instance_id)
        if found is None:
            raise NotFoundError(f"no node {instance_id!r} in any cluster; `deepvm status` lists the node ids")
        return cls.open(found[0], store), found[1]

    # what it is

    @property
    def row(self) -> ClusterRow:
        """The record, read again (a replacement bought or a `down` meanwhile changes it)."""
        self._row = self._store.cluster(self.name) or self._row
        return self._row

    @property
    def plan(self) -> Plan:
        return self._row.plan

    @property
    def zones(self) -> tuple[str, ...]:
        """The zones its nodes may launch in: its own, then every other zone of its region where `up` found a
        subnet of its VPC (CloudResources.zone_subnets): where the recovery ladder may move it."""
        others = (entry.split("=", 1)[0] for entry in self._row.resources.zone_subnets)
        return tuple(dict.fromkeys((self._row.availability_zone, *sorted(others))))

    @property
    def is_up(self) -> bool:
        return self._row.status is ClusterStatus.UP

    @cached_property
    def target(self) -> CloudTarget:
        """The cloud it runs on (no credential check: `down` must work whatever happens)."""
        return target_for(self._row.cloud)

    @property
    def banner(self) -> str:
        return self.target.banner

    @property
    def node_python(self) -> str:
        """The interpreter on its nodes, with torch and mpi4py (train's and profile's --python default): the
        image's own where the record names it (the PyTorch DLAMI's: cloud/aws/images.py), else its cloud's."""
        return self._row.node_python or self.target.node_python

    @cached_property
    def keys(self) -> ClusterKeys:
        return ensure_cluster_keys(self.name)

    def nodes(self) -> list[NodeRecord]:
        """Every node recorded, gone ones included."""
        return self._store.nodes(self.name)

    def endpoints(self) -> list[SshEndpoint]:
        """How to log in to each running node. Nodes with no pinned host key yet (bought by the head, or
        left unpinned by `up --no-wait`) get the keys their consoles show now (provisioning.cloud.pinning)."""
        running = self._running()
        if write_known_hosts(self.keys, running):
            ctx = self.target.context(self._row.region, start=False)
            if ctx is not None:
                pin_nodes(ctx, self.name, running, timeout_s=None)
        return endpoints(self.keys, running)

    def cost(self) -> ClusterCost:
        """What it has cost so far, and costs per hour now (provisioning/clusters/cost.py)."""
        return self._store.cost(self.name)

    def event(self, kind: str, message: str) -> None:
        """Add to the cluster's event log (what `status` and `down` show happened)."""
        self._store.add_event(self.name, kind, message)

    def node_env(self) -> dict[str, str]:
        """What AWS clients on the cluster's nodes need in their environment (see CloudTarget.node_env)."""
        return self.target.node_env(self._row.region)

    def controller_env(self) -> dict[str, str]:
        """What the managed controller's AWS clients on the head need (see CloudTarget.controller_env)."""
        return self.target.controller_env(self._row.region)

    # what runs now

    def view(self, refresh: bool = True) -> ClusterView:
        """The cluster for `status`; with `refresh` (and the cluster up), node states from the cloud."""
        refreshed = self.refresh() if refresh and self.is_up else False
        row = self.row
        nodes = self.nodes()
        running = [n for n in nodes if n.state == RUNNING]
        return ClusterView(
            cluster=row,
            nodes=nodes,
            usd_per_hour=sum(n.usd_per_hour for n in running),
            cost=self.cost(),
            refreshed=refreshed,
            banner=self.banner,
        )

    def refresh(self) -> bool:
        """Update the stored node states from the cloud (and record nodes the head's controller bought);
        False when the cloud cannot be asked."""
        row = self._row
        ctx = self.target.context(row.region, start=False)
        if ctx is None:  # a sandbox whose control plane is gone: so are its instances
            self._store.close_costs(self.name)
            self._store.set_status(self.name, ClusterStatus.TERMINATED, "the sandbox was stopped")
            self._row = self.row
            return True
        nodes = self.nodes()
        # a terminated instance never runs again: only the others are asked for by id, so that the calls grow
        # with the nodes alive, not with every node the cluster ever had (AWS forgets a terminated instance
        # after about an hour, and then each id it no longer knows costs a call of its own: instances.describe)
        asked = [n.instance_id for n in nodes if n.state != "terminated"]
        try:
            with cloud_errors("reading node states"):
                seen = {i.instance_id: i for i in describe(ctx, asked)}
                tagged = query_instances(ctx, row.identity)
        except CloudError:
            return False
        listed = {i.instance_id: i for i in tagged}
        self._store.put_nodes(
            self.name,
            [replace(n, state=_state_now(n, seen.get(n.instance_id) or listed.get(n.instance_id))) for n in nodes],
        )
        for node, info in ((n, seen.get(n.instance_id)) for n in nodes):  # why EC2 ended what ran (StateReason)
            if node.state == RUNNING and info is not None and info.state != RUNNING and info.state_reason:
                self.event("ended", f"{node.instance_id} {info.state}: {info.state_reason}")
        known = {n.instance_id for n in nodes}
        adopted = adopt(row, [i for i in tagged if i.instance_id not in known], self.target.ssh_port)
        if adopted:
            self._store.put_nodes(self.name, adopted)
            write_known_hosts(self.keys, self._running())  # with their host keys, once pinned
        return True

    # changes while it runs

    def add_nodes(
        self,
        group: NodeGroup,
        report: Reporter = Reporter(),
        timeout_s: float = 900.0,
        inside_cluster: bool = False,
        zone: str | None = None,
    ) -> list[NodeRecord]:
        """Buy `group` (its count of its type, market and role, at its price: a replacement like the plan's,
        an on-demand stand-in, a repair of another type) from the cluster's own launch template, in `zone`
        (default: the cluster's; another zone launches in the subnet `up` recorded there); return the nodes
        once they answer over SSH (fewer than asked when EC2 gave fewer; ShortageError when it gave none).
        `inside_cluster`: the caller runs on a node of the cluster (the managed controller on the head),
        which reaches the others at their private addresses, not the public ones."""
        with cluster_lock(self.name):
            row = self.row
            if row.status is not ClusterStatus.UP:
                raise NotFoundError(f"no running cluster named {self.name!r}")
            where = zone or row.availability_zone
            ctx = started(self.target, row.region)
            report.step(
                f"launching {group.count} {group.market.value} {group.instance_type} ({group.role.value}) in {where}"
            )
            outcome = add_instances(
                ctx, row.identity, row.resources, (row.availability_zone, where), group, uuid.uuid4().hex
            )
            self._store.set_resources(self.name, outcome.resources)
            short = "; ".join(s.describe() for s in outcome.shortfalls)
            if short:
                self.event("shortage", short)
            if not outcome.instance_ids:  # a refusal (a right, a quota) is not a shortage: no retry changes it
                why = f"EC2 refused {outcome.refusal}" if outcome.refusal else short
                raise (LaunchRefused if outcome.refusal else ShortageError)(f"no replacement launched: {why}")
            try:
                return self._settle(ctx, row, group, list(outcome.instance_ids), report, timeout_s, inside_cluster)
            except BaseException as exc:  # bought but of no use: nothing may go on billing for it
                with contextlib.suppress(DeepvmError):  # `down`'s tag sweep is the last resort
                    self.retire(list(outcome.instance_ids), f"replacement failed: {exc}")
                raise

    def _settle(
        self,
        ctx: AwsContext,
        row: ClusterRow,
        group: NodeGroup,
        instance_ids: list[str],
        report: Reporter,
        timeout_s: float,
        inside_cluster: bool,
    ) -> list[NodeRecord]:
        """Launched replacements until they run, are recorded, pinned and answer over SSH."""
        infos = wait_instances(ctx, instance_ids, timeout_s, lambda n, t: report.count("running", n, t))
        if group.role is Role.HOLDER:  # a holder's S3 rights come with deepvm's holders profile
            attach_to_holders(ctx, row.resources.controller, [i.instance_id for i in infos])
        wanted = replace(row.plan, nodes=(replace(group, count=len(infos)),))
        added = assign_roles(wanted, infos, row.ssh_user, self.target.ssh_port)
        if inside_cluster:
            added = [private_only(n) for n in added]
        self._store.put_nodes(self.name, added)
        self.event("replacement", f"added {', '.join(n.instance_id for n in added)}")
        keys = pin_nodes(
            ctx, self.name, self._running(), timeout_s, lambda n, t: report.count("host keys pinned", n, t)
        )
        wait_reachable(endpoints(keys, added), timeout_s, lambda n, t: report.count("reachable over SSH", n, t))
        return added

    def retire(self, instance_ids: list[str], why: str) -> None:
        """Terminate nodes the cluster no longer uses (a node that hangs or stopped answering) while the
        rest runs on: EC2 bills a running instance whether or not it is any use, and `deepvm down` may be
        hours away. Not under the cluster lock: a replacement being bought holds it for minutes, and
        terminating instances twice (or racing `down`) is harmless."""
        if not instance_ids or self.row.status is not ClusterStatus.UP:
            return  # torn down meanwhile: nothing of it runs any more
        ctx = self.target.context(self._row.region, start=False)
        if ctx is None:  # a sandbox that was stopped took its hosts with it
            return
        states = terminate_instances(ctx, instance_ids)
        retired = [
            replace(n, state=states.get(n.instance_id, "shutting-down"))
            for n in self.nodes()
            if n.instance_id in instance_ids
        ]
        self._store.put_nodes(self.name, retired)  # closes their cost segments
        self.event("retired", f"terminated {', '.join(instance_ids)}: {why}")
        self.target.after_terminate(instance_ids)

    def interrupt(self, node: NodeRecord, after_s: int, fis_role_arn: str = "", rebalance_only: bool = False) -> str:
        """Send a Spot interruption to one of its nodes: notice now, interruption after `after_s` seconds
        (`rebalance_only`: a rebalance recommendation alone, in the sandbox); what was done."""
        ctx = self._running_spot(node)
        message = self.target.interrupt(ctx, self.name, node.instance_id, after_s, fis_role_arn, rebalance_only)
        self.event("interrupt", message)
        return message

    def terminate_without_notice(self, node: NodeRecord) -> str:
        """Take a Spot node away with no notice, as a reclaim that came too fast for one (`deepvm chaos`):
        the instance is terminated through the EC2 API, which ends every process on it at once."""
        terminate_instances(self._running_spot(node), [node.instance_id])
        message = f"terminated {node.instance_id} without notice"
        self.event("interrupt", message)
        return message

    def _running_spot(self, node: NodeRecord) -> AwsContext:
        """The cloud context for acting on `node`, or the one line that says why it cannot be interrupted."""
        if node.market is not Market.SPOT:
            raise InputError(f"{node.instance_id} is an on-demand node; only spot nodes get interruption notices")
        if node.state != RUNNING:
            raise CloudError(f"{node.instance_id} is {node.state}, not running")
        return started(self.target, self._row.region)

    def _running(self) -> list[NodeRecord]:
        return [n for n in self.nodes() if n.state == RUNNING]


def running_clusters() -> list[str]:
    """The names of the clusters that are up, oldest first."""
    return [r.name for r in Store().clusters() if r.status is ClusterStatus.UP]


def _why(why: str) -> str:
    return f" ({why})" if why else ""


LISTED_CLUSTERS = 10  # a "no cluster named" line stays one readable line


def cluster_listing(store: Store) -> str:
    """The recorded clusters for a "no cluster named X" error, newest first: "clusters: ux (up), old
    (terminated)", or that there are none."""
    rows = store.clusters()[::-1]
    if not rows:
        return "there are no clusters yet"
    shown = ", ".join(f"{r.name} ({r.status.value})" for r in rows[:LISTED_CLUSTERS])
    more = f" and {len(rows) - LISTED_CLUSTERS} more (`deepvm status`)" if len(rows) > LISTED_CLUSTERS else ""
    return f"clusters: {shown}{more}"


def target_for(cloud: CloudKind) -> CloudTarget:
    """The target a stored cluster runs on (no credential check: `down` must work whatever happens)."""
    return AwsTarget() if cloud is CloudKind.AWS else resolve_target(CloudKind.SANDBOX)


def started(target: CloudTarget, region: str) -> AwsContext:
    """The target's clients for the region, starting its cloud if it must (the sandbox)."""
    ctx = target.context(region)
    assert ctx is not None  # start=True always gives a context
    return ctx


def _state_now(node: NodeRecord, found: InstanceInfo | None) -> str:
    """A recorded node's state, from what EC2 said of it now (by id, or in the tag's listing); one EC2 no
    longer shows was terminated (terminated instances stay visible for about an hour only)."""
    if node.state == "terminated":
        return node.state
    return found.state if found is not None else "terminated"
