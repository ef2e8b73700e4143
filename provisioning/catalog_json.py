"""One JSON form for a catalog, shared by the built-in snapshot and the on-disk cache of live AWS data.

    {"as_of": "2026-11-01", "source": "snapshot",
     "types": [{"name", "vcpus", "memory_gib", "network_gbps", "gpu_model", "gpu_count", "flops",
                "scaling": {"a", "b", "c", "measured"} | null}],
     "prices": {region: {"on-demand": {type: usd}, "spot": {az: {type: usd}}}},
     "quotas": {region: {quota_group: {"spot": vcpus, "on-demand": vcpus}}}}
"""

from __future__ import annotations

from typing import Any

from provisioning.catalog import Catalog, InstanceType, Market, Price, Quota, ScalingParams, quota_group_of


class CatalogFormatError(ValueError):
    """The data does not have the shape of a catalog."""


def catalog_to_dict(catalog: Catalog) -> dict[str, Any]:
    prices: dict[str, dict[str, Any]] = {}
    for p in catalog.prices:
        region = prices.setdefault(p.region, {"on-demand": {}, "spot": {}})
        if p.market is Market.ON_DEMAND:
            region["on-demand"][p.instance_type] = p.usd_per_hour
        else:
            region["spot"].setdefault(p.availability_zone, {})[p.instance_type] = p.usd_per_hour
    quotas: dict[str, dict[str, dict[str, float]]] = {}
    for q in catalog.quotas:
        quotas.setdefault(q.region, {}).setdefault(q.quota_group, {})[q.market.value] = q.vcpus
    return {
        "as_of": catalog.as_of,
        "source": catalog.source,
        "types": [_type_to_dict(t) for t in catalog.types.values()],
        "prices": prices,
        "quotas": quotas,
    }


def _type_to_dict(t: InstanceType) -> dict[str, Any]:
    scaling = None
    if t.scaling is not None:
        scaling = {"a": t.scaling.a, "b": t.scaling.b, "c": t.scaling.c, "measured": t.scaling.measured}
    return {
        "name": t.name,
        "quota_group": t.quota_group,
        "vcpus": t.vcpus,
        "memory_gib": t.memory_gib,
        "network_gbps": t.network_gbps,
        "gpu_model": t.gpu_model,
        "gpu_count": t.gpu_count,
        "flops": t.flops,
        "scaling": scaling,
    }


def catalog_from_dict(data: dict[str, Any], source: str | None = None) -> Catalog:
    try:
        types = {}
        for raw in data["types"]:
            scaling = raw.get("scaling")
            types[raw["name"]] = InstanceType(
                name=raw["name"],
                quota_group=raw.get("quota_group") or quota_group_of(raw["name"]),
                vcpus=int(raw["vcpus"]),
                memory_gib=None if raw.get("memory_gib") is None else float(raw["memory_gib"]),
                network_gbps=float(raw["network_gbps"]),
                gpu_model=raw.get("gpu_model"),
                gpu_count=int(raw.get("gpu_count") or 0),
                flops=float(raw.get("flops") or 0.0),
                scaling=None if scaling is None else ScalingParams(**scaling),
            )
        prices = []
        for region, by_market in data["prices"].items():
            for name, usd in by_market.get("on-demand", {}).items():
                prices.append(Price(name, region, None, Market.ON_DEMAND, float(usd)))
            for az, by_type in by_market.get("spot", {}).items():
                for name, usd in by_type.items():
                    prices.append(Price(name, region, az, Market.SPOT, float(usd)))
        quotas = [
            Quota(region, group, Market(market), float(vcpus))
            for region, by_group in data.get("quotas", {}).items()
            for group, by_market in by_group.items()
            for market, vcpus in by_market.items()
        ]
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise CatalogFormatError(f"not a deepvm catalog ({type(exc).__name__}: {exc})") from exc
    unknown = sorted({p.instance_type for p in prices} - types.keys())
    if unknown:
        raise CatalogFormatError(f"prices for undefined instance types: {', '.join(unknown[:5])}")
    return Catalog(
        types=types,
        prices=prices,
        quotas=quotas,
        source=source or data.get("source", "file"),
        as_of=str(data.get("as_of", "")),
    )
