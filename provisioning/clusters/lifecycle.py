"""`deepvm up`, `status` and `down`: the provider, the state store and SSH put together.

Each public function is what one CLI command calls; `up` and `down` work by the cluster's name (before
`up` there is no record, and `down` must work without one); everything done to a cluster that runs goes
through its handle (cluster.py). They report progress through a `Reporter` (the CLI renders it) and
never print. Failure rule: whatever `up` created is deleted again before the error
reaches the user, and the store says so.
"""

from __future__ import annotations

import contextlib
import uuid
from dataclasses import dataclass, replace

from botocore.exceptions import BotoCoreError, ClientError

from provisioning.cloud.aws.context import AwsContext
from provisioning.cloud.aws.offerings import not_offered
from provisioning.cloud.aws.provider import (
    attach_to_head,
    attach_to_holders,
    ensure_controller,
    query_instances,
    run_instances,
    terminate_cluster,
    wait_instances,
)
from provisioning.cloud.aws.teardown import Leftover, clusters_named, leftovers
from provisioning.cloud.keys import ensure_cluster_keys, forget_cluster_keys
from provisioning.cloud.names import ClusterIdentity, check_cluster_id, check_cluster_name
from provisioning.cloud.pinning import pin_nodes
from provisioning.cloud.progress import Reporter
from provisioning.cloud.reachability import wait_reachable
from provisioning.cloud.types import (
    CloudKind,
    CloudResources,
    ClusterSpec,
    LaunchRefused,
    ShortageError,
    ShortagePolicy,
    Shortfall,
    Unlaunchable,
)
from provisioning.clusters.cost import ClusterCost
from provisioning.clusters.handle import Cluster, ClusterView, cluster_listing, started, target_for
from provisioning.clusters.head import head_node
from provisioning.clusters.noderecords import assign_roles, endpoints
from provisioning.clusters.store import ClusterBill, ClusterRow, ClusterStatus, Store, cluster_lock, utc_now
from provisioning.clusters.target import CloudTarget, resolve_target
from provisioning.core.db import StateFileError
from provisioning.core.errors import CloudError, InputError, NotFoundError
from provisioning.planner.plan import Plan, Role


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
    unreadable_state: str = ""  # what is wrong with the state file, when it could not be read
    cost: ClusterCost | None = None  # what it cost in all and how long it ran; None without a record
    cloud: CloudKind | None = None  # None only before it is known
    outputs_kept: str = ""  # the outputs bucket that `--keep-outputs` kept ("" none)


# up


def up(target: CloudTarget, request: UpRequest, report: Reporter = Reporter()) -> UpResult:
    """Launch the cluster, or return it unchanged when it already runs (`up` twice is one cluster)."""
    name = check_cluster_name(request.name)
    if not request.plans:
        raise InputError("no plan to launch")
    with cluster_lock(name):
        store = Store()
        existing = store.cluster(name)
        if existing and existing.status is ClusterStatus.UP:
            return UpResult(view=Cluster(store, existing).view(refresh=True), created=False)
        if existing and existing.status not in (ClusterStatus.FAILED, ClusterStatus.TERMINATED):
            report.step(f"cleaning up an interrupted earlier attempt of {name}")
            _destroy(
                store,
                existing.identity,
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
    ctx = started(target, plan.region)
    # a new id for every cluster `up` makes: its cloud names and tags are its own, whoever else in the
    # account has a cluster of this name (provisioning.cloud.names)
    identity = ClusterIdentity.new(name)
    others = [c.cluster_id or "none" for c in clusters_named(ctx, name)]
    if others:  # not refused: they may be another user's; but if they are a lost record's, they bill
        report.step(
            f"other clusters named {name} are in {plan.region} (ids {', '.join(others)}): another "
            f"user's, or ones this machine has no record of (`deepvm down {name} --cluster-id ID`)"
        )
    image = target.image(ctx, plan, request.image_id)  # refused (a plan it cannot serve): nothing made
    _check_offered(ctx, plan)
    ssh_cidr = target.ssh_cidr(ctx, request.ssh_cidr)
    subnet_id = target.subnet(ctx, plan.availability_zone, request.subnet_id, ssh_cidr)
    keys = ensure_cluster_keys(name)
    report.step("preparing key pair, security group and launch template")
    spec = ClusterSpec(
        name=name,
        plan=plan,
        ssh_cidr=ssh_cidr,
        subnet_id=subnet_id,
        image_id=image.image_id,
        ssh_user=target.ssh_user(request.ssh_user),
        ssh_public_key=keys.login_public,
        internal_public_key=keys.internal_public,
        launch_token=uuid.uuid4().hex,
        instance_profile=request.instance_profile,
        cluster_id=identity.cluster_id,
    )
    store.put_cluster(
        ClusterRow(
            name,
            target.kind,
            ClusterStatus.PROVISIONING,
            plan,
            spec.launch_token,
            CloudResources(),
            spec.ssh_user,
            created_at=utc_now(),
            cluster_id=identity.cluster_id,
            node_python=image.python,
        )
    )
    resources = CloudResources()
    try:
        # IAM first: a refusal costs nothing yet, and the role is recorded before any instance exists
        report.step("preparing the head node's IAM role and instance profile")
        holders = any(g.role is Role.HOLDER for g in plan.nodes)  # holders besides the head: their own role
        controller = ensure_controller(ctx, identity, request.controller_profile, request.instance_profile, holders)
        resources = CloudResources().with_controller(controller)
        store.set_resources(name, resources)
        total = sum(g.count for g in plan.nodes)
        report.step(f"launching {total} nodes ({_summary(plan)}) in {plan.availability_zone}")

        def record(created: CloudResources) -> None:  # every id at once: the cleanup below deletes by them
            nonlocal resources
            resources = created.with_controller(controller)
            store.set_resources(name, resources)

        outcome = run_instances(ctx, spec, request.on_shortage is not ShortagePolicy.ACCEPT, record)
        if outcome.shortfalls:
            text = "; ".join(s.describe() for s in outcome.shortfalls)
            store.add_event(name, "shortage", f"got {text}")
            if outcome.refusal:  # no other plan, zone or retry changes it: nothing is tried again
                raise LaunchRefused(f"EC2 refused to launch {outcome.refusal}; everything created was deleted")
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
            others = [n.instance_id for n in nodes if n.role is Role.HOLDER and n.instance_id != head.instance_id]
            attach_to_holders(ctx, controller, others)
        if request.wait_ssh:  # else the first command that needs the nodes pins them (Cluster.endpoints)
            pin_nodes(ctx, name, nodes, request.timeout_s, lambda n, t: report.count("host keys pinned", n, t))
            wait_reachable(
                endpoints(keys, nodes),
                request.timeout_s,
                lambda n, t: report.count("reachable over SSH", n, t),
            )
        store.set_status(name, ClusterStatus.UP, f"{len(nodes)} nodes up")
    except BaseException as exc:
        report.step(f"cleaning up after: {exc or type(exc).__name__}")
        try:
            _destroy(
                store,
                identity,
                target,
                [plan.region],
                resources,
                report,
                final_status=ClusterStatus.FAILED,
                reason=str(exc),
            )
        except (CloudError, BotoCoreError, ClientError) as cleanup:
            raise CloudError(f"{exc}; cleaning up after it failed too: {cleanup}") from exc
        raise
    row = store.cluster(name)
    assert row is not None
    return UpResult(
        Cluster(store, row).view(refresh=False), created=True, plan_index=index, shortfalls=outcome.shortfalls
    )


def _check_offered(ctx: AwsContext, plan: Plan) -> None:
    """Unlaunchable (a shortage: next-plan goes on) when a type of the plan is not launched in its zone."""
    missing = not_offered(ctx, plan.availability_zone, list(dict.fromkeys(g.instance_type for g in plan.nodes)))
    if missing:
        roles = ", ".join(f"{g.role.value}s ({g.instance_type})" for g in plan.nodes if g.instance_type in missing)
        raise Unlaunchable(
            f"the plan's {roles} cannot launch in {plan.availability_zone}: EC2 does not offer "
            f"{', '.join(missing)} there (DescribeInstanceTypeOfferings); nothing was created "
            "(--on-shortage next-plan tries the next plan)"
        )


# status


def status(name: str | None = None, refresh: bool = True) -> list[ClusterView]:
    """The named cluster, or every cluster that is not terminated, with node states read from the cloud."""
    if name is not None:
        return [Cluster.open(name).view(refresh)]
    store = Store()
    rows = [r for r in store.clusters() if r.status is not ClusterStatus.TERMINATED]
    return [Cluster(store, r).view(refresh) for r in rows]


def cost_report() -> list[ClusterBill]:
    """Every cluster ever recorded with what it cost (`deepvm cost-report`). The ones that are up are read
    again from the cloud first: a node found gone stops counting, one the head bought starts."""
    store = Store()
    for row in store.clusters():
        if row.status is ClusterStatus.UP:
            Cluster(store, row).refresh()
    return store.bills()


# down


def down(
    name: str,
    cloud: str = "auto",
    region: str | None = None,
    report: Reporter = Reporter(),
    cluster_id: str = "",
    keep_outputs: bool = False,
) -> DownResult:
    """Delete everything of the cluster, recorded or only tagged; safe to run again. A state file that
    cannot be read is passed over: the cluster is then found by its tags, as when the file is gone
    (`cluster_id` picks one when other clusters of that name are tagged there too)."""
    name = check_cluster_name(name)
    with cluster_lock(name):
        store, unreadable = _readable_store(name)
        row = store.cluster(name) if store is not None else None
        if row is not None:
            target, regions, known, identity = target_for(row.cloud), [row.region], row.resources, row.identity
        else:
            target = resolve_target(cloud)
            regions, known = target.regions(region), CloudResources()
            identity, _ = tagged_with(name, target, regions, store, unreadable, cluster_id)  # NotFoundError if none
        deleted = _destroy(store, identity, target, regions, known, report, keep_outputs=keep_outputs)
        cost = store.cost(name) if store is not None and row is not None else None
    return DownResult(
        name=name,
        deleted=deleted,
        had_record=row is not None,
        unreadable_state=unreadable,
        cost=cost,
        cloud=target.kind,
        outputs_kept=known.outputs_bucket if keep_outputs else "",
    )


def tagged_with(
    name: str,
    target: CloudTarget,
    regions: list[str],
    store: Store | None,
    unreadable: str = "",
    cluster_id: str = "",
) -> tuple[ClusterIdentity, list[Leftover]]:
    """The cluster called `name` that is tagged in `regions` of `target` (for a cluster without a record)
    and what is tagged with it; a NotFoundError that lists the clusters the local state has when there is
    none, an InputError listing their ids when there are several and `cluster_id` picks none of them
    (another user of the account may own one: `down` never guesses)."""
    where = ", ".join(regions) or "the sandbox"
    named = list(dict.fromkeys(c for r in regions for c in _clusters_named(target, r, name)))
    if cluster_id:
        named = [c for c in named if c.cluster_id == check_cluster_id(cluster_id)]
    found = [(c, [item for r in regions for item in _leftovers(target, r, c)]) for c in named]
    found = [(c, items) for c, items in found if items]
    if not found:
        which = f"{name!r} with id {cluster_id}" if cluster_id else repr(name)
        raise NotFoundError(
            f"no cluster named {which}: not in the local state, and nothing tagged with it "
            f"in {where}" + (f"; {cluster_listing(store)}" if store is not None else f" ({unreadable})")
        )
    if len(found) > 1:
        ids = ", ".join(c.cluster_id or "none (made before ids)" for c, _ in found)
        pick = next(c.cluster_id for c, _ in found if c.cluster_id)
        raise InputError(
            f"{len(found)} clusters named {name} are tagged in {where} (ids: {ids}), and this machine "
            "has no record of any; another user of the account may own some: pick one with "
            f"`deepvm down {name} --cluster-id {pick}`"
        )
    return found[0]


@dataclass(frozen=True)
class DownPreview:
    """What `down NAME` would delete, found before it asks: the recorded cluster, or (without a readable
    record) what is tagged with it in the cloud."""

    cluster: Cluster | None
    tagged: tuple[Leftover, ...] = ()


def down_preview(name: str, cloud: str = "auto", region: str | None = None, cluster_id: str = "") -> DownPreview:
    """The cluster `down` would delete; NotFoundError (listing the clusters there are) when there is none,
    so that nobody is asked to confirm deleting nothing."""
    store, unreadable = _readable_store(check_cluster_name(name))
    found = Cluster.find(name, store) if store is not None else None
    if found is not None:
        return DownPreview(found)
    target = resolve_target(cloud)
    _, tagged = tagged_with(name, target, target.regions(region), store, unreadable, cluster_id)
    return DownPreview(None, tuple(tagged))


def _readable_store(name: str) -> tuple[Store | None, str]:
    """The store with the cluster's record and nodes readable, or None and what is wrong with the file."""
    try:
        store = Store()
        store.cluster(name)
        store.nodes(name)
    except StateFileError as exc:
        return None, exc.problem
    return store, ""


def _leftovers(target: CloudTarget, region: str, cluster: ClusterIdentity) -> list[Leftover]:
    ctx = target.context(region, start=False)
    return [] if ctx is None else leftovers(ctx, cluster)


def _clusters_named(target: CloudTarget, region: str, name: str) -> list[ClusterIdentity]:
    ctx = target.context(region, start=False)
    return [] if ctx is None else clusters_named(ctx, name)


def _unended(known: CloudResources, record: Store | None, name: str) -> CloudResources:
    """The resources to tear down without the instances the record has seen terminated: they never run
    again, and asking for each by id once AWS has forgotten them would cost a call per node ever launched."""
    if record is None:
        return known
    ended = {n.instance_id for n in record.nodes(name) if n.state == "terminated"}
    return replace(known, instance_ids=tuple(i for i in known.instance_ids if i not in ended))


def _destroy(
    store: Store | None,
    cluster: ClusterIdentity,
    target: CloudTarget,
    regions: list[str],
    known: CloudResources,
    report: Reporter,
    final_status: ClusterStatus = ClusterStatus.TERMINATED,
    reason: str = "",
    keep_outputs: bool = False,
    ended_at: str | None = None,
) -> list[str]:
    """Terminate and delete everything of the cluster in the regions (its outputs bucket unless `keep_outputs`);
    mark the record (if there is a readable one; its costs end at `ended_at`, by default now), forget its keys."""
    name = cluster.name
    record = store if store is not None and store.cluster(name) is not None else None
    if record is not None:
        record.set_status(name, ClusterStatus.TERMINATING, "tearing down")
    deleted: list[str] = []
    incomplete: list[CloudError] = []
    for region in regions:
        ctx = target.context(region, start=False)
        if ctx is None:  # the sandbox is not running: nothing of it exists any more
            continue
        instance_ids = {n.instance_id for n in record.nodes(name)} if record is not None else set()
        instance_ids |= set(known.instance_ids)
        with contextlib.suppress(CloudError):  # the teardown lists them again, with retries
            instance_ids |= {i.instance_id for i in query_instances(ctx, cluster)}
        try:
            deleted += terminate_cluster(
                ctx, cluster, _unended(known, record, name), on_step=report.step, keep_outputs=keep_outputs
            )
        except CloudError as exc:  # the other regions still go; the record and keys stay for a retry
            incomplete.append(exc)
            continue
        target.after_terminate(sorted(instance_ids))
    if incomplete:
        raise incomplete[0] if len(incomplete) == 1 else CloudError("\n".join(map(str, incomplete)))
    if record is not None:
        record.close_costs(name, ended_at)
        record.set_status(name, final_status, reason or f"deleted {len(deleted)} resources")
    forget_cluster_keys(name)
    return deleted


def finish_down(
    row: ClusterRow, store: Store, reason: str, ended_at: str | None, report: Reporter = Reporter()
) -> list[str]:
    """The rest of `down` for a cluster its head took down (or whose head died): whatever of it is left (its
    instances, fleets, template, security group, key pair, IAM roles) is deleted, its outputs bucket kept; its
    record ends at `ended_at` (the head's time) with `reason`. What was deleted."""
    with cluster_lock(row.name):
        return _destroy(
            store,
            row.identity,
            target_for(row.cloud),
            [row.region],
            row.resources,
            report,
            reason=reason,
            keep_outputs=True,
            ended_at=ended_at,
        )


def _summary(plan: Plan) -> str:
    return ", ".join(f"{g.count} {g.market.value} {g.instance_type} {g.role.value}" for g in plan.nodes)
