"""Capacity shortages and refusals, answered by the moto server as EC2 answers them (the realism layer's
capacity schedule, provisioning/sandbox/realism.py): fewer instances and CreateFleet Errors[] entries with
EC2's own codes. Only a lack of capacity is a shortage; a right, a quota or an image EC2 refuses fails at
once, tries no next plan, and leaves nothing behind.

New instances stay out of tag-filtered listings for the whole test (as they may on AWS), so what `up`
deletes after a shortage it must delete by the ids CreateFleet returned."""

from __future__ import annotations

import pytest

from deepvm_cli.main import main
from provisioning.cloud.aws.teardown import leftovers
from provisioning.cloud.types import LaunchRefused, ShortageError, ShortagePolicy
from provisioning.clusters.lifecycle import UpRequest, up
from provisioning.clusters.store import Store
from provisioning.clusters.target import AwsTarget
from provisioning.sandbox.realism import CapacityRule
from tests.cloud.cloud_state import identity
from tests.cloud.plans import make_plan, write_plans


class FixedTarget(AwsTarget):
    """AWS, but through one context whose clients carry the test's hooks."""

    def __init__(self, ctx):
        self.ctx = ctx

    def context(self, region, start=True):
        return self.ctx


@pytest.fixture
def fleets(ctx, realism):
    """The CreateFleet requests of the test, as sent; listings lag on new instances all along."""
    realism.change(listing_lag_s=60)
    requests: list[dict] = []
    ctx.client("ec2").meta.events.register(
        "provide-client-params.ec2.CreateFleet", lambda params, **kwargs: requests.append(params)
    )
    return requests


def _capacity(realism, *rules: CapacityRule) -> None:
    realism.change(capacity=rules)


def _request(*plans, policy=ShortagePolicy.FAIL, ami="ami-0000000000de3b0a1"):
    return UpRequest(name="c1", plans=plans, on_shortage=policy, image_id=ami, wait_ssh=False, timeout_s=30)


def _states(ctx) -> dict[str, str]:
    """Every instance the cluster's fleets returned, by id (no listing shows them yet), and its state."""
    ids = list(Store().cluster("c1").resources.instance_ids)
    reservations = ctx.client("ec2").describe_instances(InstanceIds=ids)["Reservations"] if ids else []
    return {i["InstanceId"]: i["State"]["Name"] for r in reservations for i in r["Instances"]}


def _nothing_left(ctx) -> bool:
    record = Store().cluster("c1").resources
    return set(_states(ctx).values()) <= {"terminated"} and leftovers(ctx, identity("c1"), record) == []


def test_default_fails_reports_and_deletes_what_it_launched_by_id(ctx, realism, fleets):
    _capacity(realism, CapacityRule(instance_type="g4dn.xlarge", market="spot", available=1))
    with pytest.raises(ShortageError) as caught:
        up(FixedTarget(ctx), _request(make_plan(spot=3, on_demand=1)))
    assert str(caught.value) == (
        "not enough capacity in us-east-1a: got 0/3 spot g4dn.xlarge (InsufficientInstanceCapacity: We currently "
        "do not have sufficient g4dn.xlarge capacity in the Availability Zone you requested (us-east-1a).); "
        "everything created was deleted (--on-shortage accept keeps a smaller cluster, next-plan tries the next plan)"
    )
    assert fleets[0]["SpotOptions"]["MinTargetCapacity"] == 3  # all or nothing asked of EC2...
    assert fleets[0]["OnDemandOptions"]["MinTargetCapacity"] == 1
    states = _states(ctx)
    assert len(states) == 1 and set(states.values()) == {"terminated"}  # ...so only the anchor ran, and is gone
    assert _nothing_left(ctx)
    assert Store().cluster("c1").status == "failed"
    assert any(e.kind == "shortage" for e in Store().events("c1"))


def test_accept_keeps_the_smaller_cluster(ctx, realism, fleets):
    _capacity(realism, CapacityRule(instance_type="g4dn.xlarge", market="spot", available=1))
    result = up(FixedTarget(ctx), _request(make_plan(spot=3, on_demand=1), policy=ShortagePolicy.ACCEPT))
    assert "MinTargetCapacity" not in fleets[0]["SpotOptions"]
    assert [s.describe().split(" (")[0] for s in result.shortfalls] == ["1/3 spot g4dn.xlarge"]
    assert sorted(n.role.value for n in result.view.nodes) == ["anchor", "trainer"]
    assert sorted(_states(ctx).values()) == ["running", "running"]
    assert Store().cluster("c1").status == "up"


def test_next_plan_cleans_up_and_launches_the_alternative(ctx, realism, fleets):
    _capacity(
        realism,
        CapacityRule(instance_type="g4dn.xlarge", market="spot", available=0, error_code="UnfulfillableCapacity"),
    )
    first, second = make_plan(spot=3, on_demand=1), make_plan(spot=2, on_demand=1, instance_type="g5.xlarge")
    result = up(FixedTarget(ctx), _request(first, second, policy=ShortagePolicy.NEXT_PLAN))
    assert result.plan_index == 1 and len(fleets) == 2
    assert Store().cluster("c1").plan.nodes == second.nodes
    assert sorted(_states(ctx).values()) == ["running"] * 3  # the second plan's (the record is its own)
    assert {n.instance_type for n in result.view.nodes} == {"g5.xlarge"}


@pytest.mark.parametrize(
    ("code", "market", "says"),
    [
        ("VcpuLimitExceeded", "spot", "vCPU quota for g4dn.xlarge in us-east-1 (spot L-3819A6DF) is used up"),
        ("MaxSpotInstanceCountExceeded", "spot", "request-service-quota-increase"),
        ("UnauthorizedOperation", "on-demand", "the credentials lack a right the launch needs"),
        (
            "AuthFailure.ServiceLinkedRoleCreationNotPermitted",
            "spot",
            "aws iam create-service-linked-role --aws-service-name spot.amazonaws.com",
        ),
        ("InvalidParameterValue", "*", "check that --ami exists in us-east-1 and is built for g4dn.xlarge's"),
        ("SomethingNew.NobodyKnows", "spot", "deepvm does not know this code, so it retries nothing"),
    ],
)
def test_a_refusal_is_no_shortage_it_fails_at_once_and_leaves_nothing(ctx, realism, fleets, code, market, says):
    _capacity(realism, CapacityRule(instance_type="g4dn.xlarge", market=market, error_code=code, message="no"))
    first, second = make_plan(spot=3, on_demand=1), make_plan(spot=2, on_demand=1, instance_type="g5.xlarge")
    with pytest.raises(LaunchRefused) as caught:  # not a ShortageError: next-plan must not go on
        up(FixedTarget(ctx), _request(first, second, policy=ShortagePolicy.NEXT_PLAN))
    message = str(caught.value)
    refused = {"spot": "spot", "on-demand": "on-demand", "*": "on-demand and spot"}[market]
    assert message.startswith(f"EC2 refused to launch g4dn.xlarge {refused}: {code}: no; ")
    assert says in message and message.endswith("; everything created was deleted")
    assert len(fleets) == 1  # neither the next plan nor a retry
    assert _nothing_left(ctx)
    assert Store().cluster("c1").status == "failed"


def test_a_quota_refusal_fails_even_when_accepting_a_smaller_cluster(ctx, realism, fleets):
    _capacity(realism, CapacityRule(market="spot", available=1, error_code="VcpuLimitExceeded"))
    with pytest.raises(LaunchRefused, match="VcpuLimitExceeded"):
        up(FixedTarget(ctx), _request(make_plan(spot=3, on_demand=1), policy=ShortagePolicy.ACCEPT))
    assert _nothing_left(ctx)


def test_up_says_a_refusal_in_one_line_with_exit_code_4(ctx, realism, tmp_path, capsys):
    _capacity(realism, CapacityRule(market="spot", error_code="AuthFailure.ServiceLinkedRoleCreationNotPermitted"))
    plans = write_plans(tmp_path / "plan.json", make_plan(spot=2, on_demand=1))
    code = main(
        [
            "up",
            "--yes",
            "--cloud",
            "aws",
            "--plan",
            str(plans),
            "--ami",
            "ami-0000000000de3b0a1",
            "--no-wait",
            "--name",
            "c1",
            "--on-shortage",
            "next-plan",
        ]
    )
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("deepvm: error:")]
    assert code == 4 and len(errors) == 1
    assert errors[0].startswith(
        "deepvm: error: EC2 refused to launch g4dn.xlarge spot: AuthFailure.ServiceLinkedRoleCreationNotPermitted: "
    )
    assert "create-service-linked-role" in errors[0]
    assert _nothing_left(ctx)
