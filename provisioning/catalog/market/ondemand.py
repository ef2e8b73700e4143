"""Live on-demand prices from the AWS Pricing API (`GetProducts`, service AmazonEC2).

The Pricing API lives in us-east-1 whatever region is priced. Filters pin Linux, shared tenancy, no
pre-installed software and capacity status "Used" (the ordinary running-instance rate), so one product
remains per instance type; each PriceList item is a JSON string whose OnDemand terms hold the hourly USD.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from provisioning.catalog.market.aws import paginate
from provisioning.catalog.model import Catalog, Market, Price

PRICING_REGION = "us-east-1"
# ANY_OF takes the values comma-separated in one Value of at most 1024 characters; 40 instance type
# names (at most 16 characters each) stay well inside it.
TYPES_PER_REQUEST = 40


def product_filters(region: str, type_names: list[str]) -> list[dict[str, str]]:
    fixed = {
        "regionCode": region,
        "operatingSystem": "Linux",
        "tenancy": "Shared",
        "preInstalledSw": "NA",
        "capacitystatus": "Used",
        "operation": "RunInstances",
    }
    filters = [{"Type": "TERM_MATCH", "Field": field, "Value": value} for field, value in fixed.items()]
    filters.append({"Type": "ANY_OF", "Field": "instanceType", "Value": ",".join(type_names)})
    return filters


def parse_price_item(item: str) -> tuple[str, float] | None:
    """(instance type, USD per hour) from one PriceList entry; None when it has no hourly USD price."""
    product = json.loads(item)
    name = product.get("product", {}).get("attributes", {}).get("instanceType")
    for term in product.get("terms", {}).get("OnDemand", {}).values():
        for dimension in term.get("priceDimensions", {}).values():
            usd = dimension.get("pricePerUnit", {}).get("USD")
            if name and usd is not None and dimension.get("unit", "Hrs").startswith("Hr") and float(usd) > 0:
                return name, float(usd)
    return None


def fetch_on_demand_prices(pricing: Any, region: str, type_names: Iterable[str]) -> Catalog:
    """On-demand prices of `type_names` in `region`, as a catalog holding prices only.

    Should the filters still leave two products for a type, the lower price is kept (the other is a
    variant the filters missed, e.g. a reservation-backed rate).
    """
    names = sorted(type_names)
    wanted = set(names)
    best: dict[str, float] = {}
    for start in range(0, len(names), TYPES_PER_REQUEST):
        batch = names[start : start + TYPES_PER_REQUEST]
        items = paginate(
            pricing,
            "get_products",
            "PriceList",
            ServiceCode="AmazonEC2",
            Filters=product_filters(region, batch),
            FormatVersion="aws_v1",
        )
        for item in items:
            parsed = parse_price_item(item)
            if parsed and parsed[0] in wanted:
                best[parsed[0]] = min(parsed[1], best.get(parsed[0], parsed[1]))
    prices = [Price(name, region, None, Market.ON_DEMAND, usd) for name, usd in sorted(best.items())]
    return Catalog(types={}, prices=prices)
