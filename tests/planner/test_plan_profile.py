"""`deepvm plan --profile`: a profile's curve replaces its type's, up to 1.5x the nodes it measured; the
profile file is read strictly; `load_profile` and `with_profiles` as `simulate` will call them."""

from __future__ import annotations

import dataclasses
import json
import math
import re
from pathlib import Path

import pytest
from conftest import DATA, Cli, run_cli

from benchmarks.paper_realworld import paper_profiles
from provisioning.catalog.files import load_catalog_file
from provisioning.catalog.snapshot import load_snapshot
from provisioning.core.errors import InputError
from provisioning.planner import Objective, PlanRequest, Role, plan_cluster
from provisioning.scaling.profile import (
    JobIdentity,
    Measured,
    ProfileSetup,
    load_profile,
    make_profile,
    save_profile,
    with_profiles,
)

SETUP = ProfileSetup(
    instance_type="g4dn.xlarge",
    job=JobIdentity(name="allreduce-heavy", spec_sha256="ab" * 32, file="job.yaml"),
    cluster="lab",
    warmup_steps=10,
    steps=60,
    repeats=2,
    measured_at="2026-11-24T10:00:00+00:00",
)
# A model that is mostly communication: 1.75x at best, reached by 4 nodes.
POOR = [
    Measured(1, (100.0, 101.0)),
    Measured(2, (140.0, 142.0)),
    Measured(4, (165.0, 166.0)),
    Measured(8, (175.0, 174.0)),
    Measured(16, (178.0, 177.0)),
]
# Linear scaling, but measured on 3 nodes only.
LINEAR_TO_3 = [Measured(1, (100.0, 100.5)), Measured(2, (199.0, 200.0)), Measured(3, (299.0, 301.0))]


def write_profile(path: Path, measured: list[Measured], instance_type: str = "g4dn.xlarge") -> Path:
    save_profile(make_profile(dataclasses.replace(SETUP, instance_type=instance_type), measured), path)
    return path


def plan_json(cli: Cli, *args: str, max_price: str = "12") -> dict:
    result = cli("plan", "--offline", "--max-price", max_price, *args, "--json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def trainers(plan: dict) -> list[tuple[str, int]]:
    return [(n["instance_type"], n["count"]) for n in plan["nodes"] if n["role"] != "holder"]


def test_poor_scaling_profile_buys_fewer_faster_nodes(tmp_path, cli):
    """With DeepVM's curve the decision is 77 g4dn.xlarge; with a profile of a job that gains little from
    g4dn.xlarge beyond 4 nodes it is fewer nodes of a faster type."""
    default = plan_json(cli)["plans"][0]
    profiled = plan_json(cli, "--profile", str(write_profile(tmp_path / "poor.json", POOR)))["plans"][0]
    flops = {name: t.flops for name, t in load_snapshot().types.items()}
    before, after = trainers(default), trainers(profiled)
    assert before == [("g4dn.xlarge", 1), ("g4dn.xlarge", 76)]
    assert sum(n for _, n in after) < sum(n for _, n in before)
    assert {name for name, _ in after} != {"g4dn.xlarge"}
    assert min(flops[name] for name, _ in after) > flops["g4dn.xlarge"]


def test_profile_caps_its_type_at_one_and_a_half_times_the_nodes_measured(tmp_path, cli):
    """$1/h buys 5 g4dn.xlarge trainers with DeepVM's curve; a profile measured on 3 nodes allows 4."""
    path = write_profile(tmp_path / "linear.json", LINEAR_TO_3)
    assert trainers(plan_json(cli, "--region", "us-east-1", max_price="1")["plans"][0]) == [("g4dn.xlarge", 5)]
    doc = plan_json(cli, "--profile", str(path), "--region", "us-east-1", max_price="1")
    assert [trainers(p) for p in doc["plans"]] == [[("g4dn.xlarge", 4)]] * 3  # floor(1.5 x 3)
    assert all(
        p["notes"]
        == [
            "g4dn.xlarge: capped at 4 nodes, as far as its profiled scaling curve is trusted "
            "(1.5 x the most nodes profiled)"
        ]
        for p in doc["plans"]
    )
    curves = {c["instance_type"]: c for c in doc["scaling_curves"]}
    assert curves["g4dn.xlarge"]["source"] == "profile" and curves["g4dn.xlarge"]["profile"] == str(path)
    assert curves["g4dn.xlarge"]["max_nodes"] == 4 and curves["g4dn.xlarge"]["model"] == "speedup"
    assert curves["g5.xlarge"]["model"] == "deepvm"
    assert curves["g5.xlarge"]["source"] == "deepvm" and curves["g6.xlarge"]["source"] == "default"


def test_human_output_names_the_profile_and_the_defaults(tmp_path, cli):
    path = write_profile(tmp_path / "poor.json", POOR)
    result = cli("plan", "--offline", "--max-price", "12", "--profile", str(path))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    start = lines.index("Scaling curves")
    assert (
        lines[start + 1] == f"  g4dn.xlarge: profile {path} (allreduce-heavy, 5 sizes from 1 to 16 nodes, 2026-11-24)"
    )
    assert re.match(r"    a = [\d.]+ ± [\d.]+, b = .*, RMSE [\d.]+; at most 24 nodes$", lines[start + 2])
    assert lines[start + 3].endswith(": the default curve") or lines[start + 3].endswith("(default)")
    assert re.match(r"  \d+ other GPU types: defaults$", lines[start + 4])


def test_plan_imports_no_numerics_with_or_without_a_profile(tmp_path):
    """`deepvm plan` stays fast: numpy, scipy and matplotlib are for `deepvm profile` (fitting, plotting). (A
    process of its own: what a fresh interpreter imports.)"""
    path = write_profile(tmp_path / "poor.json", POOR)

    def imported(*args: str) -> set[str]:
        env = {"PYTHONPROFILEIMPORTTIME": "1"}
        result = run_cli("plan", "--offline", "--max-price", "12", "--json", *args, env=env)
        assert result.returncode == 0, result.stderr
        return set(re.findall(r"\|\s+(numpy|scipy|matplotlib)$", result.stderr, re.MULTILINE))

    assert imported() == set()
    assert imported("--profile", str(path)) == set()


def test_with_profiles_as_simulate_calls_it(tmp_path):
    """A library caller: load against a catalog, apply, plan; the catalog given is left as it was."""
    catalog = load_snapshot()
    profile = load_profile(write_profile(tmp_path / "linear.json", LINEAR_TO_3), catalog)
    profiled = with_profiles(catalog, [profile])
    curve = profiled.types["g4dn.xlarge"].scaling
    assert curve is not None and curve.max_nodes == 4 and curve.measured
    assert (curve.a, curve.b, curve.c) == (profile.fit.a.value, profile.fit.b.value, profile.fit.c.value)
    assert catalog.types["g4dn.xlarge"].scaling is None
    request = PlanRequest(max_price=1.0, regions=("us-east-1",), top=1)
    assert plan_cluster(catalog, request).plans[0].nodes[0].count == 5
    assert plan_cluster(profiled, request).plans[0].nodes[0].count == 4
    with pytest.raises(InputError, match=r"two profiles for g4dn\.xlarge"):
        with_profiles(catalog, [profile, profile])


def test_a_profile_is_believed_below_the_inflection_point():
    """DeepVM's g5.xlarge runs gain x1.03 from 8 nodes, but its fitted inflection point is 18.5, where
    DeepVM's K(n) stops being 1: through K, 6 g5.xlarge would stay 6 nodes' worth and win the $2/h
    throughput decision. Read as the speed-up it measured, the profile makes it 11 g4dn.xlarge."""
    catalog = load_catalog_file(DATA / "deepvm_data.json")
    g5 = [p for p in paper_profiles(catalog) if p.instance_type == "g5.xlarge"]
    request = PlanRequest(max_price=2.0, objective=Objective.THROUGHPUT, top=1)
    default = plan_cluster(catalog, request).plans[0]
    profiled = plan_cluster(with_profiles(catalog, g5), request).plans[0]
    assert [(g.instance_type, g.count) for g in default.nodes if g.role is Role.TRAINER] == [("g5.xlarge", 6)]
    assert [(g.instance_type, g.count) for g in profiled.nodes if g.role is Role.TRAINER] == [("g4dn.xlarge", 11)]
    assert profiled.effective_flops == pytest.approx(11 * 377)  # below g4dn.xlarge's b, DeepVM's curve: linear
    assert default.effective_flops == pytest.approx(6 * 696)


def _document(tmp_path: Path) -> dict:
    return json.loads(write_profile(tmp_path / "good.json", LINEAR_TO_3).read_text())


def _set(path: str, value: object):
    def change(doc: dict) -> None:
        *parents, last = path.split(".")
        target = doc
        for key in parents:
            target = target[int(key)] if isinstance(target, list) else target[key]
        if isinstance(target, list):
            target[int(last)] = value
        else:
            target[last] = value

    return change


BAD_DOCUMENTS = [
    (
        "unknown-type",
        _set("instance_type", "g4dn.xlarg"),
        "instance_type: unknown instance type 'g4dn.xlarg' in snapshot (did you mean g4dn.xlarge?)",
    ),
    ("cpu-type", _set("instance_type", "c5.xlarge"), "instance_type: c5.xlarge is not a GPU type in snapshot"),
    ("nan-a", _set("fit.a.value", math.nan), "fit.a.value: must be a finite number > 0, got NaN"),
    ("negative-c", _set("fit.c.value", -2.0), "fit.c.value: must be a finite number > 0, got -2.0"),
    ("infinite-b", _set("fit.b.value", math.inf), "fit.b.value: must be a finite number, got Infinity"),
    ("infinite-sd", _set("fit.b.sd", math.inf), "fit.b.sd: must be a finite number >= 0, got Infinity"),
    ("nan-rate", _set("sizes.1.samples_per_s.0", math.nan), "sizes[1].samples_per_s[0]: must be a finite number > 0"),
    ("string-nodes", _set("sizes.1.nodes", "2"), 'sizes[1].nodes: must be an integer from 1 to 512, got "2"'),
    ("version-2", _set("version", 2), "version: must be 1, got 2"),
    ("other-format", _set("format", "deepvm-plan"), "format: must be 'deepvm-profile', got \"deepvm-plan\""),
    ("typo-key", _set("warning", []), "warning: unknown field"),
    ("unordered", _set("sizes.1.nodes", 3), "sizes must list distinct node counts in increasing order"),
    ("max-n-wrong", _set("fit.max_nodes_measured", 8), "fit.max_nodes_measured must be the largest size measured (3)"),
    ("bad-date", _set("measured_at", "yesterday"), "measured_at: must be an ISO 8601 time"),
    ("bad-hash", _set("job.spec_sha256", "xyz"), "job.spec_sha256: String should match pattern"),
]


@pytest.mark.parametrize("mutation, message", [b[1:] for b in BAD_DOCUMENTS], ids=[b[0] for b in BAD_DOCUMENTS])
def test_bad_profile_documents_are_one_line_naming_the_field(tmp_path, mutation, message):
    doc = _document(tmp_path)
    mutation(doc)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(doc))  # Python's json writes NaN and Infinity, as a careless tool would
    with pytest.raises(InputError) as raised:
        load_profile(path, load_snapshot())
    assert str(raised.value).startswith(f"{path}: ") and message in str(raised.value)
    assert "\n" not in str(raised.value)


@pytest.mark.parametrize(
    "content, message",
    [
        ('{"format": "deepvm-profile", "version": 1, "instance', "is not valid JSON"),
        ("[1, 2]", "must be an object"),
        ("", "is not valid JSON"),
    ],
)
def test_corrupt_files_through_the_cli_exit_2_with_one_line(tmp_path, content, message, cli):
    path = tmp_path / "corrupt.json"
    path.write_text(content)
    result = cli("plan", "--offline", "--max-price", "12", "--profile", str(path))
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and result.stderr.startswith(f"deepvm: error: {path}")
    assert message in result.stderr


def test_unknown_type_and_duplicates_through_the_cli(tmp_path, cli):
    good = write_profile(tmp_path / "good.json", LINEAR_TO_3)
    result = cli("plan", "--offline", "--max-price", "12", "--profile", str(good), "--profile", str(good))
    assert (result.returncode, result.stderr) == (
        2,
        "deepvm: error: two profiles for g4dn.xlarge: plan with one profile per instance type\n",
    )
    missing = cli("plan", "--offline", "--max-price", "12", "--profile", str(tmp_path / "none.json"))
    assert (missing.returncode, missing.stderr) == (2, f"deepvm: error: profile not found: {tmp_path / 'none.json'}\n")
