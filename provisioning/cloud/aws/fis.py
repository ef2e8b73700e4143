"""Spot interruptions on real AWS: an AWS FIS experiment with `aws:ec2:send-spot-instance-interruptions`,
which makes EC2 post the genuine two-minute notice (and rebalance recommendation) and then interrupt."""

from __future__ import annotations

import uuid

from provisioning.cloud.aws.context import AwsContext, cloud_errors
from provisioning.cloud.names import CLUSTER_TAG
from provisioning.core.errors import InputError

FIS_ACTION = "aws:ec2:send-spot-instance-interruptions"
MIN_NOTICE_S, MAX_NOTICE_S = 120, 900  # FIS accepts durationBeforeInterruption of 2 to 15 minutes


def send_spot_interruption(ctx: AwsContext, cluster: str, instance_id: str, after_s: int, role_arn: str) -> str:
    """Start an experiment that interrupts one spot instance after `after_s` seconds; return its id."""
    if not MIN_NOTICE_S <= after_s <= MAX_NOTICE_S:
        raise InputError(f"--after must be between {MIN_NOTICE_S} and {MAX_NOTICE_S} seconds on AWS (FIS limits)")
    if not role_arn:
        raise InputError("AWS FIS needs an IAM role it can assume: pass --fis-role-arn ARN")
    with cloud_errors("asking for the caller's account"):
        identity = ctx.client("sts").get_caller_identity()
    account, partition = identity["Account"], identity["Arn"].split(":")[1]  # arn:PARTITION:iam::ACCOUNT:...
    fis = ctx.client("fis")
    with cloud_errors("creating the FIS experiment template"):
        template = fis.create_experiment_template(
            clientToken=str(uuid.uuid4()),
            description=f"deepvm: interrupt {instance_id} of {cluster}",
            roleArn=role_arn,
            stopConditions=[{"source": "none"}],
            targets={
                "spot": {
                    "resourceType": "aws:ec2:spot-instance",
                    "resourceArns": [f"arn:{partition}:ec2:{ctx.region}:{account}:instance/{instance_id}"],
                    "selectionMode": "ALL",
                }
            },
            actions={
                "interrupt": {
                    "actionId": FIS_ACTION,
                    "parameters": {"durationBeforeInterruption": f"PT{after_s}S"},
                    "targets": {"SpotInstances": "spot"},
                }
            },
            tags={CLUSTER_TAG: cluster},
        )["experimentTemplate"]
    with cloud_errors("starting the FIS experiment"):
        experiment = fis.start_experiment(
            clientToken=str(uuid.uuid4()), experimentTemplateId=template["id"], tags={CLUSTER_TAG: cluster}
        )["experiment"]
    return experiment["id"]
