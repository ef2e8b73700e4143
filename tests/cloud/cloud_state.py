"""What a cluster command left in the (moto) cloud: for tests that assert nothing was created, or nothing
is left of a cluster, and the names its resources got."""

from __future__ import annotations

from provisioning.cloud.aws.context import AwsContext
from provisioning.cloud.aws.leftover import Leftover
from provisioning.cloud.aws.teardown import leftovers_named
from provisioning.cloud.names import ClusterIdentity, resource_name
from provisioning.clusters.store import Store


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


def left_of(ctx: AwsContext, name: str = "c1") -> list[Leftover]:
    """What is still there of any cluster called `name`, whatever its id: [] once `down NAME` is done."""
    return leftovers_named(ctx, name)


def identity(name: str = "c1") -> ClusterIdentity:
    """The recorded cluster `name` as the cloud knows it (its id is random per `up`)."""
    row = Store().cluster(name)
    assert row is not None, f"no record of {name}"
    return row.identity


def named(name: str = "c1") -> str:
    """The name of the recorded cluster's key pair, security group and launch template."""
    return resource_name(identity(name))
