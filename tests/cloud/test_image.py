"""The image the nodes boot: the PyTorch Deep Learning AMI from its public SSM parameter (which the realism
layer answers as AWS does), the families it serves, and plans it cannot serve refused before anything."""

from __future__ import annotations

import pytest

from provisioning.catalog.market.families import GPU_FAMILIES, HOLDER_FAMILIES
from provisioning.cloud.aws.images import PYTORCH_DLAMI
from provisioning.cloud.types import ShortagePolicy, Unlaunchable
from provisioning.clusters.handle import Cluster
from provisioning.clusters.lifecycle import UpRequest, up
from provisioning.clusters.store import Store
from provisioning.clusters.target import AwsTarget
from provisioning.planner.plan import Role
from provisioning.sandbox.realism import SANDBOX_IMAGE
from tests.cloud.cloud_state import created_resources
from tests.cloud.plans import make_plan, make_tiering_plan


class FixedTarget(AwsTarget):
    def __init__(self, ctx):
        self.ctx = ctx

    def context(self, region, start=True):
        return self.ctx


def _parameters_asked(ctx) -> list[str]:
    asked: list[str] = []
    ctx.client("ssm").meta.events.register(
        "provide-client-params.ssm.GetParameter", lambda params, **kwargs: asked.append(params["Name"])
    )
    return asked


def test_every_family_deepvm_plans_is_in_the_image_table_with_its_source():
    assert set(GPU_FAMILIES) | set(HOLDER_FAMILIES) <= set(PYTORCH_DLAMI.families)
    for family, support in PYTORCH_DLAMI.families.items():
        assert support.boots and support.source.startswith("https://docs.aws.amazon.com/dlami/"), family
        assert support.as_of == "2026-03-20"
    assert PYTORCH_DLAMI.families["p3"].serves(Role.TRAINER) is False  # V100: not among the supported
    assert PYTORCH_DLAMI.families["p3"].serves(Role.HOLDER) is True  # it boots
    assert all(PYTORCH_DLAMI.families[f].serves(Role.TRAINER) for f in GPU_FAMILIES if f != "p3")


def test_the_default_image_is_the_pytorch_dlami_and_its_python_is_the_clusters(ctx):
    asked = _parameters_asked(ctx)
    up(FixedTarget(ctx), UpRequest(name="c1", plans=(make_tiering_plan(spot=1, holders=1),), wait_ssh=False))
    assert asked == [PYTORCH_DLAMI.ssm_parameter] and PYTORCH_DLAMI.ssm_parameter == (
        "/aws/service/deeplearning/ami/x86_64/oss-nvidia-driver-gpu-pytorch-2.9-ubuntu-24.04/latest/ami-id"
    )
    data = ctx.client("ec2").describe_launch_template_versions(
        LaunchTemplateId=Store().cluster("c1").resources.launch_template_id
    )["LaunchTemplateVersions"][0]
    assert data["LaunchTemplateData"]["ImageId"] == SANDBOX_IMAGE  # what the public parameter holds here
    cluster = Cluster.open("c1")
    assert cluster.row.node_python == "/opt/pytorch/bin/python" == cluster.node_python  # torch is there


def test_p3_trainers_are_refused_before_anything_is_made(ctx):
    plan = make_plan(spot=1, on_demand=1, instance_type="p3.2xlarge")
    with pytest.raises(Unlaunchable) as caught:
        up(FixedTarget(ctx), UpRequest(name="c1", plans=(plan,), wait_ssh=False))
    assert str(caught.value) == (
        "the image deepvm boots (Deep Learning OSS Nvidia Driver AMI GPU PyTorch 2.9 (Ubuntu 24.04)) cannot serve "
        "the plan's anchors and trainers (p3.2xlarge): its V100 GPUs are not among the instances it supports "
        "(https://docs.aws.amazon.com/dlami/latest/devguide/aws-deep-learning-ami-gpupt29oss-ul2404-2026-03-20.html, "
        "2026-03-20); pass --ami with an image that can (and --ssh-user), or --on-shortage next-plan to launch the "
        "next plan"
    )
    assert created_resources(ctx) == {} and Store().cluster("c1") is None


def test_a_users_image_is_trusted_and_the_nodes_python3_is_theirs(ctx, ami):
    up(FixedTarget(ctx), UpRequest(name="c1", plans=(make_plan(spot=1, on_demand=1),), image_id=ami, wait_ssh=False))
    assert Cluster.open("c1").row.node_python == "" and Cluster.open("c1").node_python == "python3"


def test_next_plan_goes_on_to_a_plan_the_image_serves(ctx):
    p3, g4dn = make_plan(spot=1, on_demand=1, instance_type="p3.2xlarge"), make_plan(spot=1, on_demand=1)
    result = up(
        FixedTarget(ctx), UpRequest(name="c1", plans=(p3, g4dn), on_shortage=ShortagePolicy.NEXT_PLAN, wait_ssh=False)
    )
    assert result.plan_index == 1 and {n.instance_type for n in result.view.nodes} == {"g4dn.xlarge"}
