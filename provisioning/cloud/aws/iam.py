"""The cluster's IAM roles: the head's controller role, the other checkpoint holders' role, and the per-job
S3 policy both get at `train`.

The job's controller runs on the head node (`provisioning.clusters.head.head_node`) and must, with no copied
credentials, describe the cluster's instances, buy replacements from the cluster's launch template, read
their console output (where each prints its SSH host key) and terminate the cluster's instances. `up` makes
a role with exactly that policy (provisioning.cloud.aws.policies), limited by the cluster's tag, and an
instance profile of the same name, and associates the profile with the head once it runs
(provisioning.cloud.aws.profiles) — never through the launch template, so trainers get no EC2 rights. A user
who may not create IAM roles names an existing profile instead (`--controller-profile`); deepvm then creates
nothing here and deletes nothing at `down`.

S3 (DeepCheck's L3, the job's log mirror): the prefix is chosen per job, at `train`, while the roles are made
at `up`; so `train` writes one more inline policy, `deepvm-job-storage`, on the head's role and on the
holders' role, naming exactly that job's areas (and deletes it for a job without them). Why a policy per job
rather than a bucket per cluster: the job names its own bucket (often one that outlives every cluster), and
a later job on the same cluster must not keep the earlier job's rights. A bucket deepvm makes for a cluster
(issue 25's outputs) is one more area of the same policy. The holders other than the head get deepvm's
holders role (associated at `up`, and by the head when it buys a holder), since their launch template
profile is the user's `--instance-profile`, which deepvm cannot see into; trainers keep that profile, and
need S3 only to read a dataset.

Every IAM resource made here carries the cluster's tags and lives under the path /deepvm/, and its name is
fixed per cluster and region, so the teardown sweep finds it with no local state, and never deletes a role
of that name that deepvm did not tag.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from botocore.exceptions import ClientError

from provisioning.cloud.aws.context import AwsContext, error_code, partition_of
from provisioning.cloud.aws.leftover import Leftover
from provisioning.cloud.aws.policies import (
    CONTROLLER_POLICY,
    JOB_STORAGE_POLICY,
    OUTPUTS_POLICY,
    controller_policy,
    job_storage_policy,
    trust_policy,
)
from provisioning.cloud.names import CLUSTER_ID_TAG, CLUSTER_TAG, IAM_PATH, ClusterIdentity, cluster_tags, role_name
from provisioning.cloud.types import ControllerAccess, JobStorage, S3Area
from provisioning.core.errors import CloudError

DENIED = ("AccessDenied", "AccessDeniedException", "UnauthorizedOperation")
README_SECTION = 'README §"What deepvm needs from your AWS account"'
_KINDS = ("controller", "holders")


def ensure_controller(
    ctx: AwsContext,
    cluster: ClusterIdentity,
    user_profile: str | None,
    node_profile: str | None,
    with_holders: bool = False,
) -> ControllerAccess:
    """The head's instance profile: the user's `--controller-profile` as given, else deepvm's own role and
    profile for the cluster, created or brought up to date (a rerun after a crash reuses them); with
    `with_holders` (the plan has holders besides the head), also the holders' role and profile.

    Raises a CloudError that says to pass --controller-profile when IAM refuses.
    """
    if user_profile:
        return ControllerAccess(profile=user_profile)
    iam = ctx.client("iam")
    name = role_name(cluster, ctx.region, "controller")
    holders = role_name(cluster, ctx.region, "holders") if with_holders else ""
    try:
        node_role = _profile_role_arn(iam, node_profile) if node_profile else None
        holders_arn = _ensure_role(iam, cluster, holders, "the checkpoint holders but the head") if holders else None
        own_arn = _ensure_role(iam, cluster, name, "the controller, on its head node")
        iam.put_role_policy(
            RoleName=name,
            PolicyName=CONTROLLER_POLICY,
            PolicyDocument=json.dumps(controller_policy(cluster, ctx.region, node_role, holders_arn, own_arn)),
        )
    except ClientError as exc:
        code = error_code(exc)
        if code in DENIED:
            raise CloudError(
                f"cannot create the controller's IAM role ({code}); ask for an instance profile with the "
                f"policy in {README_SECTION}, and pass --controller-profile NAME"
            ) from exc
        raise CloudError(f"creating the controller's IAM role {name}: {code}: {exc}") from exc
    return ControllerAccess(profile=name, role=name, owned=True, holders=holders)


def _ensure_role(iam: Any, cluster: ClusterIdentity, name: str, what: str) -> str:
    """Role and instance profile `name` (the role in the profile), made if missing; the role's ARN."""
    tags = cluster_tags(cluster, Name=name)
    _create_if_missing(
        lambda: iam.create_role(
            RoleName=name,
            Path=IAM_PATH,
            AssumeRolePolicyDocument=json.dumps(trust_policy()),
            Description=f"deepvm: {what} of cluster {cluster.describe()}",
            Tags=tags,
        )
    )
    _create_if_missing(lambda: iam.create_instance_profile(InstanceProfileName=name, Path=IAM_PATH, Tags=tags))
    role = _tagged(cluster, lambda: iam.get_role(RoleName=name)["Role"])
    profile = _tagged(cluster, lambda: iam.get_instance_profile(InstanceProfileName=name)["InstanceProfile"])
    for kind, entity in (("role", role), ("instance profile", profile)):
        if entity is None:  # someone else's of that name: never take it over
            raise CloudError(
                f"an IAM {kind} named {name} exists that deepvm did not make for cluster {cluster.describe()}; "
                "delete it, or pass it as --controller-profile NAME"
            )
    assert role is not None and profile is not None
    if name not in {r["RoleName"] for r in profile["Roles"]}:
        iam.add_role_to_instance_profile(InstanceProfileName=name, RoleName=name)
    return str(role["Arn"])


def put_job_storage(ctx: AwsContext, access: ControllerAccess, storage: JobStorage | None) -> None:
    """Give deepvm's roles of the cluster exactly the job's S3 areas (the head's role its own and the
    holders', the holders' role theirs), replacing an earlier job's; None takes them away. A user's
    --controller-profile is not touched. IAM applies a changed policy within seconds
    (https://docs.aws.amazon.com/IAM/latest/UserGuide/troubleshoot_general.html#troubleshoot_general_eventual-consistency):
    before the job's first checkpoint reaches L3."""
    if not access.owned:
        return
    iam = ctx.client("iam")
    for role, areas in (
        (access.role, storage.head_areas if storage else ()),
        (access.holders, storage.holders if storage else ()),
    ):
        if not role:
            continue
        try:
            if areas:
                document = job_storage_policy(areas, partition_of(ctx.region))
                iam.put_role_policy(RoleName=role, PolicyName=JOB_STORAGE_POLICY, PolicyDocument=json.dumps(document))
            else:
                _gone_ok(lambda r=role: iam.delete_role_policy(RoleName=r, PolicyName=JOB_STORAGE_POLICY))
        except ClientError as exc:
            code = error_code(exc)
            fix = f"your credentials need iam:PutRolePolicy and iam:DeleteRolePolicy on it ({README_SECTION})"
            raise CloudError(
                f"cannot give the cluster's role {role} the job's S3 rights ({code}); "
                + (fix if code in DENIED else str(exc))
            ) from exc


def put_outputs_policy(ctx: AwsContext, access: ControllerAccess, bucket: str) -> None:
    """Let the head's role write the cluster's outputs bucket (the copies of a job's outputs at its end, the
    record of the cluster's end): an inline policy of its own, `deepvm-cluster-outputs`, on exactly that
    bucket, kept while the cluster lives (its jobs come and go; the bucket stays with the cluster). A user's
    --controller-profile is not touched."""
    if not access.owned:
        return
    document = job_storage_policy((S3Area(bucket, "", writes=True),), partition_of(ctx.region))
    try:
        ctx.client("iam").put_role_policy(
            RoleName=access.role, PolicyName=OUTPUTS_POLICY, PolicyDocument=json.dumps(document)
        )
    except ClientError as exc:
        raise CloudError(
            f"cannot let the cluster's role {access.role} write its outputs bucket {bucket} ({error_code(exc)})"
        ) from exc


def delete_controller(
    ctx: AwsContext, cluster: ClusterIdentity, known: ControllerAccess = ControllerAccess()
) -> list[str]:
    """Delete the cluster's controller and holders roles and profiles, found by name and checked by tag (a
    role of that name deepvm did not tag is left alone); already gone is success. A user's
    --controller-profile is never touched. When IAM may not even be read, deepvm could not have made them
    either: nothing to do, unless the record says deepvm did."""
    iam = ctx.client("iam")
    deleted: list[str] = []
    for name in _role_names(ctx, cluster, known):
        try:
            deleted += _delete_role_and_profile(iam, cluster, name)
        except ClientError as exc:
            if error_code(exc) in DENIED and not known.owned:
                return deleted
            raise CloudError(f"deleting the cluster's IAM role {name}: {error_code(exc)}") from exc
    return deleted


def _delete_role_and_profile(iam: Any, cluster: ClusterIdentity, name: str) -> list[str]:
    deleted = []
    profile = _tagged(cluster, lambda: iam.get_instance_profile(InstanceProfileName=name)["InstanceProfile"])
    if profile is not None:
        for role in profile["Roles"]:
            _gone_ok(
                lambda r=role: iam.remove_role_from_instance_profile(InstanceProfileName=name, RoleName=r["RoleName"])
            )
        if _gone_ok(lambda: iam.delete_instance_profile(InstanceProfileName=name)):
            deleted.append(f"IAM instance profile {name}")
    if _tagged(cluster, lambda: iam.get_role(RoleName=name)["Role"]) is not None:
        for policy in iam.list_role_policies(RoleName=name)["PolicyNames"]:
            _gone_ok(lambda p=policy: iam.delete_role_policy(RoleName=name, PolicyName=p))
        for other in iam.list_instance_profiles_for_role(RoleName=name)["InstanceProfiles"]:
            _gone_ok(
                lambda o=other: iam.remove_role_from_instance_profile(
                    InstanceProfileName=o["InstanceProfileName"], RoleName=name
                )
            )
        if _gone_ok(lambda: iam.delete_role(RoleName=name)):
            deleted.append(f"IAM role {name}")
    return deleted


def controller_leftovers(ctx: AwsContext, cluster: ClusterIdentity) -> list[Leftover]:
    """The cluster's roles and profiles, if they still exist ([] when IAM may not be read)."""
    iam = ctx.client("iam")
    found = []
    for name in _role_names(ctx, cluster):
        try:
            if _tagged(cluster, lambda n=name: iam.get_instance_profile(InstanceProfileName=n)["InstanceProfile"]):
                found.append(Leftover("IAM instance profile", name))
            if _tagged(cluster, lambda n=name: iam.get_role(RoleName=n)["Role"]):
                found.append(Leftover("IAM role", name))
        except ClientError as exc:
            if error_code(exc) in DENIED:
                return []
            raise CloudError(f"checking for the cluster's IAM role {name}: {error_code(exc)}") from exc
    return found


def identities_in_iam(ctx: AwsContext, name: str) -> list[ClusterIdentity]:
    """The clusters called `name` whose IAM roles for this region exist (for `down NAME` without a record:
    an `up` may have died after making them and before anything else); [] when IAM may not be read."""
    iam = ctx.client("iam")
    found: list[ClusterIdentity] = []
    try:
        pages = iam.get_paginator("list_roles").paginate(PathPrefix=IAM_PATH)
        candidates = [r["RoleName"] for page in pages for r in page["Roles"]]
        candidates.append(role_name(ClusterIdentity(name), ctx.region))  # from before ids: no path
        for candidate in dict.fromkeys(candidates):
            role = _tagged(ClusterIdentity(name), lambda c=candidate: iam.get_role(RoleName=c)["Role"], by_name=True)
            if role is None:
                continue
            tags = {t["Key"]: t["Value"] for t in role.get("Tags") or []}
            identity = ClusterIdentity(name, tags.get(CLUSTER_ID_TAG, ""))
            if candidate in {role_name(identity, ctx.region, kind) for kind in _KINDS}:  # this region's
                found.append(identity)
    except ClientError as exc:
        if error_code(exc) in DENIED:
            return []
        raise CloudError(f"listing deepvm's IAM roles: {error_code(exc)}") from exc
    return list(dict.fromkeys(found))


def _role_names(ctx: AwsContext, cluster: ClusterIdentity, known: ControllerAccess = ControllerAccess()) -> list[str]:
    """The names the cluster's roles have: as recorded, else as `up` names them."""
    named = [
        known.role if known.owned and known.role else role_name(cluster, ctx.region, "controller"),
        known.holders or role_name(cluster, ctx.region, "holders"),
    ]
    return list(dict.fromkeys(named))


def _profile_role_arn(iam: Any, profile: str) -> str | None:
    """The role inside an instance profile given by name or ARN (arn:...:instance-profile/PATH/NAME)."""
    name = profile.rsplit("/", 1)[-1] if profile.startswith("arn:") else profile
    roles = iam.get_instance_profile(InstanceProfileName=name)["InstanceProfile"]["Roles"]
    return roles[0]["Arn"] if roles else None


def _create_if_missing(create: Callable[[], object]) -> None:
    try:
        create()
    except ClientError as exc:
        if error_code(exc) != "EntityAlreadyExists":
            raise


def _tagged(
    cluster: ClusterIdentity, get: Callable[[], dict[str, Any]], by_name: bool = False
) -> dict[str, Any] | None:
    """The IAM entity if it exists and is the cluster's (by_name: carries the cluster's name, whatever
    its id), else None."""
    try:
        entity = get()
    except ClientError as exc:
        if error_code(exc) == "NoSuchEntity":
            return None
        raise
    tags = entity.get("Tags") or []
    if by_name:
        return entity if {t["Key"]: t["Value"] for t in tags}.get(CLUSTER_TAG) == cluster.name else None
    return entity if cluster.owns(tags) else None


def _gone_ok(call: Callable[[], object]) -> bool:
    """Run an IAM delete; True if it deleted something, False if it was already gone."""
    try:
        call()
        return True
    except ClientError as exc:
        if error_code(exc) == "NoSuchEntity":
            return False
        raise
