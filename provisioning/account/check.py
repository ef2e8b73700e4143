"""`deepvm check`: whether an AWS account (or the sandbox) is ready for `plan`, `up` and managed jobs, as one
report of ✓/✗/? rows (provisioning.account.report), in the spirit of `sky check`.

The order is the order of dependence: the plan (which names a region) is read first, so that a bad file
is refused before any cloud is asked; then who the credentials are (nothing else can answer without
them), the region, the rights, the quotas against the plan and the image. A part that cannot be asked
because an earlier one failed is one ? row saying so, not a row per right.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from provisioning.account.access import rights_rows
from provisioning.account.image import image_rows
from provisioning.account.limits import PlanChoice, choose_plan, machine_rows, quota_rows
from provisioning.account.report import CheckReport, CheckRow, Mark, Section
from provisioning.cloud.aws.account import (
    CallerIdentity,
    Principal,
    Refused,
    caller_identity,
    region_state,
    simulated_principal,
)
from provisioning.cloud.aws.context import AwsContext, default_region, has_aws_credentials
from provisioning.cloud.types import CloudKind
from provisioning.clusters.target import CLOUDS, resolve_target
from provisioning.core.errors import InputError

_USABLE = ("opt-in-not-required", "opted-in")
_CONFIGURE = "configure credentials as for the AWS CLI (`aws configure`, AWS_PROFILE, `aws sso login`)"
_CREDENTIAL_FIXES = {  # STS's codes for credentials that do not work, and what to do
    "ExpiredToken": "your session expired: renew it (`aws sso login`, or new session credentials)",
    "ExpiredTokenException": "your session expired: renew it (`aws sso login`, or new session credentials)",
    "RequestExpired": "this machine's clock is off: set it right (NTP)",
    "SignatureDoesNotMatch": f"the secret key does not match the access key: {_CONFIGURE}",
    "EndpointConnectionError": "STS could not be reached: check the network (a proxy, HTTPS_PROXY)",
}


@dataclass(frozen=True)
class CheckRequest:
    """What `deepvm check` was asked."""

    cloud: str  # auto | aws | sandbox
    region: str | None  # None: the plan's, else configured_region, else boto3's default
    plan_path: Path | None  # None: the plan `deepvm plan` saved, if any
    image_id: str | None = None  # the AMI `up --ami` would boot; None: the one `up` finds
    configured_region: str | None = None  # deepvm's config file's


def run_check(request: CheckRequest) -> CheckReport:
    """Check everything, in order; InputError (exit 2) only for what the user handed in."""
    if request.cloud not in CLOUDS:
        raise InputError(f"--cloud must be one of {', '.join(CLOUDS)}, not {request.cloud!r}")
    kind = _kind(request.cloud)
    chosen = choose_plan(request.plan_path)
    region = _region(request.region or None, chosen, kind, request.configured_region)
    if kind is CloudKind.AWS and not has_aws_credentials():
        row = CheckRow(Section.CREDENTIALS, "credentials", Mark.MISSING, "boto3 finds no AWS credentials", _CONFIGURE)
        return CheckReport(kind, region, None, (row, chosen.row, *_not_asked("no credentials")))
    target = resolve_target(kind.value)
    ctx = target.context(region)
    assert ctx is not None  # start=True: the sandbox starts, or raises
    identity, row = _identity(ctx)
    if identity is None:
        return CheckReport(kind, region, None, (row, chosen.row, *_not_asked("the credentials do not work")))
    rows = [row, _region_row(ctx, region)]
    principal = simulated_principal(ctx, identity) if not ctx.emulated else Principal("", "")
    images, image_id = image_rows(ctx, kind, request.image_id, chosen.plan)
    rows += rights_rows(ctx, principal, image_id)
    rows.append(chosen.row)
    if chosen.plan is not None and chosen.catalog is not None:
        sandbox = kind is CloudKind.SANDBOX
        rows += machine_rows(chosen.plan) if sandbox else quota_rows(ctx, chosen.plan, chosen.catalog)
    return CheckReport(kind, region, identity, (*rows, *images))


def _kind(cloud: str) -> CloudKind:
    """`auto` is AWS where boto3 finds credentials, the sandbox elsewhere (as for every command)."""
    if cloud == "auto":
        return CloudKind.AWS if has_aws_credentials() else CloudKind.SANDBOX
    return CloudKind(cloud)


def _region(given: str | None, chosen: PlanChoice, kind: CloudKind, configured: str | None) -> str:
    """--region, else the plan's region, else deepvm's configured one, else boto3's (the sandbox: us-east-1);
    one known to botocore in any partition, and the plan's own."""
    import boto3

    plan_region = chosen.plan.region if chosen.plan else None
    if given is not None and ("," in given or given.strip() == "all"):
        raise InputError(f"--region takes one region for check, got {given!r}")
    region = (given or "").strip() or plan_region or configured or default_region()
    if not region:
        if kind is CloudKind.AWS:
            raise InputError("no region given and none configured: pass --region")
        region = "us-east-1"
    session = boto3.session.Session()
    known = {r for p in session.get_available_partitions() for r in session.get_available_regions("ec2", p)}
    if region not in known:
        raise InputError(f"--region {region!r} is no EC2 region botocore knows (e.g. us-east-1, eu-west-1)")
    if plan_region and region != plan_region:
        raise InputError(f"the plan is for {plan_region}, not {region}; plan again with --region {region}")
    return region


def _identity(ctx: AwsContext) -> tuple[CallerIdentity | None, CheckRow]:
    try:
        identity = caller_identity(ctx)
    except Refused as exc:
        fix = _CREDENTIAL_FIXES.get(exc.code, f"the credentials do not work: {_CONFIGURE}")
        return None, CheckRow(Section.CREDENTIALS, "credentials", Mark.MISSING, str(exc), fix)
    root = "; the account's root user: AWS advises a user or role for daily work" if identity.kind == "root" else ""
    detail = f"account {identity.account} as {identity.arn} (partition {identity.partition}){root}"
    return identity, CheckRow(Section.CREDENTIALS, "credentials", Mark.OK, detail)


def _region_row(ctx: AwsContext, region: str) -> CheckRow:
    try:
        state = region_state(ctx, region)
    except Refused as exc:
        return CheckRow(Section.REGION, region, Mark.UNKNOWN, f"whether it is enabled could not be read: {exc}")
    if state.opt_in in _USABLE:
        return CheckRow(Section.REGION, region, Mark.OK, f"enabled ({state.opt_in})")
    fix = f"enable it: `aws account enable-region --region-name {region}` (or the console's AWS Regions page)"
    return CheckRow(
        Section.REGION, region, Mark.MISSING, f"not enabled for the account ({state.opt_in or 'unlisted'})", fix
    )


def _not_asked(why: str) -> tuple[CheckRow, ...]:
    return tuple(
        CheckRow(section, section.value, Mark.UNKNOWN, f"not checked: {why}")
        for section in (Section.REGION, Section.RIGHTS, Section.QUOTAS, Section.IMAGE)
    )
