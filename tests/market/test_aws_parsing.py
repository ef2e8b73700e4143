"""Parsing of what the AWS APIs return, and the exact requests sent (botocore Stubber)."""

import json
from datetime import datetime, timezone

import boto3
import pytest
from botocore.exceptions import ClientError, EndpointConnectionError, NoCredentialsError
from botocore.stub import ANY, Stubber

from provisioning.catalog.market.aws import AwsUnavailable, translate, unavailable_reason
from provisioning.catalog.market.instance_types import (
    fetch_instance_types,
    instance_type_from_aws,
    parse_network_gbps,
)
from provisioning.catalog.market.ondemand import fetch_on_demand_prices, parse_price_item, product_filters
from provisioning.catalog.market.quotas import QUOTA_CODES, fetch_vcpu_quotas
from provisioning.catalog.market.spot import fetch_spot_prices
from provisioning.catalog.model import Market, Price, Quota
from provisioning.core.errors import CloudError

from .fake_aws import price_item


@pytest.mark.parametrize(
    ("text", "gbps"),
    [
        ("Up to 25 Gigabit", 25.0),
        ("up to 12.5 Gigabit", 12.5),
        ("100 Gigabit", 100.0),
        ("4x 100 Gigabit", 400.0),
        ("3200 Gigabit", 3200.0),
        ("Moderate", 0.3),
        ("High", 1.7),
        ("Low", 0.1),
        ("Low to Moderate", 0.2),
        ("Very Low", 0.05),
        ("Fast", None),
        ("", None),
    ],
)
def test_network_performance_strings(text, gbps):
    assert parse_network_gbps(text) == gbps


def _info(name, vcpus, mib, network, gpus=None):
    info = {
        "InstanceType": name,
        "VCpuInfo": {"DefaultVCpus": vcpus},
        "MemoryInfo": {"SizeInMiB": mib},
        "NetworkInfo": {"NetworkPerformance": network},
    }
    if gpus:
        info["GpuInfo"] = {"Gpus": gpus}
    return info


def test_gpu_info_becomes_model_count_and_flops():
    a100 = [{"Name": "A100", "Manufacturer": "NVIDIA", "Count": 8, "MemoryInfo": {"SizeInMiB": 40960}}]
    t = instance_type_from_aws(_info("p4d.24xlarge", 96, 1179648, "4x 100 Gigabit", a100))
    assert (t.gpu_model, t.gpu_count, t.flops) == ("A100-40GB", 8, 2496.0)
    assert (t.memory_gib, t.network_gbps) == (1152.0, 400.0)
    assert t.quota_group == "P" and t.vcpus == 96
    t4 = [{"Name": "T4", "Manufacturer": "NVIDIA", "Count": 1, "MemoryInfo": {"SizeInMiB": 16384}}]
    t = instance_type_from_aws(_info("g4dn.xlarge", 4, 16384, "Up to 25 Gigabit", t4))
    assert (t.gpu_model, t.flops, t.quota_group, t.memory_gib) == ("T4", 65.0, "G and VT", 16.0)
    cpu = instance_type_from_aws(_info("c5.xlarge", 4, 8192, "Up to 10 Gigabit"))
    assert (cpu.gpu_model, cpu.gpu_count, cpu.flops, cpu.is_gpu) == (None, 0, 0.0, False)
    unknown = [{"Name": "Z9", "Count": 2, "MemoryInfo": {"SizeInMiB": 1024}}]
    t = instance_type_from_aws(_info("g9.xlarge", 4, 8192, "10 Gigabit", unknown))
    assert (t.gpu_model, t.gpu_count, t.flops, t.is_gpu) == ("Z9", 2, 0.0, False)
    assert instance_type_from_aws(_info("x.large", 2, 1024, "Warp speed")) is None


def test_price_list_items():
    assert parse_price_item(price_item("g5.xlarge", "us-east-1", 1.006)) == ("g5.xlarge", 1.006)
    free = json.loads(price_item("g5.xlarge", "us-east-1", 0.0))
    assert parse_price_item(json.dumps(free)) is None
    no_terms = {"product": {"attributes": {"instanceType": "g5.xlarge"}}, "terms": {}}
    assert parse_price_item(json.dumps(no_terms)) is None


def _client(service):
    return boto3.client(service, region_name="us-east-1")


def test_on_demand_request_filters_and_batches():
    pricing = _client("pricing")
    names = [f"c5.{i}xlarge" for i in range(45)]  # two requests: 40 + 5
    with Stubber(pricing) as stub:
        for batch in (sorted(names)[:40], sorted(names)[40:]):
            stub.add_response(
                "get_products",
                {"PriceList": [price_item(n, "eu-west-1", 0.2) for n in batch], "FormatVersion": "aws_v1"},
                {"ServiceCode": "AmazonEC2", "Filters": product_filters("eu-west-1", batch), "FormatVersion": "aws_v1"},
            )
        catalog = fetch_on_demand_prices(pricing, "eu-west-1", names)
        stub.assert_no_pending_responses()
    assert len(catalog.prices) == 45
    assert catalog.prices[0] == Price(sorted(names)[0], "eu-west-1", None, Market.ON_DEMAND, 0.2)
    fields = {f["Field"]: (f["Type"], f["Value"]) for f in product_filters("eu-west-1", ["a", "b"])}
    assert fields == {
        "regionCode": ("TERM_MATCH", "eu-west-1"),
        "operatingSystem": ("TERM_MATCH", "Linux"),
        "tenancy": ("TERM_MATCH", "Shared"),
        "preInstalledSw": ("TERM_MATCH", "NA"),
        "capacitystatus": ("TERM_MATCH", "Used"),
        "operation": ("TERM_MATCH", "RunInstances"),
        "instanceType": ("ANY_OF", "a,b"),
    }


def test_on_demand_keeps_the_lower_of_two_products_and_ignores_unasked_types():
    pricing = _client("pricing")
    with Stubber(pricing) as stub:
        stub.add_response(
            "get_products",
            {
                "PriceList": [
                    price_item("g5.xlarge", "us-east-1", 1.5),
                    price_item("g5.xlarge", "us-east-1", 1.006),
                    price_item("g5.2xlarge", "us-east-1", 1.212),
                ]
            },
            {"ServiceCode": "AmazonEC2", "Filters": ANY, "FormatVersion": "aws_v1"},
        )
        catalog = fetch_on_demand_prices(pricing, "us-east-1", ["g5.xlarge"])
    assert [(p.instance_type, p.usd_per_hour) for p in catalog.prices] == [("g5.xlarge", 1.006)]


def test_quotas_per_group_and_market_with_default_fallback():
    client = _client("service-quotas")
    with Stubber(client) as stub:
        for group in ("G and VT", "P"):
            for market, code in QUOTA_CODES[group].items():
                params = {"ServiceCode": "ec2", "QuotaCode": code}
                if (group, market) == ("P", Market.SPOT):
                    stub.add_client_error("get_service_quota", "NoSuchResourceException", expected_params=params)
                    stub.add_response(
                        "get_aws_default_service_quota", {"Quota": {"QuotaCode": code, "Value": 64.0}}, params
                    )
                else:
                    stub.add_response("get_service_quota", {"Quota": {"QuotaCode": code, "Value": 128.0}}, params)
        catalog = fetch_vcpu_quotas(client, "us-east-1", ["P", "G and VT", "G and VT", "Nonsense"])
        stub.assert_no_pending_responses()
    assert catalog.quotas == [
        Quota("us-east-1", "G and VT", Market.ON_DEMAND, 128.0),
        Quota("us-east-1", "G and VT", Market.SPOT, 128.0),
        Quota("us-east-1", "P", Market.ON_DEMAND, 128.0),
        Quota("us-east-1", "P", Market.SPOT, 64.0),
    ]
    assert QUOTA_CODES["Standard"] == {Market.ON_DEMAND: "L-1216C47A", Market.SPOT: "L-34B43A08"}


def test_spot_keeps_the_newest_price_per_type_and_zone():
    ec2 = _client("ec2")
    old, new = datetime(2026, 1, 1, tzinfo=timezone.utc), datetime(2026, 1, 2, tzinfo=timezone.utc)
    history = [
        {
            "InstanceType": "g5.xlarge",
            "AvailabilityZone": "us-east-1a",
            "SpotPrice": "0.40",
            "Timestamp": old,
            "ProductDescription": "Linux/UNIX",
        },
        {
            "InstanceType": "g5.xlarge",
            "AvailabilityZone": "us-east-1a",
            "SpotPrice": "0.30",
            "Timestamp": new,
            "ProductDescription": "Linux/UNIX",
        },
        {
            "InstanceType": "g5.xlarge",
            "AvailabilityZone": "us-east-1b",
            "SpotPrice": "0.35",
            "Timestamp": old,
            "ProductDescription": "Linux/UNIX",
        },
    ]
    with Stubber(ec2) as stub:
        stub.add_response(
            "describe_spot_price_history",
            {"SpotPriceHistory": history},
            {"InstanceTypes": ["g5.xlarge"], "ProductDescriptions": ["Linux/UNIX"], "StartTime": ANY},
        )
        catalog = fetch_spot_prices(ec2, "us-east-1", ["g5.xlarge"])
    assert sorted((p.availability_zone, p.usd_per_hour) for p in catalog.prices) == [
        ("us-east-1a", 0.30),
        ("us-east-1b", 0.35),
    ]


def _client_error(code, status=400, message="nope"):
    return ClientError(
        {"Error": {"Code": code, "Message": message}, "ResponseMetadata": {"HTTPStatusCode": status}},
        "DescribeInstanceTypes",
    )


def test_error_meanings():
    assert unavailable_reason(NoCredentialsError()) == "no AWS credentials found"
    unreachable = EndpointConnectionError(endpoint_url="http://x")
    assert unavailable_reason(unreachable) == (
        'AWS could not be reached (Could not connect to the endpoint URL: "http://x")'
    )
    refused = unavailable_reason(_client_error("AuthFailure"))
    assert refused == "AWS refused the credentials (AuthFailure: nope)"
    assert unavailable_reason(_client_error("InvalidParameterValue")) is None
    assert isinstance(translate(_client_error("UnauthorizedOperation"), "x"), AwsUnavailable)
    denied = translate(_client_error("UnauthorizedOperation"), "instance types", "ec2:DescribeInstanceTypes")
    assert str(denied) == "your AWS identity lacks the right ec2:DescribeInstanceTypes (UnauthorizedOperation: nope)"
    assert unavailable_reason(_client_error("AccessDenied")) == (
        "your AWS identity lacks the right to call DescribeInstanceTypes (AccessDenied: nope)"
    )
    assert isinstance(translate(_client_error("500", status=500), "prices"), AwsUnavailable)
    error = translate(_client_error("InvalidParameterValue", message="bad filter"), "instance types")
    assert isinstance(error, CloudError)
    assert str(error) == "AWS refused instance types: InvalidParameterValue: bad filter"


def test_describe_instance_types_keeps_wanted_types_and_warns_about_unusable_ones():
    ec2 = _client("ec2")
    h200 = [{"Name": "H200", "Count": 8, "MemoryInfo": {"SizeInMiB": 144384}}]
    page = [
        _info("g5.xlarge", 4, 16384, "Up to 10 Gigabit", [{"Name": "A10G", "Count": 1}]),
        _info("c5.large", 2, 4096, "Up to 10 Gigabit"),  # holder too small: not wanted
        _info("c5.xlarge", 4, 8192, "Teleport"),
        _info("p5.48xlarge", 192, 2097152, "3200 Gigabit", h200),
    ]
    with Stubber(ec2) as stub:
        stub.add_response("describe_instance_types", {"InstanceTypes": page[:2], "NextToken": "more"}, {"Filters": ANY})
        stub.add_response("describe_instance_types", {"InstanceTypes": page[2:]}, {"Filters": ANY, "NextToken": "more"})
        catalog, warnings = fetch_instance_types(ec2)
    assert sorted(catalog.types) == ["g5.xlarge", "p5.48xlarge"]
    assert not catalog.types["p5.48xlarge"].is_gpu
    assert warnings == [
        "skipped types with unreadable specs: c5.xlarge (network 'Teleport')",
        "GPU models missing from provisioning/catalog/data/gpus.json, so not used as trainers: p5.48xlarge (H200)",
    ]
