"""What `up` checks before it creates anything, so that a launch that cannot work costs nothing: that EC2
offers each of the plan's types in its zone, and that the nodes of a user's --subnet will be reachable."""

from __future__ import annotations

from dataclasses import replace

import pytest

from provisioning.cloud.types import ShortagePolicy, Unlaunchable
from provisioning.clusters.lifecycle import UpRequest, up
from provisioning.clusters.store import Store
from provisioning.clusters.target import AwsTarget
from provisioning.core.errors import InputError
from tests.cloud.cloud_state import created_resources
from tests.cloud.plans import make_plan, make_tiering_plan

AMI = "ami-0000000000de3b0a1"


class FixedTarget(AwsTarget):
    def __init__(self, ctx):
        self.ctx = ctx

    def context(self, region, start=True):
        return self.ctx


def _request(*plans, **options) -> UpRequest:
    return UpRequest(name="c1", plans=plans, image_id=AMI, wait_ssh=False, **options)


def _nothing_made(ctx) -> bool:
    made = created_resources(ctx)
    return not any(made.values()) and Store().cluster("c1") is None


def _d3_holder_in_1f():
    """Spot g4dn trainers in us-east-1f with a d3.xlarge holder: EC2 (and moto's copy of its offerings)
    launches g4dn there, but no d3."""
    plan = make_tiering_plan(spot=2, holders=1, az="us-east-1f")
    trainers, holders = plan.nodes
    return replace(plan, nodes=(trainers, replace(holders, instance_type="d3.xlarge")))


def test_a_holder_type_the_trainers_zone_does_not_offer_is_refused_before_anything_launches(ctx):
    with pytest.raises(Unlaunchable) as caught:
        up(FixedTarget(ctx), _request(_d3_holder_in_1f()))
    assert str(caught.value) == (
        "the plan's holders (d3.xlarge) cannot launch in us-east-1f: EC2 does not offer d3.xlarge there "
        "(DescribeInstanceTypeOfferings); nothing was created (--on-shortage next-plan tries the next plan)"
    )
    assert _nothing_made(ctx)


def test_next_plan_goes_on_past_a_plan_its_zone_cannot_launch(ctx):
    result = up(
        FixedTarget(ctx),
        _request(_d3_holder_in_1f(), make_plan(spot=1, on_demand=1), on_shortage=ShortagePolicy.NEXT_PLAN),
    )
    assert result.plan_index == 1 and len(result.view.nodes) == 2


def _subnet(ctx, public: bool, az: str = "us-east-1a") -> str:
    ec2 = ctx.client("ec2")
    vpc = ec2.create_vpc(CidrBlock="10.7.0.0/16")["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.7.1.0/24", AvailabilityZone=az)["Subnet"]["SubnetId"]
    ec2.modify_subnet_attribute(SubnetId=subnet, MapPublicIpOnLaunch={"Value": public})
    return subnet


def test_a_private_subnet_is_refused_before_anything_is_made(ctx):
    subnet = _subnet(ctx, public=False)
    before = created_resources(ctx)
    with pytest.raises(InputError) as caught:
        up(FixedTarget(ctx), _request(make_plan(spot=1, on_demand=1), subnet_id=subnet, ssh_cidr="198.51.100.7/32"))
    assert str(caught.value).startswith(
        f"--subnet {subnet} gives instances no public address (MapPublicIpOnLaunch is false), so deepvm could "
        f"not reach its nodes over SSH from here; pass a public subnet, turn it on with `aws ec2 "
        f"modify-subnet-attribute --subnet-id {subnet} --map-public-ip-on-launch`"
    )
    assert created_resources(ctx) == before and Store().cluster("c1") is None


def test_a_private_subnet_serves_a_machine_that_reaches_the_vpc_privately(ctx):
    subnet = _subnet(ctx, public=False)
    result = up(FixedTarget(ctx), _request(make_plan(spot=1, on_demand=1), subnet_id=subnet, ssh_cidr="10.7.0.0/16"))
    assert len(result.view.nodes) == 2


def test_a_public_subnet_of_another_zone_is_refused(ctx):
    subnet = _subnet(ctx, public=True, az="us-east-1b")
    with pytest.raises(InputError, match=f"--subnet {subnet} is in us-east-1b, but the plan launches in us-east-1a"):
        up(FixedTarget(ctx), _request(make_plan(spot=1, on_demand=1), subnet_id=subnet, ssh_cidr="198.51.100.7/32"))
