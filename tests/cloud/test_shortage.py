"""Capacity shortages, injected into moto's CreateFleet answers with botocore event hooks.

moto never runs out of capacity, so a hook rewrites the parsed CreateFleet response the way EC2 answers a
shortage: fewer instances plus Errors[]. The instances it hides are terminated, as EC2 would never have
launched them.
"""

from __future__ import annotations

import pytest

from provisioning.cloud.types import ShortagePolicy
from provisioning.clusters.handle import ShortageError
from provisioning.clusters.lifecycle import UpRequest, up
from provisioning.clusters.store import Store
from provisioning.clusters.target import AwsTarget
from tests.cloud.cloud_state import left_of
from tests.cloud.plans import make_plan


class FixedTarget(AwsTarget):
    """AWS, but through one context whose clients carry the test's hooks."""

    def __init__(self, ctx):
        self.ctx = ctx

    def context(self, region, start=True):
        return self.ctx


def inject_shortage(
    ctx, drop_spot: int, code: str = "InsufficientInstanceCapacity", only_type: str | None = None
):
    """Make CreateFleet deliver `drop_spot` fewer spot instances and report `code`; record the requests."""
    ec2 = ctx.client("ec2")
    requests: list[dict] = []

    def record(params, **kwargs):
        requests.append(params)

    def shorten(parsed, **kwargs):
        kind = parsed["Instances"][0]["InstanceType"] if parsed.get("Instances") else None
        if only_type and kind != only_type:
            return
        spot = [i for i in parsed["Instances"] if i["Lifecycle"] == "spot"]
        dropped = spot[:drop_spot]
        parsed["Instances"] = [i for i in parsed["Instances"] if i not in dropped]
        hidden = [iid for i in dropped for iid in i["InstanceIds"]]
        if hidden:
            ec2.terminate_instances(InstanceIds=hidden)
        parsed["Errors"] = [
            {"Lifecycle": "spot", "ErrorCode": code, "ErrorMessage": f"{code} for {kind} in us-east-1a"}
        ]

    ec2.meta.events.register("provide-client-params.ec2.CreateFleet", record)
    ec2.meta.events.register("after-call.ec2.CreateFleet", shorten)
    return requests


def _request(*plans, policy=ShortagePolicy.FAIL, ami="ami-0000000000de3b0a1"):
    return UpRequest(name="c1", plans=plans, on_shortage=policy, image_id=ami, wait_ssh=False, timeout_s=30)


def _live(ctx):
    return [
        i
        for r in ctx.client("ec2").describe_instances(
            Filters=[{"Name": "instance-state-name", "Values": ["pending", "running"]}]
        )["Reservations"]
        for i in r["Instances"]
    ]


def test_default_fails_reports_and_deletes_everything(ctx):
    requests = inject_shortage(ctx, drop_spot=2)
    with pytest.raises(ShortageError) as caught:
        up(FixedTarget(ctx), _request(make_plan(spot=3, on_demand=1)))
    assert str(caught.value).startswith(
        "not enough capacity in us-east-1a: got 1/3 spot g4dn.xlarge (InsufficientInstanceCapacity: "
    )
    assert "everything created was deleted" in str(caught.value)
    assert requests[0]["SpotOptions"]["MinTargetCapacity"] == 3  # all or nothing asked of EC2
    assert requests[0]["OnDemandOptions"]["MinTargetCapacity"] == 1
    assert _live(ctx) == [] and left_of(ctx, "c1") == []
    assert Store().cluster("c1").status == "failed"
    assert any(e.kind == "shortage" for e in Store().events("c1"))


def test_accept_keeps_the_smaller_cluster(ctx):
    requests = inject_shortage(ctx, drop_spot=2)
    result = up(FixedTarget(ctx), _request(make_plan(spot=3, on_demand=1), policy=ShortagePolicy.ACCEPT))
    assert "MinTargetCapacity" not in requests[0]["SpotOptions"]
    assert [s.describe().split(" (")[0] for s in result.shortfalls] == ["1/3 spot g4dn.xlarge"]
    assert sorted(n.role.value for n in result.view.nodes) == ["anchor", "trainer"]
    assert len(_live(ctx)) == 2
    assert Store().cluster("c1").status == "up"


def test_next_plan_cleans_up_and_launches_the_alternative(ctx):
    inject_shortage(ctx, drop_spot=3, only_type="g4dn.xlarge")
    first, second = make_plan(spot=3, on_demand=1), make_plan(spot=2, on_demand=1, instance_type="g5.xlarge")
    result = up(FixedTarget(ctx), _request(first, second, policy=ShortagePolicy.NEXT_PLAN))
    assert result.plan_index == 1
    assert {i["InstanceType"] for i in _live(ctx)} == {"g5.xlarge"} and len(_live(ctx)) == 3
    assert Store().cluster("c1").plan.nodes == second.nodes


def test_quota_exceeded_with_nothing_launched_fails_even_when_accepting(ctx):
    inject_shortage(ctx, drop_spot=3, code="VcpuLimitExceeded")
    with pytest.raises(ShortageError, match="VcpuLimitExceeded"):
        up(FixedTarget(ctx), _request(make_plan(spot=3, on_demand=0), policy=ShortagePolicy.ACCEPT))
    assert _live(ctx) == [] and left_of(ctx, "c1") == []
