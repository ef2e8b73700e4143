"""A cloud resource of a cluster that a teardown could not delete, and how a person deletes it by hand.

`deepvm down` retries everything at once; the AWS CLI command per resource is for when deepvm itself may
not (a missing permission) or the resource needs a person's look first.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from provisioning.cloud.aws.policies import CONTROLLER_POLICY, JOB_STORAGE_POLICY, OUTPUTS_POLICY

# kind -> the AWS CLI command that deletes one resource of that kind, `{id}` being its id or name
_DELETE = {
    "instance": "aws ec2 terminate-instances --instance-ids {id}",
    "fleet": "aws ec2 delete-fleets --terminate-instances --fleet-ids {id}",
    "launch template": "aws ec2 delete-launch-template --launch-template-id {id}",
    "security group": "aws ec2 delete-security-group --group-id {id}",
    "key pair": "aws ec2 delete-key-pair --key-name {id}",
    "volume": "aws ec2 delete-volume --volume-id {id}",
    "S3 bucket": "aws s3 rb s3://{id} --force",
    "IAM instance profile": "aws iam remove-role-from-instance-profile --instance-profile-name {id} --role-name {id}"
    " ; aws iam delete-instance-profile --instance-profile-name {id}",
    "IAM role": f"aws iam delete-role-policy --role-name {{id}} --policy-name {CONTROLLER_POLICY}"
    f" ; aws iam delete-role-policy --role-name {{id}} --policy-name {JOB_STORAGE_POLICY}"
    f" ; aws iam delete-role-policy --role-name {{id}} --policy-name {OUTPUTS_POLICY}"
    " ; aws iam delete-role --role-name {id}",
}


@dataclass(frozen=True)
class Leftover:
    """One resource still carrying the cluster's tag (or the controller role's fixed name)."""

    kind: str  # a key of _DELETE: "instance", "fleet", "security group", "IAM role", ...
    resource_id: str

    def __str__(self) -> str:
        return f"{self.kind} {self.resource_id}"

    def delete_command(self, region: str, endpoint_url: str | None = None) -> str:
        """The AWS CLI command that deletes it (IAM's is global: no region, the same endpoint)."""
        where = "" if self.kind.startswith(("IAM", "S3")) else f" --region {region}"
        endpoint = f" --endpoint-url {endpoint_url}" if endpoint_url else ""
        return " ; ".join(
            f"{part.strip()}{where}{endpoint}"
            for part in _DELETE[self.kind].format(id=shlex.quote(self.resource_id)).split(" ; ")
        )
