import pytest

from provisioning.catalog.json_form import CatalogFormatError, catalog_from_dict, catalog_to_dict
from provisioning.catalog.model import Catalog, InstanceType, Market, Price, Quota, ScalingParams, quota_group_of


def test_quota_groups_follow_aws_families():
    assert quota_group_of("g5.xlarge") == "G and VT"
    assert quota_group_of("p4d.24xlarge") == "P"
    assert quota_group_of("c6in.xlarge") == "Standard"
    assert quota_group_of("inf2.xlarge") == "Inf"
    assert quota_group_of("trn1.2xlarge") == "Trn"


def test_round_trip_keeps_every_field():
    catalog = Catalog(
        types={
            "g5.xlarge": InstanceType(
                "g5.xlarge", "G and VT", 4, 16.0, 10.0, "A10G", 1, 70.0, ScalingParams(0.1, 15.0, 5.0)
            ),
            "c5.xlarge": InstanceType("c5.xlarge", "Standard", 4, 8.0, 10.0),
        },
        prices=[
            Price("g5.xlarge", "us-east-1", None, Market.ON_DEMAND, 1.006),
            Price("g5.xlarge", "us-east-1", "us-east-1a", Market.SPOT, 0.31),
            Price("c5.xlarge", "us-east-1", None, Market.ON_DEMAND, 0.17),
        ],
        quotas=[Quota("us-east-1", "G and VT", Market.SPOT, 128.0)],
        source="test",
        as_of="2026-11-01",
    )
    again = catalog_from_dict(catalog_to_dict(catalog))
    assert again.types == catalog.types
    assert sorted(again.prices, key=repr) == sorted(catalog.prices, key=repr)
    assert again.quotas == catalog.quotas
    assert again.spot_prices("g5.xlarge", "us-east-1") == {"us-east-1a": 0.31}
    assert again.quota("us-east-1", "G and VT", Market.SPOT) == 128.0
    assert again.quota("us-east-1", "P", Market.SPOT) is None


def test_malformed_catalog_is_a_format_error():
    with pytest.raises(CatalogFormatError):
        catalog_from_dict({"types": [{"name": "x"}], "prices": {}})
    with pytest.raises(CatalogFormatError, match="undefined instance types"):
        catalog_from_dict({"types": [], "prices": {"r": {"on-demand": {"zz.large": 1.0}}}})
