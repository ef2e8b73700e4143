"""What an entry of CreateFleet's Errors[] means, by its code: a shortage of capacity, or a refusal to fix.

Only a lack of capacity in the pool (this zone, type and market, now) is a shortage: another plan, zone or
hour may have it, so `--on-shortage next-plan` tries the next plan. Everything else will fail the same way
on every retry, so `up` stops at once with one line that names the code and the fix, after deleting what
it created. The codes are EC2's (https://docs.aws.amazon.com/AWSEC2/latest/APIReference/errors-overview.html);
a code deepvm does not know is a refusal: retrying what nobody understood is never the safe side.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from provisioning.catalog.market.quotas import QUOTA_CODES
from provisioning.catalog.model import Market, quota_group_in_market, quota_group_of


class FleetErrorKind(str, Enum):
    """Who can do something about an Errors[] entry."""

    CAPACITY = "capacity"  # EC2 has no room in the pool now: a shortage
    QUOTA = "quota"  # the account's vCPU or instance quota is used up: ask for more
    RIGHTS = "rights"  # the caller, or a role EC2 needs, may not do it: grant it
    REQUEST = "request"  # the request cannot work (image, subnet, parameters): change it
    UNKNOWN = "unknown"  # a code deepvm does not know


_KINDS: dict[str, FleetErrorKind] = {
    # "not enough capacity in the Availability Zone"; the Spot pool's "isn't enough spare capacity"
    "InsufficientInstanceCapacity": FleetErrorKind.CAPACITY,
    "InsufficientCapacity": FleetErrorKind.CAPACITY,
    "UnfulfillableCapacity": FleetErrorKind.CAPACITY,
    "InsufficientHostCapacity": FleetErrorKind.CAPACITY,
    "Unsupported": FleetErrorKind.CAPACITY,  # the type is not launched in this zone at present
    "SpotMaxPriceTooLow": FleetErrorKind.CAPACITY,  # the spot price is above the most a fleet pays
    "VcpuLimitExceeded": FleetErrorKind.QUOTA,
    "MaxSpotInstanceCountExceeded": FleetErrorKind.QUOTA,
    "InstanceLimitExceeded": FleetErrorKind.QUOTA,
    "UnauthorizedOperation": FleetErrorKind.RIGHTS,
    "AuthFailure": FleetErrorKind.RIGHTS,
    "AuthFailure.ServiceLinkedRoleCreationNotPermitted": FleetErrorKind.RIGHTS,
    "OptInRequired": FleetErrorKind.RIGHTS,
    "PendingVerification": FleetErrorKind.RIGHTS,
    "Blocked": FleetErrorKind.RIGHTS,
    "InvalidParameterValue": FleetErrorKind.REQUEST,
    "InvalidParameter": FleetErrorKind.REQUEST,
    "InvalidParameterCombination": FleetErrorKind.REQUEST,
    "InsufficientFreeAddressesInSubnet": FleetErrorKind.REQUEST,
    "InvalidAMIID.NotFound": FleetErrorKind.REQUEST,
    "InvalidAMIID.Malformed": FleetErrorKind.REQUEST,
    "InvalidAMIID.Unavailable": FleetErrorKind.REQUEST,
}


@dataclass(frozen=True)
class FleetError:
    """One Errors[] entry of an instant fleet, for one instance type and market."""

    code: str
    message: str
    instance_type: str
    market: Market | None  # None when EC2 did not say (it then applies to both markets)

    @property
    def kind(self) -> FleetErrorKind:
        return _KINDS.get(self.code, FleetErrorKind.UNKNOWN)

    @property
    def is_shortage(self) -> bool:
        return self.kind is FleetErrorKind.CAPACITY

    def describe(self) -> str:
        return f"{self.code}: {self.message}".rstrip(": ")

    def fix(self, region: str) -> str:
        """What the user does about it, in one clause."""
        if self.code == "AuthFailure.ServiceLinkedRoleCreationNotPermitted":
            # https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/service-linked-roles-spot-instance-requests.html
            return (
                "the account has no service-linked role for Spot yet and these credentials may not create "
                "it: run `aws iam create-service-linked-role --aws-service-name spot.amazonaws.com` once as "
                "an administrator (or grant iam:CreateServiceLinkedRole)"
            )
        kind = self.kind
        if kind is FleetErrorKind.QUOTA:
            return self._quota_fix(region)
        if kind is FleetErrorKind.RIGHTS:
            return (
                "the credentials lack a right the launch needs (ec2:CreateFleet, ec2:RunInstances, "
                'ec2:CreateTags, iam:PassRole for --instance-profile; README "What deepvm needs from your '
                'AWS account"); `aws sts decode-authorization-message` reads an encoded message'
            )
        if self.code == "InsufficientFreeAddressesInSubnet":
            return "the subnet has no free addresses: pass a larger --subnet in the plan's zone"
        if kind is FleetErrorKind.REQUEST:
            return (
                f"EC2 cannot launch {self.instance_type} this way: check that --ami exists in {region} and "
                f"is built for {self.instance_type}'s architecture, and that --subnet is in the plan's zone"
            )
        return "deepvm does not know this code, so it retries nothing; see EC2's error codes reference"

    def _quota_fix(self, region: str) -> str:
        group = quota_group_of(self.instance_type)
        markets = [self.market] if self.market else list(Market)
        codes = [QUOTA_CODES.get(quota_group_in_market(self.instance_type, group, m), {}).get(m) for m in markets]
        named = ", ".join(f"{m.value} {c}" for m, c in zip(markets, codes, strict=True) if c) or "its quota"
        return (
            f"the account's vCPU quota for {self.instance_type} in {region} ({named}) is used up: ask for "
            "more in Service Quotas (`aws service-quotas request-service-quota-increase --service-code ec2 "
            "--quota-code CODE --desired-value VCPUS`), or plan with live quotas (`deepvm plan` without "
            "--offline)"
        )
