"""What `deepvm market` shows, from any catalog: prices, FLOPP and quotas per instance type and region.

FLOPP (DeepVM's instance-level analysis) is flops / price x 3600: floating-point work per dollar, with
flops in the catalog's units (TFLOPS for AWS and the snapshot). The spot figure uses the cheapest zone.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from provisioning.catalog.model import Catalog, InstanceType, Market
from provisioning.core.errors import InputError


def flopp(flops: float, usd_per_hour: float | None) -> float | None:
    """DeepVM's FLOPP = flops / price x 3600; None without a (positive) price."""
    if not usd_per_hour or usd_per_hour <= 0:
        return None
    return flops / usd_per_hour * 3600


@dataclass(frozen=True)
class MarketRow:
    """One instance type in one region."""

    instance_type: InstanceType
    region: str
    on_demand_usd: float | None
    spot_usd_by_zone: dict[str, float]
    quota_on_demand: float | None  # vCPUs of the type's quota group; None = unknown (no limit applied)
    quota_spot: float | None

    @property
    def cheapest_spot(self) -> tuple[str, float] | None:
        if not self.spot_usd_by_zone:
            return None
        return min(self.spot_usd_by_zone.items(), key=lambda item: (item[1], item[0]))

    @property
    def flopp_spot(self) -> float | None:
        """None for CPU types, which have no flops to rank by."""
        cheapest = self.cheapest_spot
        if cheapest is None or not self.instance_type.is_gpu:
            return None
        return flopp(self.instance_type.flops, cheapest[1])

    @property
    def flopp_on_demand(self) -> float | None:
        return flopp(self.instance_type.flops, self.on_demand_usd) if self.instance_type.is_gpu else None

    def to_json(self) -> dict[str, Any]:
        t = self.instance_type
        cheapest = self.cheapest_spot
        return {
            "instance_type": t.name,
            "region": self.region,
            "gpu_model": t.gpu_model,
            "gpu_count": t.gpu_count,
            "vcpus": t.vcpus,
            "memory_gib": t.memory_gib,
            "network_gbps": t.network_gbps,
            "flops": t.flops,
            "quota_group": t.quota_group,
            "on_demand_usd_per_hour": self.on_demand_usd,
            "spot_usd_per_hour": dict(sorted(self.spot_usd_by_zone.items())),
            "cheapest_spot": None
            if cheapest is None
            else {"availability_zone": cheapest[0], "usd_per_hour": cheapest[1]},
            "flopp_spot": self.flopp_spot,
            "flopp_on_demand": self.flopp_on_demand,
            "quota_vcpus": {"on-demand": self.quota_on_demand, "spot": self.quota_spot},
        }


def market_rows(catalog: Catalog, *, gpu: str | None = None, holders: bool = True) -> list[MarketRow]:
    """Rows for every type priced in each region: GPU types by descending spot FLOPP, then holders.

    gpu: keep only that GPU model (case-insensitive; "A100" matches "A100-40GB"), which drops holders.
    holders: include CPU types.
    """
    on_demand: dict[tuple[str, str], float] = {}
    spot: dict[tuple[str, str], dict[str, float]] = {}
    for p in catalog.prices:
        if p.market is Market.ON_DEMAND:
            on_demand[(p.instance_type, p.region)] = p.usd_per_hour
        else:
            spot.setdefault((p.instance_type, p.region), {})[p.availability_zone or p.region] = p.usd_per_hour
    quotas = {(q.region, q.quota_group, q.market): q.vcpus for q in catalog.quotas}
    keep = _gpu_filter(catalog, gpu)
    rows = []
    for name, region in sorted(on_demand.keys() | spot.keys()):
        t = catalog.types[name]
        if not keep(t) or (not t.is_gpu and not holders):
            continue
        rows.append(
            MarketRow(
                instance_type=t,
                region=region,
                on_demand_usd=on_demand.get((name, region)),
                spot_usd_by_zone=spot.get((name, region), {}),
                quota_on_demand=quotas.get((region, t.quota_group, Market.ON_DEMAND)),
                quota_spot=quotas.get((region, t.quota_group, Market.SPOT)),
            )
        )
    rows.sort(key=lambda r: (not r.instance_type.is_gpu, r.region, -(r.flopp_spot or 0.0), r.instance_type.name))
    return rows


def _gpu_filter(catalog: Catalog, gpu: str | None) -> Callable[[InstanceType], bool]:
    if gpu is None:
        return lambda t: True
    wanted = gpu.lower()

    def matches(t: InstanceType) -> bool:
        model = (t.gpu_model or "").lower()
        return t.is_gpu and (model == wanted or model.startswith(wanted + "-"))

    if not any(matches(t) for t in catalog.types.values()):
        models = sorted({t.gpu_model for t in catalog.gpu_types() if t.gpu_model})
        close = difflib.get_close_matches(gpu, models, n=1, cutoff=0.5)
        hint = f" (did you mean {close[0]}?)" if close else ""
        known = ", ".join(models) if models else "none named"
        raise InputError(f"no GPU model {gpu!r} in the catalog{hint}; its GPU models: {known}")
    return matches
