"""Plan files that are not bad input, but not simply good either: `deepvm plan --json` fed back to `up`
(accepted; tampered with, refused), a plan checked against the catalog file it was made on, and prices
that differ from the catalog's (re-priced, with a warning). Bad plans, one per row, are in
tests/test_bad_inputs.py; random mutations of plans in tests/test_input_properties.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from provisioning.clusters.plan_choice import checked_plans
from provisioning.core.errors import InputError
from tests.cloud.cloud_state import created_resources
from tests.conftest import DATA, Cli
from tests.documents import plan_document


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def _refused_in_one_line(result, where: str) -> str:
    assert result.returncode >= 2, result
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"deepvm: error: {where}"), lines[0]
    assert "internal error" not in lines[0] and "Traceback" not in result.stderr
    return lines[0]


def _up(cli: Cli, path: Path, ami: str):
    return cli("up", "--yes", "--cloud", "aws", "--plan", str(path), "--ami", ami, "--no-wait", "--name", "c1")


def test_deepvm_plan_json_fed_back_is_accepted_and_its_tampering_refused(ctx, ami, tmp_path, cli):
    planned = cli("plan", "--offline", "--max-price", "3", "--region", "us-east-1", "--json")
    assert planned.returncode == 0, planned.stderr
    path = _write(tmp_path / "planned.json", planned.stdout)
    dry = cli("up", "--cloud", "aws", "--plan", str(path), "--dry-run", "--json")
    assert dry.returncode == 0 and "warning" not in dry.stderr, dry.stderr
    launched = json.loads(dry.stdout)["plans"][0]
    assert launched.pop("price_cap") == 3.0  # the --max-price it was planned under, recorded with it for its head
    assert launched == json.loads(planned.stdout)["plans"][0]
    doc = json.loads(planned.stdout)
    doc["plans"][0]["nodes"][0]["count"] = 1e9
    _write(path, json.dumps(doc))
    line = _refused_in_one_line(_up(cli, path, ami), f"{path}: plans[0].nodes[0].count: ")
    assert "got 1000000000.0" in line
    assert created_resources(ctx) == {}


def test_a_plan_made_on_a_catalog_file_is_checked_against_that_file(tmp_path, cli):
    planned = cli("plan", "--catalog", "tests/data/deepvm_data.json", "--max-price", "3", "--json")
    assert planned.returncode == 0, planned.stderr
    doc = json.loads(planned.stdout)
    assert doc["plans"][0]["catalog_source"] == str(DATA / "deepvm_data.json")  # absolute: `up` may run elsewhere
    loaded = checked_plans(doc, "planned.json")
    assert loaded.warnings == () and loaded.plans[0].availability_zone == "deepvm-a"
    doc["plans"][0]["nodes"][0]["instance_type"] = "p3.2xlarge"  # in the built-in snapshot, not in that file
    with pytest.raises(InputError, match=r"nodes\[0\]\.instance_type: unknown instance type 'p3.2xlarge' in catalog /"):
        checked_plans(doc, "planned.json")


def test_prices_unlike_the_catalogs_are_repriced_with_a_warning(tmp_path):
    doc = plan_document()
    doc["plans"][0]["nodes"][1]["usd_per_hour"] = 0.0001
    loaded = checked_plans(doc, "plan.json")
    assert loaded.plans[0].nodes[1].usd_per_hour == pytest.approx(0.1578)
    assert loaded.plans[0].price_per_hour == pytest.approx(0.526 + 3 * 0.1578)
    assert loaded.warnings == (
        "plan.json: plans[0]: its prices are not those of the built-in price snapshot of 2025-07-01; "
        "re-priced from $0.5263/h to $0.9994/h",
    )
