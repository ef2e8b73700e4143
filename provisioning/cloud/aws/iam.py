"""The controller's cloud rights: an IAM role and instance profile for the cluster's head node, and only it.

The job's controller runs on the head node (`provisioning.clusters.head.head_node`) and must, with no copied
credentials, describe the cluster's instances, buy replacements from the cluster's launch template, read
their console output (where each prints its SSH host key), terminate the cluster's instances and delete the
fleets it made. `up` makes a role with exactly that policy, limited by the cluster tag, and an instance
profile of the same name (`controller_name`), and associates the profile with the head once it runs — never
through the launch template, so trainers get no EC2 rights. A user who may not create IAM roles names an
existing profile instead (`--controller-profile`); deepvm then creates nothing here and deletes nothing at
`down`.

S3 is not in the policy yet: DeepCheck's L3 mirroring of the job's logs and state from the head is a later
addition (a statement limited to the job's bucket prefix).

Every IAM resource made here carries the cluster tag, and its name is fixed per cluster, so the teardown
sweep finds it with no local state, and never deletes a role of that name that deepvm did not tag.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from botocore.exceptions import ClientError

from provisioning.cloud.aws.context import AwsContext, error_code
from provisioning.cloud.aws.leftover import Leftover
from provisioning.cloud.names import CLUSTER_TAG, CONTROLLER_POLICY, cluster_tags, controller_name
from provisioning.cloud.types import ControllerAccess
from provisioning.core.errors import CloudError

DENIED = ("AccessDenied", "AccessDeniedException", "UnauthorizedOperation")
README_SECTION = 'README §"The head node\'s cloud rights"'
_PROPAGATION_S = 60.0  # IAM is eventually consistent: EC2 may not know a new profile for a few seconds

# Describe* actions support neither resource ARNs nor tag conditions on AWS, so they cannot be limited
# to the cluster: the head may read every instance and fleet of the account in any region. It may change
# only what carries the cluster's tag.
_DESCRIBE = (
    "ec2:DescribeInstances",
    "ec2:DescribeInstanceStatus",
    "ec2:DescribeFleets",
    "ec2:DescribeFleetInstances",
    "ec2:DescribeLaunchTemplates",
    "ec2:DescribeLaunchTemplateVersions",
)
_LAUNCH = ("ec2:CreateFleet", "ec2:RunInstances")


def trust_policy() -> dict[str, Any]:
    """Who may assume the role: EC2 instances (through the instance profile), nobody else."""
    return {
        "Version": "2012-10-17",
        "Statement": [
            {"Effect": "Allow", "Principal": {"Service": "ec2.amazonaws.com"}, "Action": "sts:AssumeRole"}
        ],
    }


def controller_policy(cluster: str, region: str, node_role_arn: str | None = None) -> dict[str, Any]:
    """The controller's inline policy: what it needs on the cluster, limited by the cluster tag.

    A replacement is an instant EC2 Fleet from the cluster's launch template (tagged with the cluster), and
    EC2 checks every resource of the launch against the policy: the template must carry the cluster tag,
    the instances, volumes, network interfaces and the fleet are created with it, and the template's AMI,
    subnet, security group and key pair may be used only through a launch template. Tags may be set only
    while creating. `node_role_arn` is the role of the nodes' own profile (`--instance-profile`), which is
    in the launch template: launching with it needs iam:PassRole for exactly that role, to EC2 only.
    """
    arn = f"arn:aws:ec2:{region}:*"
    tagged = {"StringEquals": {f"aws:RequestTag/{CLUSTER_TAG}": cluster}}
    owned = {"StringEquals": {f"ec2:ResourceTag/{CLUSTER_TAG}": cluster}}
    statements: list[dict[str, Any]] = [
        {"Sid": "DescribeTheCluster", "Effect": "Allow", "Action": list(_DESCRIBE), "Resource": "*"},
        {
            "Sid": "LaunchFromTheClusterTemplate",
            "Effect": "Allow",
            "Action": list(_LAUNCH),
            "Resource": f"{arn}:launch-template/*",
            "Condition": owned,
        },
        {
            "Sid": "LaunchClusterTaggedResources",
            "Effect": "Allow",
            "Action": list(_LAUNCH),
            "Resource": [f"{arn}:{kind}/*" for kind in ("fleet", "instance", "volume", "network-interface")],
            "Condition": tagged,
        },
        {
            "Sid": "LaunchWithTheTemplatesParts",
            "Effect": "Allow",
            "Action": list(_LAUNCH),
            "Resource": [
                f"{arn}:{kind}/*"
                for kind in ("image", "subnet", "security-group", "key-pair", "spot-instances-request")
            ],
            "Condition": {"ArnLike": {"ec2:LaunchTemplate": f"{arn}:launch-template/*"}},
        },
        {
            "Sid": "TagOnlyWhileLaunching",
            "Effect": "Allow",
            "Action": "ec2:CreateTags",
            "Resource": f"{arn}:*/*",
            "Condition": {
                "StringEquals": {f"aws:RequestTag/{CLUSTER_TAG}": cluster, "ec2:CreateAction": list(_LAUNCH)}
            },
        },
        {
            "Sid": "TerminateClusterInstances",
            "Effect": "Allow",
            "Action": "ec2:TerminateInstances",
            "Resource": f"{arn}:instance/*",
            "Condition": owned,
        },
        {
            # a replacement's host key is learnt from its console output (provisioning/cloud/pinning.py)
            "Sid": "ReadClusterConsoles",
            "Effect": "Allow",
            "Action": "ec2:GetConsoleOutput",
            "Resource": f"{arn}:instance/*",
            "Condition": owned,
        },
        {
            "Sid": "DeleteClusterFleets",
            "Effect": "Allow",
            "Action": "ec2:DeleteFleets",
            "Resource": f"{arn}:fleet/*",
            "Condition": owned,
        },
    ]
    if node_role_arn:
        statements.append(
            {
                "Sid": "PassTheNodesRoleToEc2",
                "Effect": "Allow",
                "Action": "iam:PassRole",
                "Resource": node_role_arn,
                "Condition": {"StringEquals": {"iam:PassedToService": "ec2.amazonaws.com"}},
            }
        )
    return {"Version": "2012-10-17", "Statement": statements}


def ensure_controller(
    ctx: AwsContext, cluster: str, user_profile: str | None, node_profile: str | None
) -> ControllerAccess:
    """The head's instance profile: the user's `--controller-profile` as given, else deepvm's own role and
    profile for the cluster, created or brought up to date (a rerun after a crash reuses them).

    Raises a CloudError that says to pass --controller-profile when IAM refuses.
    """
    if user_profile:
        return ControllerAccess(profile=user_profile)
    name = controller_name(cluster)
    iam = ctx.client("iam")
    tags = cluster_tags(cluster, Name=name)
    try:
        node_role = _profile_role_arn(iam, node_profile) if node_profile else None
        _create_if_missing(
            lambda: iam.create_role(
                RoleName=name,
                AssumeRolePolicyDocument=json.dumps(trust_policy()),
                Description=f"deepvm: the controller of cluster {cluster}, on its head node",
                Tags=tags,
            )
        )
        _create_if_missing(lambda: iam.create_instance_profile(InstanceProfileName=name, Tags=tags))
        for kind, get in (
            ("role", lambda: iam.get_role(RoleName=name)["Role"]),
            ("instance profile", lambda: iam.get_instance_profile(InstanceProfileName=name)["InstanceProfile"]),
        ):
            if _tagged(cluster, get) is None:  # someone else's of that name: never take it over
                raise CloudError(
                    f"an IAM {kind} named {name} exists that deepvm did not make for cluster {cluster}; "
                    "delete it, or pass it as --controller-profile NAME"
                )
        iam.put_role_policy(
            RoleName=name,
            PolicyName=CONTROLLER_POLICY,
            PolicyDocument=json.dumps(controller_policy(cluster, ctx.region, node_role)),
        )
        roles = iam.get_instance_profile(InstanceProfileName=name)["InstanceProfile"]["Roles"]
        if name not in {r["RoleName"] for r in roles}:
            iam.add_role_to_instance_profile(InstanceProfileName=name, RoleName=name)
    except ClientError as exc:
        code = error_code(exc)
        if code in DENIED:
            raise CloudError(
                f"cannot create the controller's IAM role ({code}); ask for an instance profile with the "
                f"policy in {README_SECTION}, and pass --controller-profile NAME"
            ) from exc
        raise CloudError(f"creating the controller's IAM role {name}: {code}: {exc}") from exc
    return ControllerAccess(profile=name, role=name, owned=True)


def attach_to_head(ctx: AwsContext, access: ControllerAccess, instance_id: str) -> None:
    """Give the head node the controller's profile. A head launched with the nodes' own profile
    (`--instance-profile`) has it replaced: an instance holds one profile at a time."""
    ec2 = ctx.client("ec2")
    spec = {"Arn" if access.profile.startswith("arn:") else "Name": access.profile}
    deadline = time.monotonic() + (_PROPAGATION_S if access.owned else 0.0)
    while True:
        try:
            current = ec2.describe_iam_instance_profile_associations(
                Filters=[
                    {"Name": "instance-id", "Values": [instance_id]},
                    {"Name": "state", "Values": ["associating", "associated"]},
                ]
            )["IamInstanceProfileAssociations"]
            if current:
                ec2.replace_iam_instance_profile_association(
                    IamInstanceProfile=spec, AssociationId=current[0]["AssociationId"]
                )
            else:
                ec2.associate_iam_instance_profile(IamInstanceProfile=spec, InstanceId=instance_id)
            return
        except ClientError as exc:
            code = error_code(exc)
            if code == "InvalidParameterValue" and time.monotonic() < deadline:
                time.sleep(2.0)  # a profile created seconds ago is not visible to EC2 yet
                continue
            if code in DENIED:
                raise CloudError(
                    f"cannot give the head node {instance_id} the controller's instance profile ({code}); "
                    "it needs ec2:AssociateIamInstanceProfile, ec2:ReplaceIamInstanceProfileAssociation and "
                    f"iam:PassRole on the profile's role ({README_SECTION})"
                ) from exc
            raise CloudError(f"giving {instance_id} the instance profile {access.profile}: {code}") from exc


def delete_controller(ctx: AwsContext, cluster: str, known: ControllerAccess = ControllerAccess()) -> list[str]:
    """Delete the cluster's controller role and profile, found by name and checked by tag (a role of that
    name deepvm did not tag is left alone); already gone is success. A user's --controller-profile is
    never touched. When IAM may not even be read, deepvm could not have made them either: nothing to do,
    unless the record says deepvm did."""
    name = controller_name(cluster)
    iam = ctx.client("iam")
    deleted: list[str] = []
    try:
        profile = _tagged(cluster, lambda: iam.get_instance_profile(InstanceProfileName=name)["InstanceProfile"])
        if profile is not None:
            for role in profile["Roles"]:
                _gone_ok(lambda r=role: iam.remove_role_from_instance_profile(
                    InstanceProfileName=name, RoleName=r["RoleName"]))  # fmt: skip
            if _gone_ok(lambda: iam.delete_instance_profile(InstanceProfileName=name)):
                deleted.append(f"IAM instance profile {name}")
        if _tagged(cluster, lambda: iam.get_role(RoleName=name)["Role"]) is not None:
            for policy in iam.list_role_policies(RoleName=name)["PolicyNames"]:
                _gone_ok(lambda p=policy: iam.delete_role_policy(RoleName=name, PolicyName=p))
            for other in iam.list_instance_profiles_for_role(RoleName=name)["InstanceProfiles"]:
                _gone_ok(lambda o=other: iam.remove_role_from_instance_profile(
                    InstanceProfileName=o["InstanceProfileName"], RoleName=name))  # fmt: skip
            if _gone_ok(lambda: iam.delete_role(RoleName=name)):
                deleted.append(f"IAM role {name}")
    except ClientError as exc:
        if error_code(exc) in DENIED and not known.owned:
            return deleted
        raise CloudError(f"deleting the controller's IAM role {name}: {error_code(exc)}") from exc
    return deleted


def controller_leftovers(ctx: AwsContext, cluster: str) -> list[Leftover]:
    """The cluster's controller role and profile, if they still exist ([] when IAM may not be read)."""
    name = controller_name(cluster)
    iam = ctx.client("iam")
    try:
        found = []
        if _tagged(cluster, lambda: iam.get_instance_profile(InstanceProfileName=name)["InstanceProfile"]):
            found.append(Leftover("IAM instance profile", name))
        if _tagged(cluster, lambda: iam.get_role(RoleName=name)["Role"]):
            found.append(Leftover("IAM role", name))
    except ClientError as exc:
        if error_code(exc) in DENIED:
            return []
        raise CloudError(f"checking for the controller's IAM role {name}: {error_code(exc)}") from exc
    return found


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


def _tagged(cluster: str, get: Callable[[], dict[str, Any]]) -> dict[str, Any] | None:
    """The IAM entity if it exists and carries the cluster tag, else None."""
    try:
        entity = get()
    except ClientError as exc:
        if error_code(exc) == "NoSuchEntity":
            return None
        raise
    tags = {t["Key"]: t["Value"] for t in entity.get("Tags") or []}
    return entity if tags.get(CLUSTER_TAG) == cluster else None


def _gone_ok(call: Callable[[], object]) -> bool:
    """Run an IAM delete; True if it deleted something, False if it was already gone."""
    try:
        call()
        return True
    except ClientError as exc:
        if error_code(exc) == "NoSuchEntity":
            return False
        raise
