"""Import of DeepVM's catalog files and of deepvm's own form, and every way a catalog file can be bad."""

import json
import re
import shutil

import pytest
from conftest import DATA

from provisioning.catalog.files import DEEPVM_REGION, DEEPVM_ZONE, load_catalog_file
from provisioning.catalog.model import Market, ScalingParams
from provisioning.catalog.snapshot import load_snapshot, save_snapshot
from provisioning.core.errors import InputError


def test_real_world_data_json_maps_every_field():
    catalog = load_catalog_file(DATA / "deepvm_data.json")
    assert len(catalog.types) == 11
    assert catalog.regions == [DEEPVM_REGION]
    g4dn = catalog.types["g4dn.xlarge"]
    assert (g4dn.quota_group, g4dn.vcpus, g4dn.memory_gib, g4dn.network_gbps) == ("G", 4, 16.0, 25.0)
    assert (g4dn.gpu_count, g4dn.gpu_model, g4dn.flops, g4dn.scaling) == (1, None, 377.0, None)
    assert catalog.on_demand_price("g4dn.xlarge", DEEPVM_REGION) == 0.526
    assert catalog.spot_prices("g4dn.xlarge", DEEPVM_REGION) == {DEEPVM_ZONE: 0.1578}
    c5 = catalog.types["c5.xlarge"]
    assert (c5.quota_group, c5.gpu_count, c5.flops, c5.is_gpu, c5.network_gbps) == ("C", 0, 0.0, False, 10.0)
    assert catalog.on_demand_price("c5.xlarge", DEEPVM_REGION) == 0.17
    assert sorted(t.name for t in catalog.gpu_types()) == ["g3s.xlarge", "g4dn.xlarge", "g5.xlarge"]
    assert catalog.quota(DEEPVM_REGION, "G", Market.ON_DEMAND) == 32
    assert catalog.quota(DEEPVM_REGION, "G", Market.SPOT) == 128
    assert catalog.quota(DEEPVM_REGION, "C", Market.SPOT) == 256
    assert catalog.source.endswith("deepvm_data.json")
    assert re.fullmatch(r"\d{4}-\d\d-\d\d", catalog.as_of)


def test_simulation_data_keeps_measured_scaling_and_missing_memory():
    catalog = load_catalog_file(DATA / "deepvm_simul_data.json")
    assert len(catalog.gpu_types()) == 10
    a = catalog.types["A"]
    assert a.scaling == ScalingParams(0.14, 14.5, 13.5, measured=True)
    assert a.memory_gib is None and a.flops == 100.0 and a.network_gbps == 10.0
    # "C" and "G" name both a GPU type and a quota letter in this file; the type keeps its own letter.
    assert catalog.types["C"].quota_group == "G" and catalog.types["C"].is_gpu
    assert catalog.types["c3.xlarge"].scaling is None and catalog.types["c3.xlarge"].network_gbps == 0.3


def test_compact_form_is_accepted_too(tmp_path):
    path = tmp_path / "mine.json"
    save_snapshot(load_snapshot(), path, ["test"])
    catalog = load_catalog_file(path)
    assert catalog.types == load_snapshot().types
    assert catalog.source == str(path)


def _error(path) -> str:
    with pytest.raises(InputError) as info:
        load_catalog_file(path)
    message = str(info.value)
    assert "\n" not in message
    return message


def test_missing_file(tmp_path):
    assert _error(tmp_path / "nope.json") == f"catalog file not found: {tmp_path / 'nope.json'}"


def test_directory(tmp_path):
    assert "is a directory" in _error(tmp_path)


def test_malformed_json_names_line_and_column(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text('{\n  "instances": [\n    {"name": "x",,}\n  ]\n}\n')
    assert (
        _error(path) == f"{path} is not valid JSON: Expecting property name enclosed in double quotes "
        "at line 3, column 18"
    )


def test_wrong_shape_names_the_field(tmp_path):
    data = json.loads((DATA / "deepvm_data.json").read_text())
    del data["instances"][2]["spot_price"]
    path = tmp_path / "shape.json"
    path.write_text(json.dumps(data))
    assert _error(path) == f"{path}: instances[2]: missing field 'spot_price'"
    data["instances"][2]["spot_price"] = "cheap"
    path.write_text(json.dumps(data))
    assert _error(path) == f"{path}: instances[2].spot_price must be a price above 0 (USD per hour), not 'cheap'"
    path.write_text(json.dumps({"instances": {"a": 1}}))
    assert '"instances" must be a list' in _error(path)
    path.write_text(json.dumps([1, 2]))
    assert "is not a catalog" in _error(path)
    path.write_text(json.dumps({"types": [{"name": "x"}], "prices": {}}))
    assert _error(path) == f"{path}: types[0] (x): missing field 'vcpus'"


def test_catalog_without_gpu_types(tmp_path):
    data = json.loads((DATA / "deepvm_data.json").read_text())
    data["instances"] = [i for i in data["instances"] if i["type"] not in ("G", "P")]
    path = tmp_path / "cpu_only.json"
    path.write_text(json.dumps(data))
    assert _error(path) == f"{path} has no GPU instance types (DeepVM's format marks them with type G or P)"


def test_duplicate_type(tmp_path):
    path = tmp_path / "twice.json"
    shutil.copy(DATA / "deepvm_data.json", path)
    data = json.loads(path.read_text())
    data["instances"].append(data["instances"][0])
    path.write_text(json.dumps(data))
    assert "listed twice" in _error(path)
