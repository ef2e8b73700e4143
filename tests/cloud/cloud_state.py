"""What a cluster command left in the (moto) cloud: for tests that assert nothing was created."""

from __future__ import annotations

from provisioning.cloud.aws.context import AwsContext


def created_resources(ctx: AwsContext) -> dict[str, list[str]]:
    """Every instance, security group (but the VPC's default), key pair, launch template and fleet."""
    ec2 = ctx.client("ec2")
    found = {
        "instances": [i["InstanceId"] for r in ec2.describe_instances()["Reservations"] for i in r["Instances"]],
        "security groups": [
            g["GroupName"] for g in ec2.describe_security_groups()["SecurityGroups"] if g["GroupName"] != "default"
        ],
        "key pairs": [k["KeyName"] for k in ec2.describe_key_pairs()["KeyPairs"]],
        "launch templates": [t["LaunchTemplateName"] for t in ec2.describe_launch_templates()["LaunchTemplates"]],
        "fleets": [f["FleetId"] for f in ec2.describe_fleets()["Fleets"]],
    }
    return {kind: names for kind, names in found.items() if names}
