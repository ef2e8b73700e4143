"""The sandbox as a cloud target: moto's endpoint with throw-away credentials, loopback subnets, a moto
image, the local user, and interruptions delivered through the hosts' metadata endpoints."""

from __future__ import annotations

import sys
from datetime import datetime, timedelta, timezone

from provisioning.cloud.aws.context import AwsContext
from provisioning.cloud.aws.images import NodeImage, default_image
from provisioning.cloud.aws.network import check_cidr
from provisioning.cloud.types import CloudKind
from provisioning.core.errors import CloudError, InputError
from provisioning.planner.plan import Plan
from provisioning.sandbox.capacity import check_fits, measure
from provisioning.sandbox.control import BANNER, ensure_sandbox, load_info, running_sandbox
from provisioning.sandbox.hosts import SSH_PORT, host_dir, host_processes, kill_host, ssh_user
from provisioning.sandbox.metadata import post_interruption, post_rebalance
from provisioning.sandbox.network import sandbox_subnet
from provisioning.sandbox.shared import CREDENTIALS


class SandboxTarget:
    kind = CloudKind.SANDBOX
    banner = BANNER
    ssh_port = SSH_PORT
    node_python = sys.executable  # the hosts share this machine's files, this virtual environment included

    def context(self, region: str, start: bool = True) -> AwsContext | None:
        info = ensure_sandbox() if start else running_sandbox()
        return None if info is None else info.context(region)

    def regions(self, region: str | None) -> list[str]:
        info = load_info()
        known = list(info.networks) if info else []
        return [region] if region else known

    def subnet(self, ctx: AwsContext, availability_zone: str, explicit: str | None, ssh_cidr: str) -> str:
        if explicit:
            raise InputError("--subnet does not apply to the sandbox (it makes its own loopback subnets)")
        return sandbox_subnet(ensure_sandbox(), ctx.region, availability_zone)

    def ssh_cidr(self, ctx: AwsContext, explicit: str | None) -> str:
        return check_cidr(explicit) if explicit else "127.0.0.0/8"

    def image(self, ctx: AwsContext, plan: Plan, explicit: str | None) -> NodeImage:
        # as on AWS: the DLAMI's public parameter (which the realism layer answers with SANDBOX_IMAGE), held
        # to the same families; the hosts run this machine's Python whatever the AMI says
        chosen = NodeImage(explicit, "") if explicit else default_image(ctx, plan)
        return NodeImage(chosen.image_id, python="")

    def ssh_user(self, explicit: str | None) -> str:
        return explicit or ssh_user()

    def after_terminate(self, instance_ids: list[str]) -> None:
        # Kill the hosts now rather than on the supervisor's next pass, so `down` returns only when no
        # process of the cluster is left. Killing twice is harmless.
        stuck = [i for i in instance_ids if kill_host(i)]
        if stuck:
            raise CloudError(f"sandbox hosts did not stop: {', '.join(stuck)}")

    def interrupt(
        self, ctx: AwsContext, cluster: str, instance_id: str, after_s: int, role_arn: str, rebalance_only: bool = False
    ) -> str:
        if after_s < 0:
            raise InputError("--after must be 0 or more seconds")
        if not host_processes(instance_id):
            raise CloudError(f"{instance_id} has no running sandbox host")
        if rebalance_only:
            post_rebalance(host_dir(instance_id))
            return (
                f"posted a rebalance recommendation alone to {instance_id}'s metadata; nothing interrupts "
                "it (--after does not apply)"
            )
        deadline = datetime.now(timezone.utc) + timedelta(seconds=after_s)
        post_interruption(host_dir(instance_id), deadline)
        return (
            f"posted a Spot interruption notice to {instance_id}'s metadata; the sandbox supervisor "
            f"terminates it at {deadline.strftime('%H:%M:%S')} UTC"
        )

    def node_env(self, region: str) -> dict[str, str]:
        # the hosts share this machine's loopback, so the sandbox's own S3 (moto) is theirs too
        info = load_info()
        if info is None:
            return {}
        key, secret = CREDENTIALS
        return {
            "AWS_ENDPOINT_URL": info.endpoint,
            "AWS_ACCESS_KEY_ID": key,
            "AWS_SECRET_ACCESS_KEY": secret,
            "AWS_DEFAULT_REGION": region,
        }

    def controller_env(self, region: str) -> dict[str, str]:
        # the sandbox's EC2 API is its moto server; the head's credentials come from its metadata endpoint
        info = load_info()
        return {"AWS_DEFAULT_REGION": region, **({"AWS_ENDPOINT_URL": info.endpoint} if info else {})}

    def check_capacity(self, nodes: int) -> str | None:
        # every node is processes on this machine: measure what it can take (provisioning/sandbox/capacity.py)
        return check_fits(nodes, measure())
