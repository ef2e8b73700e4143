"""`deepvm up`, `status`, `down` and `interrupt`: the provider, the state store and SSH put together.

Each public function is what one CLI command calls. They report progress through a `Reporter` (the CLI
renders it) and never print. Failure rule: whatever `up` created is deleted again before the error
reaches the user, and the store says so.
"""

from __future__ import annotations

import contextlib
import uuid
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from provisioning.catalog import Market
from provisioning.cloud.aws.context import AwsContext, cloud_errors
from provisioning.cloud.aws.instances import describe
from provisioning.cloud.aws.provider import (
    add_instances,
    attach_to_head,
    ensure_controller,
    query_instances,
    run_instances,
    terminate_cluster,
    wait_instances,
)
from provisioning.cloud.aws.teardown import leftovers
from provisioning.cloud.head import head_node
from provisioning.cloud.keys import ClusterKeys, ensure_cluster_keys, forget_cluster_keys, write_known_hosts
from provisioning.cloud.names import check_cluster_name
from provisioning.cloud.pinning import pin_nodes
from provisioning.cloud.progress import Reporter
from provisioning.cloud.reachability import wait_reachable
from provisioning.cloud.target import AwsTarget, CloudTarget, resolve_target
from provisioning.cloud.types import (
    CloudResources,
    ClusterSpec,
    InstanceInfo,
    NodeRecord,
    ShortagePolicy,
    Shortfall,
    SshEndpoint,
)
from provisioning.errors import CloudError, InputError, NotFoundError
from provisioning.planner.plan import Plan, Role
from provisioning.state import ClusterRow, Store, cluster_lock, utc_now

_RUNNING = "running"


class ShortageError(CloudError):
    """The cloud delivered fewer instances than the plan needs."""


@dataclass(frozen=True)
class UpRequest:
    """What `deepvm up` was asked for."""

    name: str
    plans: tuple[Plan, ...]  # the plan to launch first, then the alternatives `next-plan` may try
    on_shortage: ShortagePolicy = ShortagePolicy.FAIL
    ssh_cidr: str | None = None
    image_id: str | None = None
    subnet_id: str | None = None
    ssh_user: str | None = None
    instance_profile: str | None = None  # IAM instance profile (name or ARN): the nodes' AWS credentials
    controller_profile: str | None = None  # the head's profile, made elsewhere; None: deepvm makes one
    wait_ssh: bool = True  # wait until every node answers over SSH
    timeout_s: float = 900.0


@dataclass(frozen=True)
class ClusterView:
    """A cluster for `status`: its record, nodes, and what it costs."""

    cluster: ClusterRow
    nodes: list[NodeRecord]
    usd_per_hour: float  # running nodes at their planned prices
    cost_so_far: float
    uptime_s: float
    refreshed: bool  # node states were read from the cloud just now

    def to_dict(self) -> dict[str, Any]:
        c = self.cluster
        return {
            "name": c.name,
            "cloud": c.cloud,
            "status": c.status,
            "region": c.region,
            "availability_zone": c.availability_zone,
            "architecture": c.plan.architecture.value,
            "created_at": c.created_at,
            "uptime_s": round(self.uptime_s, 1),
            "usd_per_hour": round(self.usd_per_hour, 6),
            "cost_so_far_usd": round(self.cost_so_far, 6),
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


@dataclass(frozen=True)
class UpResult:
    view: ClusterView
    created: bool  # False: the cluster already ran and nothing was launched
    plan_index: int = 0  # which of the request's plans runs
    shortfalls: tuple[Shortfall, ...] = ()


@dataclass(frozen=True)
class DownResult:
    name: str
    deleted: list[str]
    had_record: bool


def target_for(cloud: str) -> CloudTarget:
    """The target a stored cluster runs on (no credential check: `down` must work whatever happens)."""
    return AwsTarget() if cloud == "aws" else resolve_target("sandbox")


# up


def up(target: CloudTarget, request: UpRequest, report: Reporter = Reporter()) -> UpResult:
    """Launch the cluster, or return it unchanged when it already runs (`up` twice is one cluster)."""
    name = check_cluster_name(request.name)
    if not request.plans:
        raise InputError("no plan to launch")
    with cluster_lock(name):
        store = Store()
        existing = store.cluster(name)
        if existing and existing.status == "up":
            return UpResult(view=_view(store, existing, refresh=True), created=False)
        if existing and existing.status not in ("failed", "terminated"):
            report.step(f"cleaning up an interrupted earlier attempt of {name}")
            _destroy(
                store,
                existing.name,
                target_for(existing.cloud),
                [existing.region],
                existing.resources,
                report,
            )
        for index, plan in enumerate(request.plans):
            try:
                return _launch(target, store, request, plan, index, report)
            except ShortageError as exc:
                if request.on_shortage is ShortagePolicy.NEXT_PLAN and index + 1 < len(request.plans):
                    report.step(f"{exc}; trying the next plan")
                    continue
                raise
    raise AssertionError("unreachable: the loop returns or raises")


def _launch(
    target: CloudTarget, store: Store, request: UpRequest, plan: Plan, index: int, report: Reporter
) -> UpResult:
    name = request.name
    ctx = _context(target, plan.region)
    strays = query_instances(ctx, name)
    if strays:
        raise CloudError(
            f"cluster {name} already has {len(strays)} instance(s) in {plan.region} that deepvm has no "
            f"record of (was the state directory lost?); run `deepvm down {name}` first"
        )
    keys = ensure_cluster_keys(name)
    report.step("preparing key pair, security group and launch template")
    spec = ClusterSpec(
        name=name,
        plan=plan,
        ssh_cidr=target.ssh_cidr(ctx, request.ssh_cidr),
        subnet_id=target.subnet(ctx, plan.availability_zone, request.subnet_id),
        image_id=target.image(ctx, request.image_id),
        ssh_user=target.ssh_user(request.ssh_user),
        ssh_public_key=keys.login_public,
        internal_public_key=keys.internal_public,
        launch_token=uuid.uuid4().hex,
        instance_profile=request.instance_profile,
    )
    store.put_cluster(
        ClusterRow(
            name,
            target.kind,
            "provisioning",
            plan,
            spec.launch_token,
            CloudResources(),
            spec.ssh_user,
            created_at=utc_now(),
        )
    )
    resources = CloudResources()
    try:
        # IAM first: a refusal costs nothing yet, and the role is recorded before any instance exists
        report.step("preparing the head node's IAM role and instance profile")
        controller = ensure_controller(ctx, name, request.controller_profile, request.instance_profile)
        resources = CloudResources().with_controller(controller)
        store.set_resources(name, resources)
        total = sum(g.count for g in plan.nodes)
        report.step(f"launching {total} nodes ({_summary(plan)}) in {plan.availability_zone}")
        outcome = run_instances(ctx, spec, all_or_nothing=request.on_shortage is not ShortagePolicy.ACCEPT)
        resources = outcome.resources.with_controller(controller)
        store.set_resources(name, resources)
        if outcome.shortfalls:
            text = "; ".join(s.describe() for s in outcome.shortfalls)
            store.add_event(name, "shortage", f"got {text}")
            if request.on_shortage is not ShortagePolicy.ACCEPT or not outcome.instance_ids:
                raise ShortageError(
                    f"not enough capacity in {plan.availability_zone}: got {text}; everything created was "
                    "deleted (--on-shortage accept keeps a smaller cluster, next-plan tries the next plan)"
                )
            report.step(f"accepting a smaller cluster: got {text}")
        infos = wait_instances(
            ctx, list(outcome.instance_ids), request.timeout_s, lambda n, t: report.count("running", n, t)
        )
        nodes = assign_roles(plan, infos, spec.ssh_user, target.ssh_port)
        store.put_nodes(name, nodes)
        head = head_node(nodes)
        if head is not None:  # no on-demand node (an accepted shortage): no controller rights anywhere
            attach_to_head(ctx, controller, head.instance_id)
            store.add_event(name, "controller-profile", f"{controller.profile} on the head {head.instance_id}")
        if request.wait_ssh:  # else the first command that needs the nodes pins them (ssh_endpoints)
            pin_nodes(ctx, name, nodes, request.timeout_s, lambda n, t: report.count("host keys pinned", n, t))
            wait_reachable(
                _endpoints(keys, nodes),
                request.timeout_s,
                lambda n, t: report.count("reachable over SSH", n, t),
            )
        store.set_status(name, "up", f"{len(nodes)} nodes up")
    except BaseException as exc:
        report.step(f"cleaning up after: {exc or type(exc).__name__}")
        try:
            _destroy(
                store, name, target, [plan.region], resources, report, final_status="failed", reason=str(exc)
            )
        except (CloudError, BotoCoreError, ClientError) as cleanup:
            raise CloudError(f"{exc}; cleaning up after it failed too: {cleanup}") from exc
        raise
    row = store.cluster(name)
    assert row is not None
    return UpResult(
        _view(store, row, refresh=False), created=True, plan_index=index, shortfalls=outcome.shortfalls
    )


def assign_roles(plan: Plan, infos: list[InstanceInfo], ssh_user: str, ssh_port: int) -> list[NodeRecord]:
    """Give each instance the role and planned price of the plan group it fills (matched by type and
    market, in plan order; with an accepted shortage the later nodes of a group are the missing ones)."""
    free = sorted(infos, key=lambda i: i.launched_at)
    nodes = []
    for group in plan.nodes:
        for _ in range(group.count):
            match = next(
                (i for i in free if (i.instance_type, i.market) == (group.instance_type, group.market)), None
            )
            if match is None:
                break
            free.remove(match)
            nodes.append(
                NodeRecord(
                    instance_id=match.instance_id,
                    instance_type=match.instance_type,
                    market=match.market,
                    role=group.role,
                    availability_zone=match.availability_zone,
                    state=match.state,
                    private_ip=match.private_ip,
                    public_ip=match.public_ip,
                    usd_per_hour=group.usd_per_hour,
                    launched_at=match.launched_at,
                    ssh_user=ssh_user,
                    ssh_port=ssh_port,
                )
            )
    if free:
        raise CloudError(
            f"EC2 launched instances the plan did not ask for: {', '.join(i.instance_id for i in free)}"
        )
    return nodes


def add_nodes(
    name: str,
    role: Role = Role.TRAINER,
    count: int = 1,
    report: Reporter = Reporter(),
    timeout_s: float = 900.0,
    inside_cluster: bool = False,
) -> list[NodeRecord]:
    """Buy `count` more nodes like the plan's nodes of `role`, in their market (a spot trainer after an
    interruption, an on-demand holder that died), from the cluster's own launch template; return them
    once they answer over SSH. `inside_cluster`: the caller runs on a node of the cluster (the managed
    controller on the head), which reaches the others at their private addresses, not the public ones."""
    name = check_cluster_name(name)
    with cluster_lock(name):
        store = Store()
        row = store.cluster(name)
        if row is None or row.status != "up":
            raise NotFoundError(f"no running cluster named {name!r}")
        group = next((g for g in row.plan.nodes if g.role is role), None)
        if group is None:
            raise InputError(f"cluster {name}'s plan has no {role.value} nodes to replace")
        target = target_for(row.cloud)
        ctx = _context(target, row.region)
        report.step(f"launching {count} replacement {group.market.value} {group.instance_type} ({role.value})")
        outcome = add_instances(
            ctx, name, row.resources, row.availability_zone, replace(group, count=count), uuid.uuid4().hex
        )
        store.set_resources(name, outcome.resources)
        if outcome.shortfalls:
            store.add_event(name, "shortage", "; ".join(s.describe() for s in outcome.shortfalls))
        if not outcome.instance_ids:
            raise ShortageError(
                f"no replacement launched: {'; '.join(s.describe() for s in outcome.shortfalls)}"
            )
        infos = wait_instances(
            ctx, list(outcome.instance_ids), timeout_s, lambda n, t: report.count("running", n, t)
        )
        wanted = replace(row.plan, nodes=(replace(group, count=len(infos)),))
        added = assign_roles(wanted, infos, row.ssh_user, target.ssh_port)
        if inside_cluster:
            added = [private_only(n) for n in added]
        store.put_nodes(name, added)
        store.add_event(name, "replacement", f"added {', '.join(n.instance_id for n in added)}")
        running = [n for n in store.nodes(name) if n.state == _RUNNING]
        keys = pin_nodes(ctx, name, running, timeout_s, lambda n, t: report.count("host keys pinned", n, t))
        wait_reachable(
            _endpoints(keys, added), timeout_s, lambda n, t: report.count("reachable over SSH", n, t)
        )
        return added


def private_only(node: NodeRecord) -> NodeRecord:
    """The node as a machine inside its cluster's network sees it: reached at its private address."""
    return replace(node, public_ip=None)


def retire_nodes(name: str, instance_ids: list[str], why: str) -> None:
    """Terminate nodes the cluster no longer uses (a node that hangs or stopped answering) while the rest
    runs on: EC2 bills a running instance whether or not it is any use, and `deepvm down` may be hours
    away. Not under the cluster lock: a replacement being bought holds it for minutes, and terminating
    instances twice (or racing `down`) is harmless."""
    if not instance_ids:
        return
    store = Store()
    row = store.cluster(check_cluster_name(name))
    if row is None or row.status != "up":
        return  # torn down meanwhile: nothing of it runs any more
    target = target_for(row.cloud)
    ctx = target.context(row.region, start=False)
    if ctx is None:  # a sandbox that was stopped took its hosts with it
        return
    with cloud_errors(f"terminating {', '.join(instance_ids)}"):
        answer = ctx.client("ec2").terminate_instances(InstanceIds=instance_ids)
    states = {i["InstanceId"]: i["CurrentState"]["Name"] for i in answer.get("TerminatingInstances", [])}
    retired = [replace(n, state=states.get(n.instance_id, "shutting-down"))
               for n in store.nodes(name) if n.instance_id in instance_ids]  # fmt: skip
    store.put_nodes(name, retired)  # closes their cost segments
    store.add_event(name, "retired", f"terminated {', '.join(instance_ids)}: {why}")
    target.after_terminate(instance_ids)


def node_env(name: str) -> dict[str, str]:
    """What AWS clients on the cluster's nodes need in their environment (see CloudTarget.node_env)."""
    row = Store().cluster(check_cluster_name(name))
    if row is None:
        raise NotFoundError(f"no cluster named {name!r}")
    return target_for(row.cloud).node_env(row.region)


def controller_env(name: str) -> dict[str, str]:
    """What the managed controller's AWS clients on the head need (see CloudTarget.controller_env)."""
    row = Store().cluster(check_cluster_name(name))
    if row is None:
        raise NotFoundError(f"no cluster named {name!r}")
    return target_for(row.cloud).controller_env(row.region)


# status


def status(name: str | None = None, refresh: bool = True) -> list[ClusterView]:
    """The named cluster, or every cluster that is not terminated, with node states read from the cloud."""
    store = Store()
    if name is not None:
        row = store.cluster(check_cluster_name(name))
        if row is None:
            raise NotFoundError(f"no cluster named {name!r}; `deepvm status` lists the clusters")
        rows = [row]
    else:
        rows = [r for r in store.clusters() if r.status != "terminated"]
    return [_view(store, r, refresh=refresh and r.status == "up") for r in rows]


def ssh_endpoints(name: str) -> list[SshEndpoint]:
    """How to log in to each running node of a cluster (for the training launcher)."""
    store = Store()
    row = store.cluster(check_cluster_name(name))
    if row is None or row.status != "up":
        raise NotFoundError(f"no running cluster named {name!r}; start one with `deepvm up --name {name}`")
    nodes = [n for n in store.nodes(name) if n.state == _RUNNING]
    keys = ensure_cluster_keys(name)
    if write_known_hosts(keys, nodes):  # nodes with no pinned host key: take those their consoles show now
        ctx = target_for(row.cloud).context(row.region, start=False)
        if ctx is not None:
            pin_nodes(ctx, name, nodes, timeout_s=None)
    return _endpoints(keys, nodes)


def _view(store: Store, row: ClusterRow, refresh: bool) -> ClusterView:
    refreshed = False
    if refresh:
        refreshed = _refresh_nodes(store, row)
        row = store.cluster(row.name) or row
    nodes = store.nodes(row.name)
    now = datetime.now(timezone.utc)
    running = [n for n in nodes if n.state == _RUNNING]
    started = datetime.fromisoformat(row.created_at)
    return ClusterView(
        cluster=row,
        nodes=nodes,
        usd_per_hour=sum(n.usd_per_hour for n in running),
        cost_so_far=store.cost_so_far(row.name, now),
        uptime_s=(now - started).total_seconds() if row.status == "up" else 0.0,
        refreshed=refreshed,
    )


def _refresh_nodes(store: Store, row: ClusterRow) -> bool:
    """Update stored node states from the cloud; False when the cloud cannot be asked."""
    ctx = target_for(row.cloud).context(row.region, start=False)
    if ctx is None:  # a sandbox whose control plane is gone: so are its instances
        store.close_costs(row.name)
        store.set_status(row.name, "terminated", "the sandbox was stopped")
        return True
    nodes = store.nodes(row.name)
    try:
        with cloud_errors("reading node states"):
            seen = {i.instance_id: i for i in describe(ctx, [n.instance_id for n in nodes])}
            tagged = query_instances(ctx, row.name)
    except CloudError:
        return False
    store.put_nodes(
        row.name,
        [
            replace(n, state=seen[n.instance_id].state if n.instance_id in seen else "terminated")
            for n in nodes
        ],
    )
    known = {n.instance_id for n in nodes}
    adopted = adopt(row, [i for i in tagged if i.instance_id not in known])
    if adopted:
        store.put_nodes(row.name, adopted)
        running = [n for n in store.nodes(row.name) if n.state == _RUNNING]  # pin their host keys here too
        write_known_hosts(ensure_cluster_keys(row.name), running)
    return True


def adopt(row: ClusterRow, infos: list[InstanceInfo]) -> list[NodeRecord]:
    """Records for instances of the cluster that this store did not buy (the managed controller on the
    head bought them as replacements): each takes the role and price of the plan group of its type and
    market. Instances that fit no group are not the cluster's nodes and are left out (`down` sweeps them
    by tag all the same)."""
    groups = {(g.instance_type, g.market): g for g in row.plan.nodes}
    adopted = []
    for info in infos:
        group = groups.get((info.instance_type, info.market))
        if group is not None:
            adopted.append(NodeRecord(info.instance_id, info.instance_type, info.market, group.role,
                                      info.availability_zone, info.state, info.private_ip, info.public_ip,
                                      group.usd_per_hour, info.launched_at, row.ssh_user,
                                      target_for(row.cloud).ssh_port))  # fmt: skip
    return adopted


# down


def down(
    name: str, cloud: str = "auto", region: str | None = None, report: Reporter = Reporter()
) -> DownResult:
    """Delete everything of the cluster, recorded or only tagged; safe to run again."""
    name = check_cluster_name(name)
    with cluster_lock(name):
        store = Store()
        row = store.cluster(name)
        if row is not None:
            target, regions, known = target_for(row.cloud), [row.region], row.resources
        else:
            target = resolve_target(cloud)
            regions, known = target.regions(region), CloudResources()
            if not any(_leftovers(target, r, name) for r in regions):
                where = ", ".join(regions) or "the sandbox"
                raise NotFoundError(
                    f"no cluster named {name!r}: not in the local state, and nothing tagged with it "
                    f"in {where}"
                )
        deleted = _destroy(store, name, target, regions, known, report)
    return DownResult(name=name, deleted=deleted, had_record=row is not None)


def _leftovers(target: CloudTarget, region: str, name: str) -> list[str]:
    ctx = target.context(region, start=False)
    return [] if ctx is None else leftovers(ctx, name)


def _destroy(
    store: Store,
    name: str,
    target: CloudTarget,
    regions: list[str],
    known: CloudResources,
    report: Reporter,
    final_status: str = "terminated",
    reason: str = "",
) -> list[str]:
    """Terminate and delete everything of the cluster in the regions; mark the record, forget its keys."""
    recorded = store.cluster(name) is not None
    if recorded:
        store.set_status(name, "terminating", "tearing down")
    deleted: list[str] = []
    incomplete: list[CloudError] = []
    for region in regions:
        ctx = target.context(region, start=False)
        if ctx is None:  # the sandbox is not running: nothing of it exists any more
            continue
        instance_ids = {n.instance_id for n in store.nodes(name)}
        with contextlib.suppress(CloudError):  # the teardown lists them again, with retries
            instance_ids |= {i.instance_id for i in query_instances(ctx, name)}
        try:
            deleted += terminate_cluster(ctx, name, known, on_step=report.step)
        except CloudError as exc:  # the other regions still go; the record and keys stay for a retry
            incomplete.append(exc)
            continue
        target.after_terminate(sorted(instance_ids))
    if incomplete:
        raise incomplete[0] if len(incomplete) == 1 else CloudError("\n".join(map(str, incomplete)))
    if recorded:
        store.close_costs(name)
        store.set_status(name, final_status, reason or f"deleted {len(deleted)} resources")
    forget_cluster_keys(name)
    return deleted


# interrupt


def interrupt(instance_id: str, after_s: int, fis_role_arn: str = "") -> tuple[str, CloudTarget]:
    """Send a Spot interruption to one node: notice now, interruption after `after_s` seconds."""
    store, cluster, row = _running_spot_node(instance_id)
    target = target_for(row.cloud)
    message = target.interrupt(_context(target, row.region), cluster, instance_id, after_s, fis_role_arn)
    store.add_event(cluster, "interrupt", message)
    return message, target


def terminate_without_notice(instance_id: str) -> str:
    """Take a Spot node away with no notice, as a reclaim that came too fast for one (`deepvm chaos`):
    the instance is terminated through the EC2 API, which ends every process on it at once."""
    store, cluster, row = _running_spot_node(instance_id)
    ctx = _context(target_for(row.cloud), row.region)
    with cloud_errors(f"terminating {instance_id}"):
        ctx.client("ec2").terminate_instances(InstanceIds=[instance_id])
    message = f"terminated {instance_id} without notice"
    store.add_event(cluster, "interrupt", message)
    return message


def _running_spot_node(instance_id: str) -> tuple[Store, str, ClusterRow]:
    """The store, cluster name and record of a running Spot node, or the one line that says why not."""
    store = Store()
    found = store.find_node(instance_id)
    if found is None:
        raise NotFoundError(f"no node {instance_id!r} in any cluster; `deepvm status` lists the node ids")
    cluster, node = found
    row = store.cluster(cluster)
    assert row is not None
    if node.market is not Market.SPOT:
        raise InputError(f"{instance_id} is an on-demand node; only spot nodes get interruption notices")
    if node.state != _RUNNING:
        raise CloudError(f"{instance_id} is {node.state}, not running")
    return store, cluster, row


def _context(target: CloudTarget, region: str) -> AwsContext:
    ctx = target.context(region)
    assert ctx is not None  # start=True always gives a context
    return ctx


def _endpoints(keys: ClusterKeys, nodes: list[NodeRecord]) -> list[SshEndpoint]:
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


def _summary(plan: Plan) -> str:
    return ", ".join(f"{g.count} {g.market.value} {g.instance_type} {g.role.value}" for g in plan.nodes)
