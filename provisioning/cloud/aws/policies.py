"""The IAM policy documents deepvm writes: who may assume its roles, the head's controller policy, and the
per-job S3 policy of the head and the checkpoint holders.

Pure functions of the cluster and the job: `provisioning.cloud.aws.iam` puts them on the roles. The
contract test (tests/cloud/test_iam_contract.py) checks every action and condition key in them against
AWS's own catalogue of IAM actions, and that each role's policy covers every AWS call the code running
under that role makes (provisioning.cloud.aws.rights).
"""

from __future__ import annotations

from typing import Any

from provisioning.cloud.aws.context import partition_of
from provisioning.cloud.names import ClusterIdentity
from provisioning.cloud.types import S3Area

CONTROLLER_POLICY = "deepvm-controller"  # the inline policy of the controller's role, written at `up`
JOB_STORAGE_POLICY = "deepvm-job-storage"  # the inline S3 policy of the head's and holders' roles, per job
OUTPUTS_POLICY = "deepvm-cluster-outputs"  # the head's role on the cluster's outputs bucket (iam.put_outputs_policy)

# Describe* actions support neither resource ARNs nor tag conditions on AWS, so they cannot be limited
# to the cluster: the head may read every instance of the account in any region. It may change only what
# carries the cluster's tag.
_DESCRIBE = ("ec2:DescribeInstances",)
_DESCRIBE_PROFILES = ("ec2:DescribeIamInstanceProfileAssociations",)
_LAUNCH = ("ec2:CreateFleet", "ec2:RunInstances")
_CREATE_ACTIONS = ("CreateFleet", "RunInstances")  # ec2:CreateAction values: EC2 API operation names
_ASSOCIATE = ("ec2:AssociateIamInstanceProfile", "ec2:ReplaceIamInstanceProfileAssociation")


def trust_policy() -> dict[str, Any]:
    """Who may assume the role: EC2 instances (through the instance profile), nobody else."""
    return {
        "Version": "2012-10-17",
        "Statement": [{"Effect": "Allow", "Principal": {"Service": "ec2.amazonaws.com"}, "Action": "sts:AssumeRole"}],
    }


def controller_policy(
    cluster: ClusterIdentity,
    region: str,
    node_role_arn: str | None = None,
    holders_role_arn: str | None = None,
    controller_role_arn: str | None = None,
) -> dict[str, Any]:
    """The controller's inline policy: what the head needs on the cluster, limited by the cluster's tag.

    A replacement is an instant EC2 Fleet from the cluster's launch template (tagged with the cluster), and
    EC2 checks every resource of the launch against the policy: the template must carry the cluster tag,
    the instances, volumes, network interfaces and the fleet are created with it, and the template's AMI,
    subnet, security group and key pair may be used only through a launch template. Tags may be set only
    while creating. `node_role_arn` is the role of the nodes' own profile (`--instance-profile`), which is
    in the launch template: launching with it needs iam:PassRole for exactly that role, to EC2 only.
    `holders_role_arn` is the role deepvm made for the checkpoint holders: a holder the head buys gets its
    profile (associated, as the head's own was), which needs iam:PassRole for exactly that role.
    `controller_role_arn` is this policy's own role: a head that hands control of a moved cluster to a new
    head in the new zone gives it the controller's profile (training/control/handover.py, step 3), which needs
    iam:PassRole for exactly that role, to EC2 only, and the association rights on the cluster's instances.
    """
    arn = f"arn:{partition_of(region)}:ec2:{region}:*"  # GovCloud and China are partitions of their own
    key, value = cluster.scope_tag
    tagged = {"StringEquals": {f"aws:RequestTag/{key}": value}}
    owned = {"StringEquals": {f"ec2:ResourceTag/{key}": value}}
    statements: list[dict[str, Any]] = [
        {"Sid": "DescribeTheCluster", "Effect": "Allow", "Action": list(_DESCRIBE), "Resource": "*"},
        {
            "Sid": "LaunchFromTheClusterTemplate",
            "Effect": "Allow",
            "Action": list(_LAUNCH),
            "Resource": f"{arn}:launch-template/*",
            "Condition": owned,
        },
        # AWS documents different resources for the two (CreateFleet: the fleet, and what it launches as
        # instances and volumes; RunInstances, which every instant fleet is authorised as too: everything the
        # launch uses), so each is granted its own: https://docs.aws.amazon.com/service-authorization/latest/
        # reference/list_amazonec2.html . The contract test checks each resource against that reference.
        {
            "Sid": "CreateClusterTaggedFleets",
            "Effect": "Allow",
            "Action": "ec2:CreateFleet",
            "Resource": [f"{arn}:{kind}/*" for kind in ("fleet", "instance", "volume")],
            "Condition": tagged,
        },
        {
            "Sid": "LaunchClusterTaggedResources",
            "Effect": "Allow",
            "Action": "ec2:RunInstances",
            "Resource": [f"{arn}:{kind}/*" for kind in ("instance", "volume", "network-interface")],
            "Condition": tagged,
        },
        {
            "Sid": "FleetsUseTheTemplatesParts",
            "Effect": "Allow",
            "Action": "ec2:CreateFleet",
            "Resource": [f"{arn}:{kind}/*" for kind in ("image", "subnet")],
            "Condition": {"ArnLike": {"ec2:LaunchTemplate": f"{arn}:launch-template/*"}},
        },
        {
            # the AMI's snapshots too: the root volume is made from them (Karpenter's reference policy grants
            # them; AWS: "to create EBS volumes ... from existing snapshots, the user must have read access to
            # the snapshots", https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/permissions-for-launch-templates.html)
            "Sid": "LaunchWithTheTemplatesParts",
            "Effect": "Allow",
            "Action": "ec2:RunInstances",
            "Resource": [f"{arn}:{kind}/*" for kind in ("image", "snapshot", "subnet", "security-group", "key-pair")],
            "Condition": {"ArnLike": {"ec2:LaunchTemplate": f"{arn}:launch-template/*"}},
        },
        {
            # A spot launch is also authorised on the spot request it makes. AWS's Service Authorization
            # Reference lists no such resource (nor condition key) for RunInstances/CreateFleet, yet real
            # spot launches are checked against it (Karpenter's reference policy grants it): undocumented,
            # so granted on the safe side, unconditioned. It launches nothing by itself: every other
            # resource of the same request is limited by the statements above.
            "Sid": "LaunchAsSpot",
            "Effect": "Allow",
            "Action": list(_LAUNCH),
            "Resource": f"{arn}:spot-instances-request/*",
        },
        {
            # ec2:CreateAction holds the bare name of the API operation that creates the resource
            # ("RunInstances", not "ec2:RunInstances"): AWS's own examples in
            # https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/supported-iam-actions-tagging.html .
            # EC2 authorises ec2:CreateTags for every resource a launch tags, so a wrong value here refuses
            # every replacement the head buys (UnauthorizedOperation).
            "Sid": "TagOnlyWhileLaunching",
            "Effect": "Allow",
            "Action": "ec2:CreateTags",
            "Resource": f"{arn}:*/*",
            "Condition": {"StringEquals": {f"aws:RequestTag/{key}": value, "ec2:CreateAction": list(_CREATE_ACTIONS)}},
        },
        {
            # the head retires nodes that hang or that it bought in vain (Cluster.retire, add_nodes)
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
    ]
    for sid, role_arn in (
        ("PassTheNodesRoleToEc2", node_role_arn),
        ("PassTheHoldersRoleToEc2", holders_role_arn),
        ("PassTheControllerRoleToEc2", controller_role_arn),
    ):
        if role_arn:
            statements.append(_pass_role(sid, role_arn))
    if holders_role_arn or controller_role_arn:
        statements += [
            {
                "Sid": "DescribeProfileAssociations",
                "Effect": "Allow",
                "Action": list(_DESCRIBE_PROFILES),
                "Resource": "*",
            },
            {
                "Sid": "GiveClusterNodesTheirProfile",
                "Effect": "Allow",
                "Action": list(_ASSOCIATE),
                "Resource": f"{arn}:instance/*",
                "Condition": owned,
            },
        ]
    return {"Version": "2012-10-17", "Statement": statements}


def _pass_role(sid: str, role_arn: str) -> dict[str, Any]:
    return {
        "Sid": sid,
        "Effect": "Allow",
        "Action": "iam:PassRole",
        "Resource": role_arn,
        "Condition": {"StringEquals": {"iam:PassedToService": "ec2.amazonaws.com"}},
    }


def job_storage_policy(areas: tuple[S3Area, ...], partition: str = "aws") -> dict[str, Any]:
    """S3 rights on exactly `areas`: list under each prefix (s3:ListBucket limited by `s3:prefix`), read its
    objects, and where it `writes`, put them (multipart uploads included: every part is s3:PutObject),
    abort an upload that failed and delete (retention). AWS: https://docs.aws.amazon.com/AmazonS3/latest/
    userguide/using-with-s3-policy-actions.html (which API needs which action) and
    .../amazon-s3-policy-keys.html#condition-key-bucket-ops-2 (s3:prefix on ListBucket). `partition`: the
    region's (context.partition_of): a bucket's ARN in GovCloud or China begins arn:aws-us-gov / arn:aws-cn."""
    statements: list[dict[str, Any]] = []
    for index, area in enumerate(areas):
        objects = f"arn:{partition}:s3:::{area.bucket}/{area.prefix}*"
        listing: dict[str, Any] = {
            "Sid": f"ListArea{index}",
            "Effect": "Allow",
            "Action": "s3:ListBucket",
            "Resource": f"arn:{partition}:s3:::{area.bucket}",
        }
        if area.prefix:
            listing["Condition"] = {"StringLike": {"s3:prefix": [area.prefix, f"{area.prefix}*"]}}
        actions = ["s3:GetObject", *(("s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload") * area.writes)]
        statements += [listing, {"Sid": f"UseArea{index}", "Effect": "Allow", "Action": actions, "Resource": objects}]
    return {"Version": "2012-10-17", "Statement": statements}
