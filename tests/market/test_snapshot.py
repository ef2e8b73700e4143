"""The built-in snapshot: what it covers, that its numbers hang together, and that it stays in sync with
the handbook it is generated from."""

import json
from importlib import resources

import pytest

from provisioning.catalog.json_form import catalog_to_dict
from provisioning.catalog.market import handbook
from provisioning.catalog.market.families import GPU_FAMILIES, HOLDER_FAMILIES, family_of
from provisioning.catalog.market.gpus import gpu_table, gpu_tflops
from provisioning.catalog.model import Market
from provisioning.catalog.snapshot import load_snapshot, snapshot_notes

REGIONS = ("us-east-1", "us-west-2", "eu-west-1")


def test_snapshot_covers_every_family_in_three_regions_with_several_zones():
    catalog = load_snapshot()
    assert catalog.source == "snapshot"
    assert catalog.as_of == handbook.AS_OF
    families = {family_of(name) for name in catalog.types}
    assert set(GPU_FAMILIES) | set(HOLDER_FAMILIES) <= families
    assert set(REGIONS) <= set(catalog.regions)
    for region in REGIONS:
        zones = {p.availability_zone for p in catalog.prices if p.region == region and p.market is Market.SPOT}
        assert len(zones) >= 3
    gpu_counts = {t.gpu_count for t in catalog.gpu_types()}
    assert {1, 4, 8} <= gpu_counts
    for name in (
        "g4dn.xlarge",
        "g4dn.metal",
        "g5.48xlarge",
        "g6e.xlarge",
        "p3.2xlarge",
        "p3.16xlarge",
        "p4d.24xlarge",
        "p5.48xlarge",
        "c5.xlarge",
        "c5n.xlarge",
        "c6in.xlarge",
        "m6i.xlarge",
        "t3.xlarge",
        "d3.xlarge",
        "r6i.2xlarge",
    ):
        assert name in catalog.types


def test_flops_are_the_gpu_table_times_the_gpu_count():
    catalog = load_snapshot()
    for t in catalog.types.values():
        assert t.scaling is None
        if t.gpu_count:
            assert t.flops == pytest.approx(gpu_tflops(t.gpu_model) * t.gpu_count)
        else:
            assert t.flops == 0 and t.gpu_model is None
    assert catalog.types["p5.48xlarge"].flops == pytest.approx(8 * 1979 / 2)
    assert catalog.types["g4dn.12xlarge"].quota_group == "G and VT"
    assert catalog.types["p4d.24xlarge"].quota_group == "P"


def test_gpu_table_documents_a_source_for_every_model():
    table = gpu_table()
    assert set(table) >= {"T4", "A10G", "L4", "L40S", "V100", "A100-40GB", "H100"}
    for entry in table.values():
        assert entry["tflops"] > 0
        assert "datasheet" in entry["source"]


def test_every_type_is_priced_in_every_region_with_spot_below_on_demand():
    catalog = load_snapshot()
    for region in catalog.regions:
        for name in catalog.types:
            on_demand = catalog.on_demand_price(name, region)
            if (region, name) in handbook.NOT_OFFERED:
                assert on_demand is None
                continue
            spot = catalog.spot_prices(name, region)
            assert on_demand and on_demand > 0
            assert spot and all(0 < usd < on_demand for usd in spot.values())
    assert catalog.on_demand_price("g4dn.xlarge", "us-east-1") == 0.526


def test_example_quotas_per_region_group_and_market():
    catalog = load_snapshot()
    for region in catalog.regions:
        for group in ("Standard", "G and VT", "P"):
            for market in Market:
                assert catalog.quota(region, group, market) > 0


def test_notes_say_which_numbers_are_estimates():
    text = " ".join(snapshot_notes())
    assert "ESTIMATES" in text and "EXAMPLE vCPU quotas" in text and "up to" in text


def test_callers_get_independent_copies():
    first = load_snapshot()
    first.warnings.append("mine")
    first.prices.clear()
    second = load_snapshot()
    assert second.warnings == [] and second.prices


def test_shipped_file_matches_the_handbook():
    """snapshot.json is generated; editing the handbook without regenerating it fails here."""
    shipped = json.loads(resources.files("provisioning.catalog").joinpath("data/snapshot.json").read_text())
    built = catalog_to_dict(handbook.build_catalog())
    for key in ("as_of", "types", "prices", "quotas"):
        assert shipped[key] == json.loads(json.dumps(built[key])), key
    assert shipped["notes"] == list(handbook.NOTES)
