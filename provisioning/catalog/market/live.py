"""The live AWS catalog: instance specs, on-demand and spot prices and vCPU quotas, cached on disk.

Each region is fetched in four parts, each cached for as long as that kind of data stays true: spot
prices for an hour, specs, on-demand prices and quotas for a day. When AWS cannot be reached, a part
whose cache entry has expired is still used, with a warning saying how old it is; only when nothing is
cached does `AwsUnavailable` reach the caller (which then falls back to the built-in snapshot).
Regions are fetched in parallel because `--region all` means a dozen or more of them.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone

from botocore.exceptions import BotoCoreError, ClientError

from provisioning.catalog.json_form import catalog_from_dict, catalog_to_dict
from provisioning.catalog.market.aws import AwsClients, AwsUnavailable, translate
from provisioning.catalog.market.cache import CacheEntry, DiskCache
from provisioning.catalog.market.instance_types import fetch_instance_types
from provisioning.catalog.market.ondemand import PRICING_REGION, fetch_on_demand_prices
from provisioning.catalog.market.quotas import fetch_vcpu_quotas
from provisioning.catalog.market.spot import fetch_spot_prices
from provisioning.catalog.model import Catalog, InstanceType, Market
from provisioning.core.errors import CloudError
from provisioning.core.home import deepvm_home

SPOT_TTL_S = 3600.0
SLOW_TTL_S = 24 * 3600.0  # instance specs, on-demand prices, quotas, the region list
DEFAULT_REGION = "us-east-1"
MAX_PARALLEL_REGIONS = 8


@dataclass
class _RegionData:
    types: dict[str, InstanceType]
    catalog_parts: list[Catalog] = field(default_factory=list)
    price_times: list[float] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


class LiveMarket:
    """Reads the market from AWS through `clients`, caching under deepvm_home()/cache/aws/<scope>.

    The scope is derived from the profile and endpoint, so a moto server's data never stands in for
    the real account's and two profiles keep their own quotas. `refresh=True` ignores fresh cache
    entries (and rewrites them).
    """

    def __init__(
        self, clients: AwsClients | None = None, *, refresh: bool = False, cache: DiskCache | None = None
    ) -> None:
        self.clients = clients or AwsClients()
        self.refresh = refresh
        self.cache = cache or DiskCache(deepvm_home() / "cache" / "aws" / _scope(self.clients))

    def default_region(self) -> str:
        return self.clients.default_region() or DEFAULT_REGION

    def regions(self) -> list[str]:
        """The regions enabled for the account."""
        self.clients.require_credentials()

        def fetch() -> list[str]:
            ec2 = self.clients.client("ec2", self.default_region())
            return sorted(r["RegionName"] for r in ec2.describe_regions()["Regions"])

        entry = self._cached("regions", SLOW_TTL_S, fetch, "the region list", [], "ec2:DescribeRegions")
        return list(entry.value)

    def catalog(self, regions: list[str]) -> Catalog:
        """One catalog (source "aws") of the wanted instance types in `regions`."""
        self.clients.require_credentials()
        with ThreadPoolExecutor(max_workers=max(1, min(MAX_PARALLEL_REGIONS, len(regions)))) as pool:
            per_region = list(pool.map(self._region, regions))
        types: dict[str, InstanceType] = {}
        catalog = Catalog(types=types, prices=[], source="aws")
        for data in per_region:
            types.update(data.types)
            for part in data.catalog_parts:
                catalog.prices.extend(part.prices)
                catalog.quotas.extend(part.quotas)
            catalog.warnings.extend(data.warnings)
        times = [t for data in per_region for t in data.price_times]
        catalog.as_of = _iso(min(times)) if times else ""
        return catalog

    def _region(self, region: str) -> _RegionData:
        ec2 = self.clients.client("ec2", region)
        warnings: list[str] = []

        def fetch_types() -> dict:
            part, skipped = fetch_instance_types(ec2)
            warnings.extend(skipped)
            return catalog_to_dict(part)

        types_entry = self._cached(
            f"{region}-types",
            SLOW_TTL_S,
            fetch_types,
            f"instance types of {region}",
            warnings,
            "ec2:DescribeInstanceTypes",
        )
        types = catalog_from_dict(types_entry.value).types
        data = _RegionData(types=types, warnings=warnings)
        if not types:
            return data
        pricing = self.clients.client("pricing", PRICING_REGION)
        for key, ttl, what, right, fetch in (
            (
                "on-demand",
                SLOW_TTL_S,
                "on-demand prices",
                "pricing:GetProducts",
                lambda: fetch_on_demand_prices(pricing, region, types),
            ),
            (
                "spot",
                SPOT_TTL_S,
                "spot prices",
                "ec2:DescribeSpotPriceHistory",
                lambda: fetch_spot_prices(ec2, region, types),
            ),
        ):
            entry = self._cached(
                f"{region}-{key}", ttl, _with_types(fetch, types), f"{what} in {region}", warnings, right
            )
            data.catalog_parts.append(catalog_from_dict(entry.value))
            data.price_times.append(entry.fetched_at)
        data.catalog_parts.append(self._quotas(region, types, warnings))
        return data

    def _quotas(self, region: str, types: dict[str, InstanceType], warnings: list[str]) -> Catalog:
        """Quotas are optional: without them the planner applies no quota limit, so a refusal only warns."""
        client = self.clients.client("service-quotas", region)
        groups = {t.quota_group_in(market) for t in types.values() for market in Market}

        def fetch() -> dict:
            return catalog_to_dict(fetch_vcpu_quotas(client, region, groups))

        try:
            entry = self._cached(
                f"{region}-quotas",
                SLOW_TTL_S,
                fetch,
                f"vCPU quotas in {region}",
                warnings,
                "servicequotas:GetServiceQuota",
            )
        except (AwsUnavailable, CloudError) as exc:
            warnings.append(f"could not read vCPU quotas in {region} ({exc}); no quota limits applied there")
            return Catalog(types={}, prices=[])
        return catalog_from_dict(entry.value)

    def _cached(
        self, key: str, max_age_s: float, fetch: Callable[[], object], what: str, warnings: list[str], right: str
    ) -> CacheEntry:
        """The fresh cache entry under `key`, else `fetch()` stored; a stale entry if AWS is unavailable.
        `right` is the IAM action the fetch needs, named when AWS refuses it."""
        if not self.refresh:
            entry = self.cache.fresh(key, max_age_s)
            if entry is not None:
                return entry
        try:
            return self.cache.put(key, fetch())
        except (BotoCoreError, ClientError) as exc:
            error = translate(exc, what, right)
            stale = self.cache.get(key)
            if not isinstance(error, AwsUnavailable) or stale is None:
                raise error from None
            hours = stale.age(self.cache.clock()) / 3600
            warnings.append(f"{error.reason}; using {what} cached {hours:.1f} h ago")
            return stale


def _with_types(fetch: Callable[[], Catalog], types: dict[str, InstanceType]) -> Callable[[], dict]:
    """Prices cached together with the types they price, so each cache file is a complete catalog."""

    def fetch_and_encode() -> dict:
        prices = [p for p in fetch().prices if p.instance_type in types]
        priced = sorted({p.instance_type for p in prices})
        return catalog_to_dict(Catalog(types={name: types[name] for name in priced}, prices=prices))

    return fetch_and_encode


def _scope(clients: AwsClients) -> str:
    endpoint = os.environ.get("AWS_ENDPOINT_URL", "")
    key = f"{clients.session.profile_name}@{endpoint}"
    return hashlib.sha256(key.encode()).hexdigest()[:12]


def _iso(epoch_s: float) -> str:
    return datetime.fromtimestamp(epoch_s, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
