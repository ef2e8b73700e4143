"""What every node boots from: the imported public key and the launch template (the AMI: images.py; IMDSv2
required, metadata one hop away, user-data with public keys only), all tagged with the cluster."""

from __future__ import annotations

from botocore.exceptions import ClientError

from provisioning.cloud.aws.context import AwsContext, cloud_errors, error_code
from provisioning.cloud.names import ClusterIdentity, resource_name, tag_spec
from provisioning.cloud.types import ClusterSpec
from provisioning.cloud.userdata import NodeBoot, render_user_data

IMDS_HOP_LIMIT = 1


def ensure_key_pair(ctx: AwsContext, cluster: ClusterIdentity, public_key: str) -> str:
    """Import the locally generated public key (the private half never leaves this machine)."""
    name = resource_name(cluster)
    ec2 = ctx.client("ec2")
    with cloud_errors("importing the SSH public key"):
        try:
            ec2.import_key_pair(
                KeyName=name,
                PublicKeyMaterial=public_key.encode(),
                TagSpecifications=[tag_spec("key-pair", cluster)],
            )
        except ClientError as exc:
            if error_code(exc) != "InvalidKeyPair.Duplicate":
                raise
            # A key of this name from an earlier attempt: replace it, it may hold an older local key.
            ec2.delete_key_pair(KeyName=name)
            ec2.import_key_pair(
                KeyName=name,
                PublicKeyMaterial=public_key.encode(),
                TagSpecifications=[tag_spec("key-pair", cluster)],
            )
    return name


def ensure_launch_template(ctx: AwsContext, spec: ClusterSpec, security_group_id: str, key_name: str) -> str:
    """A fresh launch template for this launch attempt (an older one of the same name is replaced)."""
    ec2 = ctx.client("ec2")
    name = resource_name(spec.identity)
    # The internal key is authorised at boot, so the head reaches every node, replacements included, without
    # a staging step; only public keys go into user data (anyone on the instance can read it from IMDS).
    # Each node makes its own host key at boot: nothing in one template could tell one node from another.
    boot = NodeBoot(authorized_keys=(spec.ssh_public_key, spec.internal_public_key))
    data = {
        "ImageId": spec.image_id,
        "KeyName": key_name,
        "SecurityGroupIds": [security_group_id],
        "UserData": render_user_data(boot),
        # IMDSv2 only: a session token is required, so SSRF-style GETs cannot read instance metadata. One
        # hop: the token's reply dies at the node's own network stack, so a container behind a bridge (the
        # Deep Learning AMI runs Docker) cannot reach the node's role credentials. deepvm's processes run
        # on the node itself; a job whose containers need IMDS raises it per instance with
        # `aws ec2 modify-instance-metadata-options --http-put-response-hop-limit 2 --instance-id ID`.
        "MetadataOptions": {
            "HttpTokens": "required",
            "HttpEndpoint": "enabled",
            "HttpPutResponseHopLimit": IMDS_HOP_LIMIT,
        },
        "InstanceInitiatedShutdownBehavior": "terminate",
        "TagSpecifications": [tag_spec(kind, spec.identity) for kind in ("instance", "volume", "network-interface")],
    }
    if spec.instance_profile:
        # the nodes' only AWS credentials (DeepCheck's L3 on S3, datasets on S3): never keys on disk
        kind = "Arn" if spec.instance_profile.startswith("arn:") else "Name"
        data["IamInstanceProfile"] = {kind: spec.instance_profile}
    with cloud_errors("creating the launch template"):
        stale = ec2.describe_launch_templates(Filters=[{"Name": "launch-template-name", "Values": [name]}])
        for template in stale["LaunchTemplates"]:
            ec2.delete_launch_template(LaunchTemplateId=template["LaunchTemplateId"])
        created = ec2.create_launch_template(
            LaunchTemplateName=name,
            ClientToken=f"{spec.launch_token}-lt",
            LaunchTemplateData=data,
            TagSpecifications=[tag_spec("launch-template", spec.identity)],
        )
    return created["LaunchTemplate"]["LaunchTemplateId"]
