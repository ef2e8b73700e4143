"""Which instance types EC2 offers in a zone (DescribeInstanceTypeOfferings), checked before a launch.

A plan's on-demand prices are regional, so the planner cannot know that a type (typically a CPU holder
placed in the trainers' zone) is not launched in that one zone; EC2 would refuse the fleet only after the
others of the plan were launched and billing. Asking first costs nothing
(https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_DescribeInstanceTypeOfferings.html).
"""

from __future__ import annotations

from provisioning.cloud.aws.context import AwsContext, cloud_errors


def not_offered(ctx: AwsContext, availability_zone: str, instance_types: list[str]) -> list[str]:
    """The types of `instance_types` that EC2 does not offer in `availability_zone`, in their order."""
    if not instance_types:
        return []
    filters = [
        {"Name": "location", "Values": [availability_zone]},
        {"Name": "instance-type", "Values": list(instance_types)},
    ]
    with cloud_errors(f"asking which instance types {availability_zone} offers"):
        pages = (
            ctx.client("ec2")
            .get_paginator("describe_instance_type_offerings")
            .paginate(LocationType="availability-zone", Filters=filters)
        )
        offered = {o["InstanceType"] for page in pages for o in page["InstanceTypeOfferings"]}
    return [t for t in instance_types if t not in offered]
