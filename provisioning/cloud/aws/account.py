"""The account as `deepvm check` meets it: who is calling, whose policies IAM's simulator should read, whether
a region is enabled, and what an image is. Each answer is a small record; a failed call is a `Refused` that
names the call and AWS's error code, which the check turns into a row (AccessDenied there means "cannot
tell", InvalidClientTokenId "the credentials do not work").
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from botocore.exceptions import BotoCoreError, ClientError

from provisioning.cloud.aws.context import AwsContext, error_code
from provisioning.core.errors import CloudError

DENIED_CODES = frozenset({"AccessDenied", "AccessDeniedException", "UnauthorizedOperation"})


class Refused(CloudError):
    """An AWS call that failed, with AWS's error code (or botocore's exception name: no credentials, no
    connection) for the caller to decide what the failure means."""

    def __init__(self, what: str, code: str, message: str) -> None:
        super().__init__(f"{what}: {code}: {message}" if message else f"{what}: {code}")
        self.code = code
        self.message = message

    @property
    def denied(self) -> bool:
        """The caller lacks the right to this call (its credentials work)."""
        return self.code in DENIED_CODES


@contextmanager
def asking(what: str) -> Iterator[None]:
    """Turn botocore's failures of the calls inside into one Refused saying what was asked."""
    try:
        yield
    except ClientError as exc:
        raise Refused(what, error_code(exc), str(exc.response.get("Error", {}).get("Message", ""))) from exc
    except BotoCoreError as exc:
        raise Refused(what, type(exc).__name__, str(exc)) from exc


@dataclass(frozen=True)
class CallerIdentity:
    """Who the credentials belong to, as STS GetCallerIdentity says (any caller may ask: it needs no right,
    https://docs.aws.amazon.com/STS/latest/APIReference/API_GetCallerIdentity.html)."""

    account: str  # the 12-digit account id
    arn: str  # an IAM user, an assumed role's session, the root user, a federated user
    user_id: str

    @property
    def partition(self) -> str:
        """aws, aws-us-gov, aws-cn: every ARN in the account begins with it."""
        return self.arn.split(":")[1]

    @property
    def kind(self) -> str:
        """ "user", "assumed-role", "root", "federated-user", or what else the ARN's resource names."""
        resource = self.arn.split(":", 5)[-1]
        return "root" if resource == "root" else resource.split("/")[0]

    @property
    def role_name(self) -> str:
        """The role of an assumed-role session ("" for any other caller)."""
        parts = self.arn.split(":", 5)[-1].split("/")
        return parts[1] if self.kind == "assumed-role" and len(parts) >= 3 else ""


@dataclass(frozen=True)
class Principal:
    """The IAM user or role whose policies IAM's policy simulator evaluates for the caller."""

    arn: str  # "" when there is none to simulate (the root user, a federated user)
    why_none: str = ""  # then: why
    guessed: bool = False  # a role's ARN built without its path (iam:GetRole was refused)


def caller_identity(ctx: AwsContext) -> CallerIdentity:
    with asking("sts:GetCallerIdentity"):
        answer = ctx.client("sts").get_caller_identity()
    return CallerIdentity(answer["Account"], answer["Arn"], answer.get("UserId", ""))


def simulated_principal(ctx: AwsContext, identity: CallerIdentity) -> Principal:
    """An IAM user as itself; an assumed role's session as its role, whose ARN (with its path, which the
    session's ARN leaves out) comes from iam:GetRole. The simulator takes users, groups and roles only
    (https://docs.aws.amazon.com/IAM/latest/APIReference/API_SimulatePrincipalPolicy.html); it reads the role's
    policies, not a session policy the role was assumed with, which EC2's DryRun would see."""
    if identity.kind == "user" and ":iam::" in identity.arn:
        return Principal(identity.arn)
    if identity.kind == "root":
        return Principal("", "the account's root user: the simulator takes IAM users and roles only")
    if not identity.role_name:
        return Principal("", f"a {identity.kind} caller: the simulator takes IAM users and roles only")
    try:
        return Principal(ctx.client("iam").get_role(RoleName=identity.role_name)["Role"]["Arn"])
    except (ClientError, BotoCoreError):  # a role at the root path has this very ARN
        return Principal(f"arn:{identity.partition}:iam::{identity.account}:role/{identity.role_name}", guessed=True)


@dataclass(frozen=True)
class RegionState:
    """Whether the account may use a region (https://docs.aws.amazon.com/accounts/latest/reference/
    manage-acct-regions.html): opt-in-not-required and opted-in can be used, not-opted-in cannot."""

    name: str
    opt_in: str  # EC2's OptInStatus, "" when EC2 does not list the region


def region_state(ctx: AwsContext, region: str) -> RegionState:
    with asking("ec2:DescribeRegions"):
        found = ctx.client("ec2").describe_regions(RegionNames=[region], AllRegions=True)["Regions"]
    return RegionState(region, found[0].get("OptInStatus", "") if found else "")


@dataclass(frozen=True)
class ImageFacts:
    """What EC2 says of an AMI in one region (DescribeImages)."""

    image_id: str
    found: bool  # False: the region has no such image (or it is not shared with the account)
    name: str = ""
    state: str = ""  # "available" is the only state an instance launches from
    architecture: str = ""  # x86_64, arm64: the instance families it can boot on
    description: str = ""


def image_facts(ctx: AwsContext, image_id: str) -> ImageFacts:
    with asking("ec2:DescribeImages"):
        try:
            images = ctx.client("ec2").describe_images(ImageIds=[image_id])["Images"]
        except ClientError as exc:
            if not error_code(exc).startswith("InvalidAMIID"):  # .NotFound, .Malformed, .Unavailable
                raise
            images = []
    if not images:
        return ImageFacts(image_id, found=False)
    image = images[0]
    return ImageFacts(
        image_id,
        True,
        image.get("Name", ""),
        image.get("State", ""),
        image.get("Architecture", ""),
        image.get("Description", ""),
    )
