"""One JSON form for a catalog, shared by the built-in snapshot and the on-disk cache of live AWS data.

{"as_of": "2026-11-01", "source": "snapshot",
 "types": [{"name", "vcpus", "memory_gib", "network_gbps", "gpu_model", "gpu_count", "flops",
            "scaling": {"a", "b", "c", "measured"} | null}],
 "prices": {region: {"on-demand": {type: usd}, "spot": {az: {type: usd}}}},
 "quotas": {region: {quota_group: {"spot": vcpus, "on-demand": vcpus}}}}
"""

from __future__ import annotations

import math
import re
from typing import Any

from provisioning.catalog.model import Catalog, InstanceType, Market, Price, Quota, ScalingParams, quota_group_of


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


def catalog_from_dict(data: Any, source: str | None = None) -> Catalog:
    """A Catalog from deepvm's JSON form; anything wrong is a CatalogFormatError naming the entry and field.

    Every number must be finite and not negative, every price above zero, and every instance type is
    listed once: a negative or zero price would make the planner buy more (or divide by it), a duplicate
    would silently replace the first entry, and NaN or Infinity would make a type vanish from the plans or
    crash the solver.
    """
    top = FieldReader(data, "the catalog")
    types: dict[str, InstanceType] = {}
    first_index: dict[str, int] = {}
    for index, raw in enumerate(top.array("types")):
        instance = _type_from_dict(FieldReader(raw, f"types[{index}]"))
        if instance.name in types:
            raise CatalogFormatError(
                f"types[{index}] ({instance.name}): listed twice (first as types[{first_index[instance.name]}])"
            )
        types[instance.name] = instance
        first_index[instance.name] = index
    prices: list[Price] = []
    for region, raw in top.mapping("prices").items():
        prices.extend(_region_prices(FieldReader(raw, f"prices.{region}"), region))
    quotas: list[Quota] = []
    for region, by_group in top.mapping("quotas", required=False).items():
        for group, by_market in FieldReader(by_group, f"quotas.{region}").raw.items():
            limits = FieldReader(by_market, f"quotas.{region}.{group}")
            quotas.extend(
                Quota(region, group, _market(market, limits.where), limits.number(market)) for market in limits.raw
            )
    unknown = sorted({p.instance_type for p in prices} - types.keys())
    if unknown:
        raise CatalogFormatError(f"prices for undefined instance types: {', '.join(unknown[:5])}")
    return Catalog(
        types=types,
        prices=prices,
        quotas=quotas,
        source=source or top.text("source", default="file"),
        as_of=top.text("as_of", default=""),
    )


def _type_from_dict(field: FieldReader) -> InstanceType:
    name = field.name("name")
    field.where = f"{field.where} ({name})"
    scaling = field.raw.get("scaling")
    return InstanceType(
        name=name,
        quota_group=field.text("quota_group", default="") or quota_group_of(name),
        vcpus=field.whole("vcpus"),
        memory_gib=field.number("memory_gib", default=None),
        network_gbps=field.number("network_gbps"),
        gpu_model=field.text("gpu_model", default=None),
        gpu_count=field.whole("gpu_count", default=0),
        flops=field.number("flops", default=0.0),
        scaling=None if scaling is None else _scaling(FieldReader(scaling, f"{field.where}.scaling")),
    )


def _scaling(field: FieldReader) -> ScalingParams:
    measured = field.raw.get("measured", True)
    if not isinstance(measured, bool):
        raise CatalogFormatError(f"{field.where}.measured must be true or false, not {measured!r}")
    return ScalingParams(field.number("a"), field.number("b"), field.number("c"), measured)


def _region_prices(field: FieldReader, region: str) -> list[Price]:
    on_demand = FieldReader(field.raw.get("on-demand", {}), f"{field.where}.on-demand")
    prices = [Price(name, region, None, Market.ON_DEMAND, on_demand.price(name)) for name in on_demand.raw]
    by_zone = FieldReader(field.raw.get("spot", {}), f"{field.where}.spot")
    for zone, raw in by_zone.raw.items():
        spot = FieldReader(raw, f"{by_zone.where}.{zone}")
        prices.extend(Price(name, region, zone, Market.SPOT, spot.price(name)) for name in spot.raw)
    return prices


def _market(key: str, where: str) -> Market:
    try:
        return Market(key)
    except ValueError:
        raise CatalogFormatError(f"{where}: {key!r} is not a market (spot or on-demand)") from None


_MISSING = object()
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")  # what EC2 instance type names look like


class FieldReader:
    """Reads typed fields of one JSON object and names the exact field when one is missing or wrong.

    `default` makes a field optional (a JSON null counts as missing); without one a missing field is an
    error. Every problem is a CatalogFormatError whose text starts with `where`.
    """

    def __init__(self, raw: Any, where: str) -> None:
        if not isinstance(raw, dict):
            raise CatalogFormatError(f"{where} must be an object")
        self.raw: dict[str, Any] = raw
        self.where = where

    def _get(self, key: str, default: Any) -> Any:
        value = self.raw.get(key)
        if value is None:
            if default is _MISSING:
                raise CatalogFormatError(f"{self.where}: missing field {key!r}")
            return default
        return value

    def number(self, key: str, default: Any = _MISSING) -> Any:
        """A finite number >= 0 (as float)."""
        value = self._get(key, default)
        if value is default:
            return value
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
            raise CatalogFormatError(f"{self.where}.{key} must be a finite number >= 0, not {value!r}")
        return float(value)

    def price(self, key: str) -> float:
        """A price in USD per hour: a finite number > 0. Zero is no price: the planner divides by prices
        (nodes a budget buys, FLOPS per dollar), and a free instance would buy without limit."""
        value = self._get(key, _MISSING)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
            raise CatalogFormatError(f"{self.where}.{key} must be a price above 0 (USD per hour), not {value!r}")
        return float(value)

    def whole(self, key: str, default: Any = _MISSING) -> Any:
        """A whole number >= 0 (4 or 4.0), as int."""
        value = self._get(key, default)
        if value is default:
            return value
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or not math.isfinite(value)
            or value < 0
            or value != int(value)
        ):
            raise CatalogFormatError(f"{self.where}.{key} must be a whole number >= 0, not {value!r}")
        return int(value)

    def text(self, key: str, default: Any = _MISSING) -> Any:
        """A string of at most 256 printable characters."""
        value = self._get(key, default)
        if value is default:
            return value
        if not isinstance(value, str) or len(value) > 256 or not value.isprintable():
            raise CatalogFormatError(
                f"{self.where}.{key} must be a string of at most 256 printable characters, not {value!r}"
            )
        return value

    def name(self, key: str) -> str:
        """An instance type's name: letters, digits, '.', '_' and '-', as EC2 spells them."""
        value = self.text(key)
        if not _NAME.match(value):
            raise CatalogFormatError(
                f"{self.where}.{key} must be an instance type name (letters, digits, '.', '_', '-'), not {value!r}"
            )
        return value

    def array(self, key: str) -> list[Any]:
        value = self._get(key, _MISSING)
        if not isinstance(value, list):
            raise CatalogFormatError(f"{self.where}: {key!r} must be a list")
        return value

    def mapping(self, key: str, required: bool = True) -> dict[str, Any]:
        value = self._get(key, _MISSING if required else {})
        if not isinstance(value, dict):
            raise CatalogFormatError(f"{self.where}: {key!r} must be an object")
        return value
