"""resolve_catalog: which source answers, region selection, and the fallback to the snapshot."""

import socket
import time
from datetime import date

import pytest
from botocore.exceptions import ClientError
from conftest import DATA
from moto import mock_aws

from provisioning.catalog import sources
from provisioning.catalog.files import DEEPVM_REGION, load_catalog_file
from provisioning.catalog.market import live
from provisioning.catalog.snapshot import load_snapshot, snapshot_age
from provisioning.catalog.sources import resolve_catalog, save_live_snapshot
from provisioning.core.errors import CloudError, InputError

from .fake_aws import FakeMarketClients

SNAPSHOT_DATE = load_snapshot().as_of
AGE = snapshot_age(SNAPSHOT_DATE)
CREDENTIALS_FIX = (
    "; for live prices set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE (as for the AWS CLI)"
)


@pytest.fixture
def no_credentials(monkeypatch, tmp_path):
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


def test_offline_uses_the_snapshot_in_the_default_region(monkeypatch):
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-west-2")
    catalog = resolve_catalog(regions=None, offline=True, catalog_file=None)
    assert (catalog.source, catalog.regions, catalog.warnings) == ("snapshot", ["us-west-2"], [])
    everywhere = resolve_catalog(regions=["all"], offline=True, catalog_file=None)
    assert everywhere.regions == ["eu-west-1", "us-east-1", "us-east-2", "us-west-2"]
    two = resolve_catalog(regions=["eu-west-1", "us-east-1", "eu-west-1"], offline=True, catalog_file=None)
    assert two.regions == ["eu-west-1", "us-east-1"]


def test_unknown_region_suggests_the_closest():
    with pytest.raises(InputError) as info:
        resolve_catalog(regions=["us-est-1"], offline=True, catalog_file=None)
    assert str(info.value) == (
        "unknown region 'us-est-1' (did you mean us-east-1?); "
        f"the built-in price snapshot of {SNAPSHOT_DATE} has eu-west-1, us-east-1, us-east-2, us-west-2"
    )


def test_default_region_outside_the_snapshot(monkeypatch):
    monkeypatch.setenv("AWS_DEFAULT_REGION", "ap-south-1")
    with pytest.raises(InputError, match="has no prices for your default region ap-south-1; choose one of"):
        resolve_catalog(regions=None, offline=True, catalog_file=None)


def test_catalog_file_alone_makes_no_aws_calls(monkeypatch):
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")  # any AWS call would fail
    catalog = resolve_catalog(regions=None, offline=False, catalog_file=DATA / "deepvm_data.json")
    assert catalog.regions == [DEEPVM_REGION] and len(catalog.types) == 11 and catalog.warnings == []
    assert resolve_catalog(regions=["all"], offline=False, catalog_file=DATA / "deepvm_data.json").prices
    with pytest.raises(InputError, match=r"unknown region 'us-east-1'; .*deepvm_data.json has deepvm$"):
        resolve_catalog(regions=["us-east-1"], offline=False, catalog_file=DATA / "deepvm_data.json")


def test_no_credentials_falls_back_to_the_snapshot_and_says_why(no_credentials):
    catalog = resolve_catalog(regions=None, offline=False, catalog_file=None)
    assert catalog.source == "snapshot" and catalog.regions == ["us-east-1"]
    assert catalog.warnings == [
        f"no AWS credentials found; using the built-in price snapshot of {SNAPSHOT_DATE} ({AGE}){CREDENTIALS_FIX}"
    ]


def test_unreachable_endpoint_falls_back_quickly(monkeypatch):
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{port}")
    started = time.monotonic()
    catalog = resolve_catalog(regions=["us-west-2"], offline=False, catalog_file=None)
    assert time.monotonic() - started < 10
    assert catalog.source == "snapshot" and catalog.regions == ["us-west-2"]
    (warning,) = catalog.warnings
    assert warning.startswith(
        f'AWS could not be reached (Could not connect to the endpoint URL: "http://127.0.0.1:{port}/"'
    )
    assert warning.endswith(f"using the built-in price snapshot of {SNAPSHOT_DATE} ({AGE})")  # not the user's to fix


def test_fallback_to_a_region_the_snapshot_lacks_is_one_clear_error(no_credentials):
    with pytest.raises(InputError) as info:
        resolve_catalog(regions=["ap-south-1"], offline=False, catalog_file=None)
    assert str(info.value).startswith("no AWS credentials found, and unknown region 'ap-south-1'; the built-in")


@pytest.fixture
def live_aws(monkeypatch):
    """resolve_catalog's live path on moto, with the Pricing/Service Quotas fake."""
    monkeypatch.setattr(live, "AwsClients", FakeMarketClients)
    with mock_aws():
        yield


def test_live_path_and_region_validation(live_aws):
    catalog = resolve_catalog(regions=None, offline=False, catalog_file=None)
    assert catalog.source == "aws" and catalog.regions == ["us-east-1"] and catalog.warnings == []
    expected = r"^unknown region 'eu-wst-1' \(did you mean eu-west-1\?\); AWS has "
    with pytest.raises(InputError, match=expected):
        resolve_catalog(regions=["eu-wst-1"], offline=False, catalog_file=None)


def test_a_missing_pricing_right_falls_back_saying_which_right(live_aws, monkeypatch):
    class NoPricing(FakeMarketClients):
        def __init__(self) -> None:
            super().__init__()
            denied = {
                "Error": {"Code": "AccessDeniedException", "Message": "not authorized"},
                "ResponseMetadata": {"HTTPStatusCode": 400},
            }
            self.failures["pricing"] = ClientError(denied, "GetProducts")

    monkeypatch.setattr(live, "AwsClients", NoPricing)
    catalog = resolve_catalog(regions=None, offline=False, catalog_file=None)
    assert catalog.source == "snapshot"
    assert catalog.warnings == [
        "your AWS identity lacks the right pricing:GetProducts (AccessDeniedException: not authorized); using the "
        f"built-in price snapshot of {SNAPSHOT_DATE} ({AGE}); for live prices add that right to your identity's "
        'IAM policy (README: "What deepvm needs from your AWS account")'
    ]


def test_save_snapshot_from_live_data(live_aws, tmp_path):
    path = tmp_path / "snap.json"
    saved = save_live_snapshot(path, regions=["us-east-1"])
    again = load_catalog_file(path)
    assert again.types == saved.types and len(again.prices) == len(saved.prices)
    assert again.as_of == saved.as_of


def test_save_snapshot_needs_live_data(no_credentials, tmp_path):
    expected = r"^cannot save a snapshot without live AWS data: no AWS credentials found$"
    with pytest.raises(CloudError, match=expected):
        save_live_snapshot(tmp_path / "snap.json", regions=None)


def test_configured_region_reads_the_aws_config_file(monkeypatch, tmp_path):
    monkeypatch.delenv("AWS_DEFAULT_REGION")
    config = tmp_path / "config"
    config.write_text("[default]\nregion = eu-west-1\n")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(config))
    assert sources.configured_region() == "eu-west-1"
    config.write_text("[default]\n")
    assert sources.configured_region() == "us-east-1"


def test_unknown_profile_is_an_input_error(monkeypatch):
    monkeypatch.setenv("AWS_PROFILE", "nope")
    with pytest.raises(InputError) as info:
        resolve_catalog(regions=None, offline=False, catalog_file=None)
    assert str(info.value) == (
        "The config profile (nope) could not be found; set AWS_PROFILE to a profile in your AWS config, or unset it"
    )


@pytest.mark.parametrize(
    ("as_of", "today", "age"),
    [
        ("2025-07-01", date(2026, 11, 23), "16 months old"),  # the "17 months" ran from July to late November
        ("2025-07-01T00:00:00Z", date(2026, 12, 1), "17 months old"),
        ("2026-11-01", date(2026, 11, 23), "22 days old"),
        ("2026-09-24", date(2026, 11, 23), "60 days old"),  # not two whole months yet
        ("2026-11-23", date(2026, 11, 23), "0 days old"),
    ],
)
def test_the_snapshot_warning_says_how_old_the_prices_are(as_of, today, age):
    assert snapshot_age(as_of, today) == age
