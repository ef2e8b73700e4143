"""The live AWS path against moto, in-process and as a server over HTTP (AWS_ENDPOINT_URL), with the
Pricing API and Service Quotas answered by the fake in fake_aws.py (moto implements neither)."""

import re
import socket

import pytest
from botocore.exceptions import ClientError, EndpointConnectionError
from moto import mock_aws
from moto.server import ThreadedMotoServer

from provisioning.catalog.market.aws import AwsUnavailable
from provisioning.catalog.market.cache import DiskCache
from provisioning.catalog.market.families import GPU_FAMILIES, HOLDER_FAMILIES, family_of
from provisioning.catalog.market.live import SPOT_TTL_S, LiveMarket
from provisioning.catalog.model import Market

from .fake_aws import FakeMarketClients

MOTO_SPOT_USD = 0.00001  # moto's fixed spot price


@pytest.fixture
def moto():
    with mock_aws():
        yield


@pytest.fixture
def clock():
    now = [1_800_000_000.0]
    return now


@pytest.fixture
def cache(tmp_path, clock):
    return DiskCache(tmp_path / "cache", clock=lambda: clock[0])


def _check_us_east_1(catalog, on_demand_usd):
    assert catalog.source == "aws"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", catalog.as_of)
    families = {family_of(name) for name in catalog.types}
    assert families <= set(GPU_FAMILIES) | set(HOLDER_FAMILIES)
    assert {"g4dn", "g5", "g6", "p4d", "p5", "c5", "c6in", "m5", "t3", "d3"} <= families
    assert "c5.large" not in catalog.types and "c5.xlarge" in catalog.types
    g5 = catalog.types["g5.xlarge"]
    assert (g5.gpu_model, g5.gpu_count, g5.flops, g5.vcpus, g5.memory_gib) == ("A10G", 1, 70.0, 4, 16.0)
    assert (g5.network_gbps, g5.quota_group) == (10.0, "G and VT")
    p4d = catalog.types["p4d.24xlarge"]
    assert (p4d.gpu_model, p4d.gpu_count, p4d.network_gbps) == ("A100-40GB", 8, 400.0)
    assert catalog.on_demand_price("g5.xlarge", "us-east-1") == on_demand_usd
    spot = catalog.spot_prices("g5.xlarge", "us-east-1")
    assert len(spot) >= 3 and set(spot.values()) == {MOTO_SPOT_USD}
    assert all(zone.startswith("us-east-1") for zone in spot)
    assert catalog.quota("us-east-1", "G and VT", Market.SPOT) == 96.0
    assert catalog.quota("us-east-1", "Standard", Market.ON_DEMAND) == 96.0


def test_live_catalog_in_process(moto, cache):
    clients = FakeMarketClients(on_demand_usd=2.5)
    catalog = LiveMarket(clients, cache=cache).catalog(["us-east-1"])
    _check_us_east_1(catalog, 2.5)
    assert catalog.warnings == []
    assert clients.count("ec2.DescribeInstanceTypes") >= 1
    assert clients.count("ec2.DescribeSpotPriceHistory") == 1
    assert clients.count("pricing.GetProducts") >= 1


def test_cache_serves_the_second_call_and_expired_parts_are_refetched(moto, cache, clock):
    clients = FakeMarketClients()
    first = LiveMarket(clients, cache=cache).catalog(["us-east-1"])
    clients.calls.clear()
    second = LiveMarket(clients, cache=cache).catalog(["us-east-1"])
    assert clients.calls == []
    assert second.types == first.types
    assert sorted(second.prices, key=repr) == sorted(first.prices, key=repr)
    assert second.quotas == first.quotas and second.as_of == first.as_of

    clock[0] += SPOT_TTL_S + 1  # spot prices expire after an hour, the rest after a day
    LiveMarket(clients, cache=cache).catalog(["us-east-1"])
    assert set(clients.calls) == {"ec2.DescribeSpotPriceHistory"}

    clients.calls.clear()
    LiveMarket(clients, cache=cache, refresh=True).catalog(["us-east-1"])
    expected = {"ec2.DescribeInstanceTypes", "pricing.GetProducts", "service-quotas.GetServiceQuota"}
    assert expected <= set(clients.calls)


def test_stale_cache_stands_in_when_aws_is_unreachable(moto, cache, clock):
    clients = FakeMarketClients()
    LiveMarket(clients, cache=cache).catalog(["us-east-1"])
    clock[0] += 2 * 3600
    clients.failures["ec2"] = EndpointConnectionError(endpoint_url="https://ec2.us-east-1.amazonaws.com")
    catalog = LiveMarket(clients, cache=cache).catalog(["us-east-1"])
    assert catalog.spot_prices("g5.xlarge", "us-east-1")
    assert catalog.warnings == [
        "AWS could not be reached (Could not connect to the endpoint URL: "
        '"https://ec2.us-east-1.amazonaws.com"); using spot prices in us-east-1 cached 2.0 h ago'
    ]


def test_nothing_cached_and_unreachable_raises_unavailable(moto, cache):
    clients = FakeMarketClients()
    clients.failures["ec2"] = EndpointConnectionError(endpoint_url="https://ec2.us-east-1.amazonaws.com")
    with pytest.raises(AwsUnavailable, match="AWS could not be reached"):
        LiveMarket(clients, cache=cache).catalog(["us-east-1"])


def test_refused_quotas_only_warn(moto, cache):
    clients = FakeMarketClients()
    denied = {
        "Error": {"Code": "AccessDeniedException", "Message": "not allowed"},
        "ResponseMetadata": {"HTTPStatusCode": 400},
    }
    clients.failures["service-quotas"] = ClientError(denied, "GetServiceQuota")
    catalog = LiveMarket(clients, cache=cache).catalog(["us-east-1"])
    assert catalog.quotas == [] and catalog.prices
    assert catalog.warnings == [
        "could not read vCPU quotas in us-east-1 (your AWS identity lacks the right servicequotas:GetServiceQuota "
        "(AccessDeniedException: not allowed)); no quota limits applied there"
    ]


def test_a_missing_pricing_right_is_named_not_taken_for_refused_credentials(moto, cache):
    clients = FakeMarketClients()
    denied = {
        "Error": {
            "Code": "AccessDeniedException",
            "Message": "User: arn:aws:iam::1:user/u is not authorized to perform: pricing:GetProducts",
        },
        "ResponseMetadata": {"HTTPStatusCode": 400},
    }
    clients.failures["pricing"] = ClientError(denied, "GetProducts")
    with pytest.raises(AwsUnavailable) as caught:
        LiveMarket(clients, cache=cache).catalog(["us-east-1"])
    assert caught.value.reason.startswith(
        "your AWS identity lacks the right pricing:GetProducts (AccessDeniedException: User: "
    )
    assert "refused the credentials" not in caught.value.reason


def test_regions_come_from_the_account(moto, cache):
    regions = LiveMarket(FakeMarketClients(), cache=cache).regions()
    assert {"us-east-1", "eu-west-1", "ap-south-1"} <= set(regions)


@pytest.fixture(scope="module")
def moto_server():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    yield f"http://127.0.0.1:{port}"
    server.stop()


def test_live_catalog_over_http_from_a_moto_server(moto_server, monkeypatch, cache):
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_server)
    clients = FakeMarketClients(on_demand_usd=1.25)
    assert clients.client("ec2", "us-east-1").meta.endpoint_url == moto_server
    catalog = LiveMarket(clients, cache=cache).catalog(["us-east-1", "eu-west-1"])
    _check_us_east_1(catalog, 1.25)
    assert catalog.regions == ["eu-west-1", "us-east-1"]
    assert set(catalog.spot_prices("g5.xlarge", "eu-west-1")) >= {"eu-west-1a", "eu-west-1b"}
