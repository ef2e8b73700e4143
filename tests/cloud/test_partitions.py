"""ARNs carry the partition of their region: GovCloud (aws-us-gov) and China (aws-cn) are not `aws`."""

from __future__ import annotations

import json

import pytest

from provisioning.cloud.aws.context import partition_of
from provisioning.cloud.aws.policies import controller_policy, job_storage_policy
from provisioning.cloud.names import ClusterIdentity
from provisioning.cloud.types import S3Area


@pytest.mark.parametrize(
    ("region", "partition"),
    [("us-east-1", "aws"), ("us-gov-west-1", "aws-us-gov"), ("cn-northwest-1", "aws-cn"), ("eu-central-1", "aws")],
)
def test_the_policies_name_resources_in_their_regions_partition(region, partition):
    assert partition_of(region) == partition
    role = f"arn:{partition}:iam::123456789012:role/nodes"
    for document in (
        controller_policy(ClusterIdentity("c1", "0a1b2c3d"), region, role, role),
        job_storage_policy((S3Area("bucket", "jobs/j1/", writes=True),), partition_of(region)),
    ):
        arns = [a for a in json.dumps(document).replace('"', " ").split() if a.startswith("arn:")]
        assert arns and all(a.startswith(f"arn:{partition}:") for a in arns)
