"""EC2 rights probed with DryRun: each probe makes a request like deepvm's with DryRun=True, which EC2
authorises and never carries out. "DryRunOperation" means the caller holds the rights the request needs,
"UnauthorizedOperation" that it lacks one (https://docs.aws.amazon.com/AWSEC2/latest/APIReference/
CommonParameters.html). Any other answer (a made-up id EC2 looked up before it checked the rights, no
default VPC) tells nothing.

A probe is keyed by the IAM action it is about; a request that needs more than that action names the others
in `also`, so that a refusal is pinned on the action only when the others are shown held by their own
probes (a tagged CreateSecurityGroup asks for ec2:CreateTags and ec2:CreateSecurityGroup). The ids and
names in the requests are made up: nothing is looked up or made. EC2 operations without a DryRun parameter
(AssociateIamInstanceProfile, ReplaceIamInstanceProfileAssociation, DescribeIamInstanceProfileAssociations)
and the other services' actions have no probe: the caller shows them as unknown.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import cache
from typing import Any

from botocore.exceptions import ClientError

from provisioning.cloud.aws.context import AwsContext, error_code

ALLOWED, REFUSED = "DryRunOperation", "UnauthorizedOperation"
_NAME = "deepvm-check-probe"
# a public key with no private half anywhere: ImportKeyPair checks the material's form
_PUBLIC_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIPsyiWj/oPhIk2DntLpyiv9Qa/UKSEqrDG+qtz+1HdpY deepvm-check-probe"
_INSTANCE, _GROUP, _TEMPLATE = "i-00000000000000000", "sg-00000000000000000", "lt-00000000000000000"
_FLEET, _VOLUME = "fleet-00000000-0000-0000-0000-000000000000", "vol-00000000000000000"
_PARALLEL = 8


@dataclass(frozen=True)
class Probe:
    """How one IAM action is probed: a DryRun request, and the other actions that request also needs."""

    action: str  # "ec2:CreateFleet"
    send: Callable[[Any], object]  # makes the request with an EC2 client (DryRun=True in it)
    also: tuple[str, ...] = ()


@dataclass(frozen=True)
class Answer:
    """What EC2 answered one probe."""

    action: str
    code: str  # DryRunOperation, UnauthorizedOperation, or whatever else EC2 (or botocore) said
    message: str = ""
    also: tuple[str, ...] = ()  # the probe's other actions


@cache
def _operation_names() -> dict[str, str]:
    """EC2's operations by boto3 method name: "describe_fleets" -> "DescribeFleets"."""
    import botocore.session
    from botocore import xform_name

    return {xform_name(name): name for name in botocore.session.get_session().get_service_model("ec2").operation_names}


def _describing(*methods: str) -> list[Probe]:
    """Describe* probes: the operation's own right, no parameters."""
    names = _operation_names()
    return [Probe(f"ec2:{names[m]}", lambda ec2, m=m: getattr(ec2, m)(DryRun=True)) for m in methods]


def probes(image_id: str | None) -> dict[str, Probe]:
    """Every probe there is, by action; RunInstances only with an image to name (`image_id`)."""
    tag = [{"ResourceType": "security-group", "Tags": [{"Key": "deepvm:check", "Value": "probe"}]}]
    found = [
        *_describing(
            "describe_instances",
            "describe_instance_type_offerings",
            "describe_key_pairs",
            "describe_launch_templates",
            "describe_regions",
            "describe_security_groups",
            "describe_subnets",
            "describe_volumes",
        ),
        # narrowed: an endpoint that carries a DryRun describe out (moto) has less to list
        Probe(
            "ec2:DescribeInstanceTypes",
            lambda ec2: ec2.describe_instance_types(DryRun=True, InstanceTypes=["t3.micro"]),
        ),
        Probe(
            "ec2:DescribeSpotPriceHistory",
            lambda ec2: ec2.describe_spot_price_history(DryRun=True, InstanceTypes=["t3.micro"], MaxResults=1),
        ),
        Probe("ec2:DescribeFleets", lambda ec2: ec2.describe_fleets(DryRun=True, FleetIds=[_FLEET])),
        Probe(
            "ec2:CreateSecurityGroup",
            lambda ec2: ec2.create_security_group(DryRun=True, GroupName=_NAME, Description=_NAME),
        ),
        Probe(
            "ec2:CreateTags",
            lambda ec2: ec2.create_security_group(
                DryRun=True, GroupName=_NAME, Description=_NAME, TagSpecifications=tag
            ),
            ("ec2:CreateSecurityGroup",),
        ),
        Probe(
            "ec2:AuthorizeSecurityGroupIngress",
            lambda ec2: ec2.authorize_security_group_ingress(
                DryRun=True,
                GroupId=_GROUP,
                IpPermissions=[
                    {"IpProtocol": "tcp", "FromPort": 22, "ToPort": 22, "IpRanges": [{"CidrIp": "192.0.2.1/32"}]}
                ],
            ),
        ),
        Probe("ec2:DeleteSecurityGroup", lambda ec2: ec2.delete_security_group(DryRun=True, GroupId=_GROUP)),
        Probe(
            "ec2:ImportKeyPair",
            lambda ec2: ec2.import_key_pair(DryRun=True, KeyName=_NAME, PublicKeyMaterial=_PUBLIC_KEY.encode()),
        ),
        Probe("ec2:DeleteKeyPair", lambda ec2: ec2.delete_key_pair(DryRun=True, KeyName=_NAME)),
        Probe(
            "ec2:CreateLaunchTemplate",
            lambda ec2: ec2.create_launch_template(
                DryRun=True, LaunchTemplateName=_NAME, LaunchTemplateData={"InstanceType": "t3.micro"}
            ),
        ),
        Probe(
            "ec2:DeleteLaunchTemplate", lambda ec2: ec2.delete_launch_template(DryRun=True, LaunchTemplateId=_TEMPLATE)
        ),
        Probe(
            "ec2:CreateFleet",
            lambda ec2: ec2.create_fleet(
                DryRun=True,
                Type="instant",
                LaunchTemplateConfigs=[
                    {"LaunchTemplateSpecification": {"LaunchTemplateId": _TEMPLATE, "Version": "1"}}
                ],
                TargetCapacitySpecification={"TotalTargetCapacity": 1, "DefaultTargetCapacityType": "on-demand"},
            ),
            ("ec2:RunInstances",),
        ),  # an instant fleet launches through RunInstances
        Probe(
            "ec2:DeleteFleets", lambda ec2: ec2.delete_fleets(DryRun=True, FleetIds=[_FLEET], TerminateInstances=True)
        ),
        Probe("ec2:GetConsoleOutput", lambda ec2: ec2.get_console_output(DryRun=True, InstanceId=_INSTANCE)),
        Probe("ec2:TerminateInstances", lambda ec2: ec2.terminate_instances(DryRun=True, InstanceIds=[_INSTANCE])),
        Probe("ec2:DeleteVolume", lambda ec2: ec2.delete_volume(DryRun=True, VolumeId=_VOLUME)),
    ]
    if image_id:
        found.append(
            Probe(
                "ec2:RunInstances",
                lambda ec2: ec2.run_instances(
                    DryRun=True, ImageId=image_id, InstanceType="t3.micro", MinCount=1, MaxCount=1
                ),
            )
        )
    return {p.action: p for p in found}


def dry_run(ctx: AwsContext, actions: Iterable[str], image_id: str | None) -> dict[str, Answer]:
    """EC2's answer to the probe of each action that has one (in parallel: a few dozen requests)."""
    available = probes(image_id)
    chosen = [available[a] for a in sorted(set(actions)) if a in available]
    ec2 = ctx.client("ec2")  # made here, once: boto3 clients are thread-safe, their creation is not
    # a local emulator (moto) is not thread-safe: its state changes under concurrent requests
    with ThreadPoolExecutor(max_workers=1 if ctx.emulated else _PARALLEL) as pool:
        return {answer.action: answer for answer in pool.map(lambda p: _ask(ec2, p), chosen)}


def _ask(ec2: Any, probe: Probe) -> Answer:
    try:
        probe.send(ec2)
    except ClientError as exc:
        message = str(exc.response.get("Error", {}).get("Message", ""))
        return Answer(probe.action, error_code(exc), message, probe.also)
    except Exception as exc:  # any other failure (an unparsable answer, no connection) tells nothing
        return Answer(probe.action, type(exc).__name__, str(exc), probe.also)
    # EC2 never carries out a DryRun request; an answer without an error is not EC2's
    return Answer(probe.action, "NoDryRunAnswer", "the endpoint carried out a DryRun request", probe.also)
