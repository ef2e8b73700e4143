"""Spot interruptions on AWS through FIS, checked request by request with botocore's Stubber."""

from __future__ import annotations

import pytest
from botocore.stub import ANY, Stubber

from provisioning.cloud.aws.context import AwsContext
from provisioning.cloud.aws.fis import FIS_ACTION, send_spot_interruption
from provisioning.core.errors import CloudError, InputError

ROLE = "arn:aws:iam::123456789012:role/deepvm-fis"


@pytest.mark.parametrize(
    ("region", "partition"), [("us-east-1", "aws"), ("us-gov-west-1", "aws-us-gov"), ("cn-north-1", "aws-cn")]
)
def test_fis_experiment_interrupts_exactly_that_instance(region, partition):
    ctx = AwsContext(region=region)
    with Stubber(ctx.client("sts")) as sts, Stubber(ctx.client("fis")) as fis:
        caller = {"Account": "123456789012", "Arn": f"arn:{partition}:iam::123456789012:user/u", "UserId": "U"}
        sts.add_response("get_caller_identity", caller, {})
        fis.add_response(
            "create_experiment_template",
            {"experimentTemplate": {"id": "EXT123"}},
            {
                "clientToken": ANY,
                "description": ANY,
                "roleArn": ROLE,
                "stopConditions": [{"source": "none"}],
                "targets": {
                    "spot": {
                        "resourceType": "aws:ec2:spot-instance",
                        "resourceArns": [f"arn:{partition}:ec2:{region}:123456789012:instance/i-0abc"],
                        "selectionMode": "ALL",
                    }
                },
                "actions": {
                    "interrupt": {
                        "actionId": FIS_ACTION,
                        "parameters": {"durationBeforeInterruption": "PT150S"},
                        "targets": {"SpotInstances": "spot"},
                    }
                },
                "tags": {"deepvm:cluster": "c1"},
            },
        )
        fis.add_response(
            "start_experiment",
            {"experiment": {"id": "EXP456"}},
            {"clientToken": ANY, "experimentTemplateId": "EXT123", "tags": {"deepvm:cluster": "c1"}},
        )
        assert send_spot_interruption(ctx, "c1", "i-0abc", 150, ROLE) == "EXP456"
        fis.assert_no_pending_responses()


@pytest.mark.parametrize(("after", "role", "message"), [(60, ROLE, "between 120 and 900"), (120, "", "--fis-role-arn")])
def test_fis_limits_are_checked_before_any_call(after, role, message):
    with pytest.raises(InputError, match=message):
        send_spot_interruption(AwsContext(region="us-east-1"), "c1", "i-0abc", after, role)


def test_fis_refusal_is_one_cloud_error():
    ctx = AwsContext(region="us-east-1")
    with Stubber(ctx.client("sts")) as sts, Stubber(ctx.client("fis")) as fis:
        sts.add_response("get_caller_identity", {"Account": "123456789012", "Arn": ROLE}, {})
        fis.add_client_error("create_experiment_template", "AccessDeniedException", "not allowed to pass role")
        with pytest.raises(CloudError, match="AccessDeniedException: not allowed to pass role"):
            send_spot_interruption(ctx, "c1", "i-0abc", 120, ROLE)


def test_a_rebalance_recommendation_alone_is_refused_on_aws_with_why():
    from provisioning.clusters.target import AwsTarget

    with pytest.raises(InputError) as caught:
        AwsTarget().interrupt(AwsContext(region="us-east-1"), "c1", "i-0abc", 120, ROLE, rebalance_only=True)
    assert str(caught.value).startswith(
        "--rebalance-only is a sandbox rehearsal: on AWS, FIS's send-spot-instance-interruptions makes EC2 post "
        "the rebalance recommendation together with the interruption notice"
    )
