"""Live vCPU quotas from Service Quotas: one quota per quota group and market, per region.

get_service_quota returns the account's applied value; a quota the account never changed may only exist
as AWS's default, which get_aws_default_service_quota returns.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from provisioning.catalog.model import P5_SPOT_GROUP, Catalog, Market, Quota

# EC2's vCPU quota codes per quota group and market ("Running On-Demand ... instances" and
# "All ... Spot Instance Requests", https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/using-spot-limits.html
# and .../ec2-on-demand-instances.html#ec2-on-demand-instances-limits; codes as Service Quotas lists them).
# P5 Spot Instances have a quota of their own; on-demand P5 count against the P group's
# (InstanceType.quota_group_in).
QUOTA_CODES: dict[str, dict[Market, str]] = {
    "Standard": {Market.ON_DEMAND: "L-1216C47A", Market.SPOT: "L-34B43A08"},
    "G and VT": {Market.ON_DEMAND: "L-DB2E81BA", Market.SPOT: "L-3819A6DF"},
    "P": {Market.ON_DEMAND: "L-417A185B", Market.SPOT: "L-7212CCBC"},  # spot: "All P4, P3 and P2 ..."
    P5_SPOT_GROUP: {Market.SPOT: "L-C4BD4855"},  # "All P5 Spot Instance Requests"
    "F": {Market.ON_DEMAND: "L-74FC7D96", Market.SPOT: "L-88CF9481"},
    "Inf": {Market.ON_DEMAND: "L-1945791B", Market.SPOT: "L-B5D1601B"},
    "DL": {Market.ON_DEMAND: "L-6E869C2A", Market.SPOT: "L-85EED4F7"},
    "X": {Market.ON_DEMAND: "L-7295265B", Market.SPOT: "L-E3A00192"},
    "Trn": {Market.ON_DEMAND: "L-2C3B7624", Market.SPOT: "L-6B0D517C"},
}


def vcpu_quota(client: Any, code: str) -> float:
    """The account's value of one quota (`code`, one of QUOTA_CODES'), or AWS's default where the account's
    was never changed."""
    try:
        answer = client.get_service_quota(ServiceCode="ec2", QuotaCode=code)
    except client.exceptions.NoSuchResourceException:
        answer = client.get_aws_default_service_quota(ServiceCode="ec2", QuotaCode=code)
    return float(answer["Quota"]["Value"])


def fetch_vcpu_quotas(client: Any, region: str, groups: Iterable[str]) -> Catalog:
    """The vCPU quotas of `groups` (both markets) in the client's region, as a catalog holding quotas only."""
    quotas = [
        Quota(region, group, market, vcpu_quota(client, code))
        for group in sorted(set(groups) & QUOTA_CODES.keys())
        for market, code in QUOTA_CODES[group].items()
    ]
    return Catalog(types={}, prices=[], quotas=quotas)
