"""Bad plans and catalogs, one case per row: each is refused with exit code >= 2 and exactly one line on
stderr naming the file and the field, never an internal error; for `up`, nothing exists in the moto
server afterwards. Then property tests: random mutations of a valid plan (and catalog) document are
accepted or refused with one clean line, never anything else."""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from provisioning.catalog_json import CatalogFormatError, catalog_from_dict, catalog_to_dict
from provisioning.cloud.plan_input import checked_plans
from provisioning.errors import InputError
from provisioning.snapshot import load_snapshot
from tests.cloud.cloud_state import created_resources
from tests.cloud.plans import make_plan, make_tiering_plan
from tests.conftest import DATA, run_cli

Mutation = Callable[[dict[str, Any]], Any]


def _plan_document() -> dict[str, Any]:
    """plans[0]: Single Anchor (nodes[0] the on-demand anchor, nodes[1] 3 spot trainers);
    plans[1]: Tiering (nodes[0] 3 spot trainers, nodes[1] an on-demand c5.xlarge holder)."""
    return {"plans": [make_plan(spot=3, on_demand=1).to_dict(), make_tiering_plan().to_dict()]}


def _parent(doc: Any, path: tuple[str | int, ...]) -> Any:
    for key in path[:-1]:
        doc = doc[key]
    return doc


def _set(path: str | tuple[str | int, ...], value: Any) -> Mutation:
    """Set the value at a path of the document: a tuple of keys, or dotted ("plans.0.nodes.1.count")."""
    keys = _keys(path)

    def mutate(doc: dict[str, Any]) -> Any:
        _parent(doc, keys)[keys[-1]] = value
        return doc

    return mutate


def _drop(path: str) -> Mutation:
    keys = _keys(path)

    def mutate(doc: dict[str, Any]) -> Any:
        del _parent(doc, keys)[keys[-1]]
        return doc

    return mutate


def _keys(path: str | tuple[str | int, ...]) -> tuple[str | int, ...]:
    if isinstance(path, tuple):
        return path
    return tuple(int(key) if key.isdigit() else key for key in path.split("."))


NODE = "plans.0.nodes.1"  # the Single Anchor plan's spot trainers
COUNT = "plans[0].nodes[1].count"

PLAN_CASES: list[tuple[str, Mutation, str, str]] = [
    # (id, mutation, field named, problem)
    ("count-float", _set(f"{NODE}.count", 2.5), COUNT, "must be an integer from 1 to 512, got 2.5"),
    ("count-string", _set(f"{NODE}.count", "3"), COUNT, 'must be an integer from 1 to 512, got "3"'),
    ("count-bool", _set(f"{NODE}.count", True), COUNT, "must be an integer from 1 to 512, got true"),
    ("count-zero", _set(f"{NODE}.count", 0), COUNT, "must be an integer from 1 to 512, got 0"),
    ("count-negative", _set(f"{NODE}.count", -3), COUNT, "got -3"),
    ("count-billion", _set(f"{NODE}.count", 10**9), COUNT, "got 1000000000"),
    ("count-missing", _drop(f"{NODE}.count"), COUNT, "required field missing"),
    ("unknown-key", _set(f"{NODE}.cout", 3), "plans[0].nodes[1].cout", "unknown field"),
    ("unknown-top-key", _set("plan_v2", {}), "plan_v2", "unknown field"),
    ("type-nul", _set(f"{NODE}.instance_type", "g4dn.xlarge\x00"), "plans[0].nodes[1].instance_type",
     'must be a name of at most 64 letters, digits'),
    ("type-shell", _set(f"{NODE}.instance_type", "g4dn.xlarge; rm -rf /"), "plans[0].nodes[1].instance_type",
     'got "g4dn.xlarge; rm -rf /"'),
    ("type-unknown", _set(f"{NODE}.instance_type", "zz9.mega"), "plans[0].nodes[1].instance_type",
     "unknown instance type 'zz9.mega'"),
    ("market-unknown", _set(f"{NODE}.market", "spott"), "plans[0].nodes[1].market", "must be one of"),
    ("role-unknown", _set(f"{NODE}.role", "boss"), "plans[0].nodes[1].role", "must be one of"),
    ("price-negative", _set(f"{NODE}.usd_per_hour", -0.5), "plans[0].nodes[1].usd_per_hour",
     "must be a finite number >= 0, got -0.5"),
    ("price-nan", _set(f"{NODE}.usd_per_hour", math.nan), "plans[0].nodes[1].usd_per_hour", "got NaN"),
    ("total-infinite", _set("plans.0.price_per_hour", math.inf), "plans[0].price_per_hour", "got Infinity"),
    ("flops-string", _set("plans.0.effective_flops", "many"), "plans[0].effective_flops", 'got "many"'),
    ("region-mars", _set("plans.0.region", "mars-north-1"), "plans[0].region", "unknown region 'mars-north-1'"),
    ("zone-of-another-region", _set("plans.0.availability_zone", "us-west-2a"), "plans[0].availability_zone",
     "'us-west-2a' is not a zone of us-east-1"),
    ("zone-unknown", _set("plans.0.availability_zone", "us-east-1z"), "plans[0].availability_zone",
     "'us-east-1z' is not a zone of us-east-1"),
    ("tiering-without-holder", _drop("plans.1.nodes.1"), "plans[1].architecture",
     "tiering is spot trainers and at least one on-demand holder"),
    ("wrong-architecture-label", _set("plans.0.architecture", "tiering"), "plans[0].architecture",
     "the nodes have 1 anchor(s), 0 holder(s) and 3 spot trainer(s)"),
    ("two-anchors", _set("plans.0.nodes.0.count", 2), "plans[0].architecture",
     "single-anchor is one on-demand anchor"),
    ("gpu-holder", _set("plans.1.nodes.1.instance_type", "g4dn.xlarge"), "plans[1].nodes[1].instance_type",
     "a holder is a CPU instance type, and g4dn.xlarge is not"),
    ("on-demand-trainer", _set(f"{NODE}.market", "on-demand"), "plans[0].nodes[1].market",
     "a trainer is bought spot, not on-demand"),
    ("over-quota", _set(f"{NODE}.count", 500), "plans[0].nodes",
     "needs 2000 spot vCPUs of quota group 'G and VT' in us-east-1; the quota is 512"),
    ("over-node-limit", lambda d: _set("plans.1.nodes.1.count", 300)(_set("plans.1.nodes.0.count", 300)(d)),
     "plans[1].nodes", "600 nodes in all; deepvm launches at most 512"),
    ("no-plans", _set("plans", []), "plans", "must hold at least 1 entries"),
    ("no-nodes", _set("plans.0.nodes", []), "plans[0].nodes", "must hold at least 1 entries"),
    ("nodes-not-a-list", _set("plans.0.nodes", {}), "plans[0].nodes", "must be a list"),
    ("catalog-gone", _set("plans.0.catalog_source", "/nonexistent/catalog.json"), "plans[0].catalog_source",
     "catalog file not found: /nonexistent/catalog.json"),
    ("note-rtl-override", _set("plans.0.notes", ["cheap\u202eevil"]), "plans[0].notes[0]",
     "must be a string of at most 500 printable characters"),
    ("single-plan-bad-count", lambda d: _set("nodes.1.count", 2.5)(d["plans"][0]), "nodes[1].count",
     "must be an integer from 1 to 512, got 2.5"),
]


def _refused_in_one_line(result, where: str) -> str:
    assert result.returncode >= 2, result
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"deepvm: error: {where}"), lines[0]
    assert "internal error" not in lines[0] and "Traceback" not in result.stderr
    return lines[0]


def _up(path: Path, ami: str):
    return run_cli("up", "--yes", "--cloud", "aws", "--plan", str(path), "--ami", ami, "--no-wait", "--name", "c1")


@pytest.mark.parametrize(("mutation", "field", "problem"), [c[1:] for c in PLAN_CASES], ids=[c[0] for c in PLAN_CASES])
def test_a_bad_plan_is_one_line_naming_the_file_and_field_and_creates_nothing(
    ctx, ami, tmp_path, mutation, field, problem
):
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(mutation(_plan_document())))
    line = _refused_in_one_line(_up(path, ami), f"{path}: {field}: ")
    assert problem in line
    assert created_resources(ctx) == {}


def _deep(levels: int) -> str:
    return '{"plans": ' + "[" * levels + "]" * levels + "}"


FILE_CASES: list[tuple[str, Callable[[Path], Path], str]] = [
    # (id, make the file under tmp_path, the line after "deepvm: error: ")
    ("list-at-top", lambda d: _write(d / "p.json", "[1, 2]"), "{f}: expected a JSON object"),
    ("nested-thousands-deep", lambda d: _write(d / "p.json", _deep(5000)), "{f}: JSON nested more than 32 levels deep"),
    ("nested-hundreds-deep", lambda d: _write(d / "p.json", _deep(200)), "{f}: JSON nested more than 32 levels deep"),
    ("directory", lambda d: d, "plan file is a directory: {f}"),
    ("dev-zero", lambda d: Path("/dev/zero"), "plan file is not a regular file: {f}"),
    ("over-a-mebibyte", lambda d: _sparse(d / "p.json", 2 * 1024 * 1024), "plan file {f} is larger than 1 MiB"),
    ("not-json", lambda d: _write(d / "p.json", "{plans: 1}"), "{f} is not valid JSON"),
    ("empty", lambda d: _write(d / "p.json", ""), "{f} is not valid JSON"),
    ("not-utf8", lambda d: _write_bytes(d / "p.json", b'{"plans": "\xff"}'), "{f} is not UTF-8 text"),
    ("missing", lambda d: d / "nope.json", "plan file not found: {f}"),
]


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def _write_bytes(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def _sparse(path: Path, size: int) -> Path:
    with open(path, "wb") as handle:
        handle.truncate(size)
    return path


@pytest.mark.parametrize(("make", "expected"), [c[1:] for c in FILE_CASES], ids=[c[0] for c in FILE_CASES])
def test_a_bad_plan_file_is_one_line_and_creates_nothing(ctx, ami, tmp_path, make, expected):
    path = make(tmp_path)
    _refused_in_one_line(_up(path, ami), expected.format(f=path))
    assert created_resources(ctx) == {}


def test_deepvm_plan_json_fed_back_is_accepted_and_its_tampering_refused(ctx, ami, tmp_path):
    planned = run_cli("plan", "--offline", "--max-price", "3", "--region", "us-east-1", "--json")
    assert planned.returncode == 0, planned.stderr
    path = _write(tmp_path / "planned.json", planned.stdout)
    dry = run_cli("up", "--cloud", "aws", "--plan", str(path), "--dry-run", "--json")
    assert dry.returncode == 0 and "warning" not in dry.stderr, dry.stderr
    assert json.loads(dry.stdout)["plans"][0] == json.loads(planned.stdout)["plans"][0]
    doc = json.loads(planned.stdout)
    doc["plans"][0]["nodes"][0]["count"] = 1e9
    _write(path, json.dumps(doc))
    line = _refused_in_one_line(_up(path, ami), f"{path}: plans[0].nodes[0].count: ")
    assert "got 1000000000.0" in line
    assert created_resources(ctx) == {}


def test_a_plan_made_on_a_catalog_file_is_checked_against_that_file(tmp_path):
    planned = run_cli("plan", "--catalog", "tests/data/deepvm_data.json", "--max-price", "3", "--json")
    assert planned.returncode == 0, planned.stderr
    doc = json.loads(planned.stdout)
    assert doc["plans"][0]["catalog_source"] == str(DATA / "deepvm_data.json")  # absolute: `up` may run elsewhere
    loaded = checked_plans(doc, "planned.json")
    assert loaded.warnings == () and loaded.plans[0].availability_zone == "deepvm-a"
    doc["plans"][0]["nodes"][0]["instance_type"] = "p3.2xlarge"  # in the built-in snapshot, not in that file
    with pytest.raises(InputError, match=r"nodes\[0\]\.instance_type: unknown instance type 'p3.2xlarge' in catalog /"):
        checked_plans(doc, "planned.json")


def test_prices_unlike_the_catalogs_are_repriced_with_a_warning(tmp_path):
    doc = _plan_document()
    doc["plans"][0]["nodes"][1]["usd_per_hour"] = 0.0001
    loaded = checked_plans(doc, "plan.json")
    assert loaded.plans[0].nodes[1].usd_per_hour == pytest.approx(0.1578)
    assert loaded.plans[0].price_per_hour == pytest.approx(0.526 + 3 * 0.1578)
    assert loaded.warnings == (
        "plan.json: plans[0]: its prices are not those of the built-in price snapshot of 2025-07-01; "
        "re-priced from $0.5263/h to $0.9994/h",
    )


# catalogs: `deepvm plan --catalog FILE`


def _own_catalog() -> dict[str, Any]:
    return catalog_to_dict(load_snapshot())


def _deepvm_catalog() -> dict[str, Any]:
    return json.loads((DATA / "deepvm_data.json").read_text())


CATALOG_CASES: list[tuple[str, Callable[[], dict[str, Any]], Mutation, str]] = [
    # (id, base document, mutation, the line after "deepvm: error: FILE: ")
    ("negative-on-demand", _own_catalog, _set(("prices", "us-east-1", "on-demand", "g4dn.xlarge"), -1),
     "prices.us-east-1.on-demand.g4dn.xlarge must be a finite number >= 0, not -1"),
    ("nan-spot", _own_catalog, _set(("prices", "us-east-1", "spot", "us-east-1a", "g4dn.xlarge"), math.nan),
     "prices.us-east-1.spot.us-east-1a.g4dn.xlarge must be a finite number >= 0, not nan"),
    ("nan-flops", _own_catalog, _set("types.0.flops", math.nan), "types[0] (g4dn.xlarge).flops must be a finite"),
    ("negative-flops", _own_catalog, _set("types.0.flops", -65), "types[0] (g4dn.xlarge).flops must be a finite"),
    ("infinite-vcpus", _own_catalog, _set("types.3.vcpus", math.inf),
     "types[3] (g4dn.8xlarge).vcpus must be a whole number >= 0, not inf"),
    ("fractional-vcpus", _own_catalog, _set("types.3.vcpus", 2.5), "types[3] (g4dn.8xlarge).vcpus must be a whole"),
    ("duplicate-type", _own_catalog, lambda d: {**d, "types": [*d["types"], d["types"][0]]},
     "types[62] (g4dn.xlarge): listed twice (first as types[0])"),
    ("missing-name", _own_catalog, _drop("types.3.name"), "types[3]: missing field 'name'"),
    ("nul-in-name", _own_catalog, _set("types.3.name", "p3\x00"), "types[3].name must be"),
    ("nan-quota", _own_catalog, _set("quotas.us-east-1.P.spot", math.nan), "quotas.us-east-1.P.spot must be a finite"),
    ("unknown-market", _own_catalog, _set("quotas.us-east-1.P.reserved", 4), "quotas.us-east-1.P: 'reserved' is not"),
    ("types-not-a-list", _own_catalog, _set("types", {}), "the catalog: 'types' must be a list"),
    ("deepvm-negative-price", _deepvm_catalog, _set("instances.0.ondemand_price", -0.1),
     "instances[0].ondemand_price must be a finite number >= 0, not -0.1"),
    ("deepvm-nan-flops", _deepvm_catalog, _set("instances.1.flops", math.nan), "instances[1].flops must be a finite"),
    ("deepvm-infinite-vcpus", _deepvm_catalog, _set("instances.1.vCPU", math.inf),
     "instances[1].vCPU must be a whole number >= 0, not inf"),
    ("deepvm-duplicate", _deepvm_catalog, lambda d: {**d, "instances": [*d["instances"], d["instances"][1]]},
     "instances[11]: instance type 'g4dn.xlarge' is listed twice"),
    ("deepvm-missing-name", _deepvm_catalog, _drop("instances.2.name"), "instances[2]: missing field 'name'"),
]


@pytest.mark.parametrize(("base", "mutation", "expected"), [c[1:] for c in CATALOG_CASES],
                         ids=[c[0] for c in CATALOG_CASES])
def test_a_bad_catalog_is_one_line_naming_the_entry_and_field(tmp_path, base, mutation, expected):
    path = _write(tmp_path / "catalog.json", json.dumps(mutation(base())))
    line = _refused_in_one_line(run_cli("plan", "--catalog", str(path), "--max-price", "3"), f"{path}: ")
    assert expected in line


@pytest.mark.parametrize(("make", "expected"), [
    (lambda d: _write(d / "c.json", "[]"), "{f} is not a catalog"),
    (lambda d: _write(d / "c.json", '{"types": ' + "[" * 3000 + "]" * 3000 + "}"), "{f}: JSON nested more than 32"),
    (lambda d: d, "catalog file is a directory: {f}"),
    (lambda d: Path("/dev/zero"), "catalog file is not a regular file: {f}"),
], ids=["list-at-top", "nested-deep", "directory", "dev-zero"])
def test_a_bad_catalog_file_is_one_line(tmp_path, make, expected):
    path = make(tmp_path)
    _refused_in_one_line(run_cli("plan", "--catalog", str(path), "--max-price", "3"), expected.format(f=path))


# properties: any mutation is accepted or refused in one clean line

_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(10**20), max_value=10**20),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=30).filter(lambda s: s != "aws"),
)
_json = st.recursive(_scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=10), inner, max_size=3)), max_leaves=8)


def _paths(node: Any, prefix: tuple = ()) -> list[tuple]:
    """Every place in a document a value can be put: existing keys and items, and one new key per object."""
    found = [prefix]
    if isinstance(node, dict):
        found.append((*prefix, "new_key"))
        for key, child in node.items():
            found.extend(_paths(child, (*prefix, key)))
    elif isinstance(node, list):
        for index, child in enumerate(node):
            found.extend(_paths(child, (*prefix, index)))
    return found


def _mutated(data: st.DataObject, base: dict[str, Any]) -> Any:
    doc = copy.deepcopy(base)
    path = data.draw(st.sampled_from(_paths(doc)))
    if not path:
        return data.draw(_json)
    node: Any = doc
    for key in path[:-1]:
        node = node[key]
    if data.draw(st.booleans()) and isinstance(node, dict) and path[-1] in node:
        del node[path[-1]]
    else:
        node[path[-1]] = data.draw(_json)
    return doc


_FAST = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@_FAST
@given(st.data())
def test_a_mutated_plan_is_accepted_or_refused_in_one_clean_line(data):
    doc = _mutated(data, _plan_document())
    try:
        loaded = checked_plans(doc, "plan.json")
    except InputError as exc:
        message = str(exc)
        assert message.startswith("plan.json: "), message
        assert "\n" not in message and "\x00" not in message
        return
    assert loaded.plans and all(sum(g.count for g in p.nodes) >= 1 for p in loaded.plans)
    assert all(math.isfinite(p.price_per_hour) for p in loaded.plans)


@_FAST
@given(st.data())
def test_a_mutated_catalog_is_accepted_or_refused_in_one_clean_line(data):
    doc = _mutated(data, {**_own_catalog(), "types": _own_catalog()["types"][:4]})
    try:
        catalog = catalog_from_dict(doc)
    except CatalogFormatError as exc:
        assert "\n" not in str(exc) and "\x00" not in str(exc)
        return
    assert all(math.isfinite(p.usd_per_hour) and p.usd_per_hour >= 0 for p in catalog.prices)
