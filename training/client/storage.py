"""Before a job is staged: give the cluster's nodes exactly the job's S3 areas, or refuse a job whose L3
cannot work, with the fix, before anything is pushed or launched.

Who writes what (training.shared.storage): every checkpoint holder writes L3, and the head (which always
holds, and leads DeepCheck's holders) also commits its manifests and mirrors a managed job's log. The head
holds the controller's profile and the other holders deepvm's holders profile (provisioning.cloud.aws.iam);
`put_job_storage` writes the job's areas on both roles, replacing an earlier job's. What deepvm cannot
grant, it checks as far as it can see: a bucket that does not exist, or holders with no instance profile at
all, cannot work (refused); a profile the user made (`--controller-profile`, or `--instance-profile` on
holders of a cluster without deepvm's holders role) may or may not allow the areas (said, not refused).
"""

from __future__ import annotations

from botocore.exceptions import BotoCoreError, ClientError

from provisioning.cloud.aws.context import AwsContext, error_code
from provisioning.cloud.aws.iam import put_job_storage
from provisioning.cloud.aws.profiles import attach_profile, instance_profiles
from provisioning.cloud.types import ControllerAccess, JobStorage, NodeRecord, S3Area
from provisioning.clusters.handle import RUNNING, Cluster, started
from provisioning.clusters.head import head_node
from provisioning.core.errors import CloudError, InputError
from provisioning.planner.plan import Role
from training.shared.jobspec import JobSpec
from training.shared.storage import job_storage

_MISSING_BUCKET = ("404", "NoSuchBucket", "NotFound")


def ready_job_storage(cluster: Cluster, spec: JobSpec, head_reads: tuple[S3Area, ...] = ()) -> list[str]:
    """Grant the job's S3 areas to the cluster's roles (none: take an earlier job's away); what could not
    be checked, as warnings. Raises InputError, one line with the fix, when the job's L3 cannot work.
    `head_reads`: more areas the head reads (the checkpoint of a job resumed from another cluster)."""
    nodes = [n for n in cluster.nodes() if n.state == RUNNING]
    head = head_node(nodes)
    storage = job_storage(spec, head_trains=head is not None and head.role is Role.ANCHOR, head_reads=head_reads)
    access = cluster.row.resources.controller
    ctx = started(cluster.target, cluster.row.region)
    if storage is None:
        _put(ctx, access, None)
        return []
    for bucket in dict.fromkeys(a.bucket for a in storage.head_areas if a.writes):
        _check_bucket(ctx, bucket, spec)
    warnings = []
    holders = [n for n in nodes if n.role is Role.HOLDER and (head is None or n.instance_id != head.instance_id)]
    if storage.holders and holders:
        warnings += _ready_holders(ctx, cluster.name, access, holders, storage.holders[0])
    if not access.owned and access.profile:
        warnings.append(
            f"deepvm cannot see whether --controller-profile {access.profile} (the head's) may use "
            f"{_areas(storage.head_areas)}; the job's L3 and log need that"
        )
    _put(ctx, access, storage)
    return warnings


def _ready_holders(
    ctx: AwsContext, cluster: str, access: ControllerAccess, holders: list[NodeRecord], area: S3Area
) -> list[str]:
    """Holders besides the head: with deepvm's holders role, each gets its profile where it lacks it (a
    cluster whose holder was bought by an older deepvm); without one, a holder with no profile at all
    cannot write L3 (refused), and one with the user's profile may or may not (said)."""
    held = _profiles(ctx, [n.instance_id for n in holders])
    if access.holders:
        for node in holders:
            if not held.get(node.instance_id, "").endswith(f"/{access.holders}"):
                attach_profile(ctx, access.holders, node.instance_id)
        return []
    bare = [n.instance_id for n in holders if n.instance_id not in held]
    if bare:
        raise InputError(
            f"cluster {cluster}'s holder(s) {', '.join(bare)} have no instance profile, so they cannot write the "
            f"job's L3 to {_areas((area,))}: drop l3 from checkpoint.levels, or `deepvm up` the cluster again "
            "without --controller-profile (deepvm then gives its holders a role of their own) or with "
            "--instance-profile NAME for a role that may write there"
        )
    profiles = ", ".join(sorted(set(held.values())))
    return [
        f"deepvm cannot see whether the holders' instance profile ({profiles}) may write {_areas((area,))}; "
        "the job's L3 needs that"
    ]


def _profiles(ctx: AwsContext, instance_ids: list[str]) -> dict[str, str]:
    try:
        return instance_profiles(ctx, instance_ids)
    except (ClientError, BotoCoreError) as exc:
        raise CloudError(f"reading the holders' instance profiles: {exc}") from exc


def _check_bucket(ctx: AwsContext, bucket: str, spec: JobSpec) -> None:
    """Refuse a bucket that does not exist (one this caller may not see may still be the nodes')."""
    try:
        ctx.client("s3").head_bucket(Bucket=bucket)
    except ClientError as exc:
        if error_code(exc) in _MISSING_BUCKET:
            where = spec.checkpoint_plan.l3.url if spec.checkpoint_plan.l3 else f"s3://{bucket}"
            raise InputError(
                f"checkpoint.s3_prefix {where}: the bucket {bucket} does not exist; create it "
                f"(`aws s3 mb s3://{bucket} --region {ctx.region}`) or name another"
            ) from exc
    except BotoCoreError as exc:
        raise CloudError(f"checking the bucket {bucket}: {exc}") from exc


def _put(ctx: AwsContext, access: ControllerAccess, storage: JobStorage | None) -> None:
    try:
        put_job_storage(ctx, access, storage)
    except CloudError as exc:
        if storage is None:  # taking an earlier job's rights away is tidiness, not what this job needs
            return
        raise InputError(f"{exc}, or drop l3 from checkpoint.levels") from exc


def _areas(areas: tuple[S3Area, ...]) -> str:
    return ", ".join(f"s3://{a.bucket}/{a.prefix}" for a in areas)
