"""Giving one running instance an IAM instance profile: the head its controller profile, the other checkpoint
holders deepvm's holders profile. Run by `up` on the user's side and by the head's controller when it buys
a holder, so its calls are in both sides' rights (provisioning.cloud.aws.rights)."""

from __future__ import annotations

import time

from botocore.exceptions import ClientError

from provisioning.cloud.aws.context import AwsContext, error_code
from provisioning.core.errors import CloudError

DENIED = ("AccessDenied", "AccessDeniedException", "UnauthorizedOperation")
_PROPAGATION_S = 60.0  # IAM is eventually consistent: EC2 may not know a new profile for a few seconds


def attach_profile(ctx: AwsContext, profile: str, instance_id: str, new: bool = False) -> None:
    """Give the instance `profile` (a name or an ARN). An instance holds one profile at a time, so one it
    launched with (the launch template's `--instance-profile`) is replaced. `new`: deepvm made the profile
    moments ago, and EC2 may not see it yet (InvalidParameterValue), so that is retried for a minute."""
    ec2 = ctx.client("ec2")
    spec = {"Arn" if profile.startswith("arn:") else "Name": profile}
    deadline = time.monotonic() + (_PROPAGATION_S if new else 0.0)
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
                    f"cannot give the node {instance_id} the instance profile {profile} ({code}); it needs "
                    "ec2:AssociateIamInstanceProfile, ec2:ReplaceIamInstanceProfileAssociation and iam:PassRole "
                    "on the profile's role"
                ) from exc
            raise CloudError(f"giving {instance_id} the instance profile {profile}: {code}") from exc


def instance_profiles(ctx: AwsContext, instance_ids: list[str]) -> dict[str, str]:
    """instance id -> the ARN of the instance profile it holds now (instances without one are left out)."""
    if not instance_ids:
        return {}
    answer = ctx.client("ec2").describe_iam_instance_profile_associations(
        Filters=[
            {"Name": "instance-id", "Values": instance_ids},
            {"Name": "state", "Values": ["associating", "associated"]},
        ]
    )["IamInstanceProfileAssociations"]
    return {a["InstanceId"]: a["IamInstanceProfile"]["Arn"] for a in answer}
