"""Live spot prices from EC2 `DescribeSpotPriceHistory`: the current Linux/UNIX price per type and zone.

Asking with StartTime = now returns the price in effect now for each type and zone; should several
entries come back for one pair, the newest wins.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timezone
from typing import Any

from provisioning.catalog.market.aws import paginate
from provisioning.catalog.model import Catalog, Market, Price


def fetch_spot_prices(ec2: Any, region: str, type_names: Iterable[str]) -> Catalog:
    """Spot prices (per availability zone) of `type_names` in `region`, as a catalog holding prices only."""
    names = sorted(type_names)
    if not names:
        return Catalog(types={}, prices=[])
    latest: dict[tuple[str, str], tuple[datetime, float]] = {}
    entries = paginate(
        ec2,
        "describe_spot_price_history",
        "SpotPriceHistory",
        InstanceTypes=names,
        ProductDescriptions=["Linux/UNIX"],
        StartTime=datetime.now(timezone.utc),
    )
    for entry in entries:
        key = (entry["InstanceType"], entry["AvailabilityZone"])
        stamp = entry["Timestamp"]
        if key not in latest or stamp > latest[key][0]:
            latest[key] = (stamp, float(entry["SpotPrice"]))
    return Catalog(
        types={},
        prices=[  # a price of 0 is no offer (and no catalog holds one)
            Price(name, region, zone, Market.SPOT, usd) for (name, zone), (_, usd) in sorted(latest.items()) if usd > 0
        ],
    )
