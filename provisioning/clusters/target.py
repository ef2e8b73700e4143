"""Which cloud a command talks to: real AWS, or the sandbox (moto + local hosts).

Both run the same AWS provider; a target only supplies what differs — the endpoint and credentials, the
subnet, the image, who may reach SSH, the login user, and how a Spot interruption is delivered.
"""

from __future__ import annotations

from typing import Protocol

from provisioning.cloud.aws.context import AwsContext, default_region, has_aws_credentials
from provisioning.cloud.aws.fis import send_spot_interruption
from provisioning.cloud.aws.images import PYTORCH_DLAMI, NodeImage, default_image
from provisioning.cloud.aws.network import caller_cidr, check_cidr, check_subnet, default_subnet
from provisioning.cloud.types import CloudKind
from provisioning.core.errors import CloudError, InputError
from provisioning.planner.plan import Plan

CLOUDS = ("auto", *(kind.value for kind in CloudKind))  # what --cloud and the config file accept


class CloudTarget(Protocol):
    kind: CloudKind
    banner: str  # said by every command on this cloud ("" for AWS)
    ssh_port: int
    node_python: str  # the interpreter on the nodes, with torch and mpi4py (the default of train's --python)

    def context(self, region: str, start: bool = True) -> AwsContext | None:
        """Clients for the region; None when start is False and the cloud is not running (sandbox)."""

    def regions(self, region: str | None) -> list[str]:
        """Where to sweep for a cluster the store does not know."""

    def subnet(self, ctx: AwsContext, availability_zone: str, explicit: str | None, ssh_cidr: str) -> str:
        """The subnet to launch in: the zone's default, or the user's once it is known to work."""

    def ssh_cidr(self, ctx: AwsContext, explicit: str | None) -> str: ...

    def image(self, ctx: AwsContext, plan: Plan, explicit: str | None) -> NodeImage:
        """What the plan's nodes boot: the user's AMI as given, else the default image, once it is known to
        serve every node of the plan (Unlaunchable when it cannot)."""

    def ssh_user(self, explicit: str | None) -> str: ...

    def after_terminate(self, instance_ids: list[str]) -> None:
        """Return only once the terminated instances' machines are gone (the sandbox kills its hosts)."""

    def interrupt(
        self, ctx: AwsContext, cluster: str, instance_id: str, after_s: int, role_arn: str, rebalance_only: bool = False
    ) -> str:
        """Deliver a Spot interruption notice now and the interruption after `after_s` (`rebalance_only`: a
        rebalance recommendation alone, where the cloud can); say what was done."""

    def node_env(self, region: str) -> dict[str, str]:
        """Environment for AWS clients on the nodes (DeepCheck's L3, datasets on S3)."""

    def controller_env(self, region: str) -> dict[str, str]:
        """Environment for the managed controller's AWS clients on the head: where the API is, never keys
        (they come from the head's instance profile, through its instance metadata)."""

    def check_capacity(self, nodes: int) -> str | None:
        """Before anything boots: a warning when `nodes` strain this cloud, an InputError when they cannot fit."""


class AwsTarget:
    kind = CloudKind.AWS
    banner = ""
    ssh_port = 22
    node_python = "python3"  # on an image deepvm knows nothing of (a user's --ami): images.py names the DLAMI's

    def context(self, region: str, start: bool = True) -> AwsContext:
        return AwsContext(region=region)

    def regions(self, region: str | None) -> list[str]:
        found = region or default_region()
        if not found:
            raise InputError("no region given and none configured: pass --region")
        return [found]

    def subnet(self, ctx: AwsContext, availability_zone: str, explicit: str | None, ssh_cidr: str) -> str:
        if explicit:
            return check_subnet(ctx, explicit, availability_zone, ssh_cidr)
        return default_subnet(ctx, availability_zone)  # a default subnet gives public addresses

    def ssh_cidr(self, ctx: AwsContext, explicit: str | None) -> str:
        return check_cidr(explicit) if explicit else caller_cidr(ctx)

    def image(self, ctx: AwsContext, plan: Plan, explicit: str | None) -> NodeImage:
        return NodeImage(explicit, python="") if explicit else default_image(ctx, plan)

    def ssh_user(self, explicit: str | None) -> str:
        return explicit or PYTORCH_DLAMI.ssh_user

    def after_terminate(self, instance_ids: list[str]) -> None:
        return  # EC2 shuts the machines down itself

    def interrupt(
        self, ctx: AwsContext, cluster: str, instance_id: str, after_s: int, role_arn: str, rebalance_only: bool = False
    ) -> str:
        if rebalance_only:
            raise InputError(
                "--rebalance-only is a sandbox rehearsal: on AWS, FIS's send-spot-instance-interruptions "
                "makes EC2 post the rebalance recommendation together with the interruption notice, and nothing "
                "posts a recommendation alone (https://docs.aws.amazon.com/fis/latest/userguide/"
                "fis-actions-reference.html#send-spot-instance-interruptions)"
            )
        experiment = send_spot_interruption(ctx, cluster, instance_id, after_s, role_arn)
        return f"AWS FIS experiment {experiment} interrupts {instance_id} in {after_s} s"

    def node_env(self, region: str) -> dict[str, str]:
        # credentials come from the instance profile (`deepvm up --instance-profile`); boto3 does not
        # take the region from the instance metadata, so say it
        return {"AWS_DEFAULT_REGION": region}

    def controller_env(self, region: str) -> dict[str, str]:
        return {"AWS_DEFAULT_REGION": region}

    def check_capacity(self, nodes: int) -> str | None:
        return None  # EC2 answers a shortage itself, and the plan was held to its quotas (plan_check.py)


def resolve_target(cloud: str) -> CloudTarget:
    """`auto` is the sandbox when boto3 finds no AWS credentials, AWS otherwise."""
    if cloud not in CLOUDS:
        raise InputError(f"--cloud must be one of {', '.join(CLOUDS)}, not {cloud!r}")
    if cloud == "auto":
        cloud = CloudKind.AWS if has_aws_credentials() else CloudKind.SANDBOX
    if cloud == CloudKind.AWS:
        if not has_aws_credentials():
            raise CloudError("no AWS credentials found (configure them as for the AWS CLI), or use --cloud sandbox")
        return AwsTarget()
    from provisioning.sandbox.target import SandboxTarget

    return SandboxTarget()
