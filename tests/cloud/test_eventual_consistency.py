"""`up` against an EC2 that is eventually consistent, as AWS documents it (the realism layer's lags): a new
security group, a new instance profile and new instances are each unknown for a moment after they exist."""

from __future__ import annotations

from dataclasses import replace

from provisioning.clusters.lifecycle import UpRequest, up
from provisioning.clusters.store import Store
from provisioning.clusters.target import AwsTarget
from provisioning.sandbox.realism import SANDBOX
from tests.cloud.plans import make_plan, make_tiering_plan


class FixedTarget(AwsTarget):
    def __init__(self, ctx):
        self.ctx = ctx

    def context(self, region, start=True):
        return self.ctx


def _calls(ctx, operation: str) -> list[str]:
    answers: list[str] = []

    def note(http_response, parsed, **kwargs):
        answers.append(parsed.get("Error", {}).get("Code", "ok"))

    ctx.client("ec2").meta.events.register(f"after-call.ec2.{operation}", note)
    return answers


def test_rules_of_a_new_security_group_are_retried_while_ec2_does_not_know_it(ctx, realism):
    realism.change(group_lag_s=1.5)
    authorized = _calls(ctx, "AuthorizeSecurityGroupIngress")
    result = up(
        FixedTarget(ctx),
        UpRequest(name="c1", plans=(make_plan(spot=1, on_demand=1),), image_id="ami-0000000000de3b0a1", wait_ssh=False),
    )
    assert len(result.view.nodes) == 2
    assert authorized[0] == "InvalidGroup.NotFound" and authorized[-2:] == ["ok", "ok"]  # both rules, later


def test_up_meets_the_sandboxs_whole_realism(ctx, realism):
    # every lag the sandbox runs with (listings, groups, profiles), the profile's long enough to outlast
    # the launch before the head gets it however slow this machine is
    realism.set(replace(SANDBOX, profile_lag_s=6.0, by_id_lag_s=2.0))
    associated = _calls(ctx, "AssociateIamInstanceProfile")
    result = up(
        FixedTarget(ctx),
        UpRequest(
            name="c1", plans=(make_tiering_plan(spot=2, holders=1),), image_id="ami-0000000000de3b0a1", wait_ssh=False
        ),
    )
    assert sorted(n.role.value for n in result.view.nodes) == ["holder", "trainer", "trainer"]
    assert associated[0] == "InvalidParameterValue" and associated[-1] == "ok"  # the head's profile, later
    assert len(Store().cluster("c1").resources.instance_ids) == 3
