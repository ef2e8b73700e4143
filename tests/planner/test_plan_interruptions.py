"""`deepvm plan --interruptions` (in this process: the `cli` fixture): expected goodput per dollar, the decision
with and without, bad input."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest
from conftest import REPO, Cli

from provisioning.clusters.plan_choice import checked_plans
from provisioning.planner.interruptions import Interruptions, RecoveryCosts, SpotPool
from simulation.plan_interruptions import plan_interruptions, spot_pool
from simulation.traces import band_hazard, rate_trace, resolve_trace

# Two GPU types with no scaling loss up to 10 nodes, one node each (--node-limit 1):
#   ga: spot only -> Tiering, 1 ga spot + 1 c5 holder, Z = 100 / 0.1 * 3600 = 3.6e6, $0.2/h
#   gb: half the FLOPS, on demand too -> Single Anchor, 1 gb on-demand + 1 gb spot, Z = 2 * 50 / 0.1 * 3600
#       / (1 + EPSILON), $0.3/h
# ga wins by EPSILON. Interruptions cost ga's lone spot node more than gb's pair with its on-demand anchor:
# at >20%/month about 1.6e-5 of Z more, at <5%/month about 1.5e-6, so EPSILON lies between the two.
EPSILON = 5e-6
_SCALING = {"a": 0.5, "b": 10.0, "c": 10.0, "measured": True}


def _gpu(name: str, flops: float) -> dict:
    return {
        "name": name,
        "quota_group": "G and VT",
        "vcpus": 4,
        "memory_gib": 16.0,
        "network_gbps": 25.0,
        "gpu_model": "T4",
        "gpu_count": 1,
        "flops": flops,
        "scaling": _SCALING,
    }


NEAR_TIE = {
    "as_of": "2025-07-01",
    "source": "test",
    "types": [
        _gpu("ga.xlarge", 100.0),
        _gpu("gb.xlarge", 50.0 / (1 + EPSILON)),
        {
            "name": "c5.xlarge",
            "quota_group": "Standard",
            "vcpus": 4,
            "memory_gib": 8.0,
            "network_gbps": 10.0,
            "gpu_model": None,
            "gpu_count": 0,
            "flops": 0.0,
            "scaling": None,
        },
    ],
    "prices": {
        "us-east-1": {
            "on-demand": {"gb.xlarge": 0.2, "c5.xlarge": 0.1},
            "spot": {"us-east-1a": {"ga.xlarge": 0.1, "gb.xlarge": 0.1}},
        }
    },
    "quotas": {},
}


def plan_json(cli: Cli, *args: str) -> dict:
    result = cli("plan", *args, "--json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def trainers(plan: dict) -> list[tuple[str, str, int]]:
    return sorted((n["instance_type"], n["market"], n["count"]) for n in plan["nodes"] if n["role"] != "holder")


@pytest.fixture
def near_tie(tmp_path) -> list[str]:
    path = tmp_path / "catalog.json"
    path.write_text(json.dumps(NEAR_TIE))
    return ["--catalog", str(path), "--max-price", "1", "--node-limit", "1"]


def test_a_frequent_band_moves_a_near_tie_to_the_on_demand_anchor_and_a_rare_one_does_not(near_tie, cli):
    plain = plan_json(cli, *near_tie)
    assert "interruptions" not in plain
    assert trainers(plain["plans"][0]) == [("ga.xlarge", "spot", 1)]

    rare = plan_json(cli, *near_tie, "--interruptions", "<5%")
    assert trainers(rare["plans"][0]) == [("ga.xlarge", "spot", 1)]
    assert rare["interruptions"]["decision_changed"] is False
    assert "the best plan stays 1 ga.xlarge spot" in rare["interruptions"]["summary"]

    frequent = plan_json(cli, *near_tie, "--interruptions", ">20%")
    assert trainers(frequent["plans"][0]) == [("gb.xlarge", "on-demand", 1), ("gb.xlarge", "spot", 1)]
    info = frequent["interruptions"]
    assert info["decision_changed"] is True
    assert trainers(info["without_interruptions"]["plan"]) == [("ga.xlarge", "spot", 1)]
    assert (
        "moves from 1 ga.xlarge spot + 1 c5.xlarge on-demand holder to 1 gb.xlarge on-demand anchor + 1 gb.xlarge spot"
    ) in info["summary"]
    assert "an on-demand anchor that is never reclaimed" in info["summary"]
    # the Z each plan is ranked by is its Z without interruptions times its goodput factor
    best, without = frequent["plans"][0], info["without_interruptions"]
    assert best["objective_value"] == pytest.approx(
        2 * 50 / (1 + EPSILON) / 0.1 * 3600 * info["plans"][0]["goodput_factor"], rel=1e-6
    )
    assert without["objective_value_with_interruptions"] < best["objective_value"]
    assert without["goodput_factor"] < info["plans"][0]["goodput_factor"] < 1


def test_a_real_trace_trades_spot_nodes_for_goodput(cli):
    """Bamboo's p3 nodes lived under 2 h: 76 spot trainers would stop for a relaunch every few minutes."""
    doc = plan_json(cli, "--offline", "--max-price", "12", "--region", "us-east-1", "--interruptions", "aws-p3-bamboo")
    info = doc["interruptions"]
    assert info["decision_changed"] is True
    now, before = info["plans"][0], info["without_interruptions"]
    assert now["spot_trainers"] < before["spot_trainers"]
    assert now["expected_goodput_tflops"] > before["expected_goodput_tflops"]
    assert "spot nodes to lose instead of" in info["summary"]
    pool = resolve_trace("aws-p3-bamboo")
    assert info["types"][0]["mttf_h"] == pytest.approx(pool.mean_lifetime_h())


def test_json_shape_and_the_document_is_still_a_plan_file(isolated_env, cli):
    doc = plan_json(cli, "--offline", "--max-price", "3", "--region", "us-east-1", "--interruptions", "auto")
    info = doc["interruptions"]
    assert set(info) >= {
        "spec",
        "label",
        "relaunch_s",
        "replacement_delay_s",
        "stop_per_interruption_s",
        "types",
        "plans",
        "without_interruptions",
        "decision_changed",
        "summary",
    }
    assert info["spec"] == "auto" and info["relaunch_s"] == 6.3 and info["replacement_delay_s"] == 300
    assert len(info["plans"]) == len(doc["plans"])
    for row in info["plans"]:
        assert set(row) == {"goodput_factor", "expected_goodput_tflops", "expected_usd_per_hour", "spot_trainers"}
        assert 0 < row["goodput_factor"] <= 1
    g4dn = next(t for t in info["types"] if t["instance_type"] == "g4dn.xlarge")
    assert g4dn["hazard_per_h"] == pytest.approx(band_hazard("5-10%"))  # the recorded band
    assert g4dn["factor"] < g4dn["alive_share"] < 1 and g4dn["market"] == "spot"
    assert set(info["without_interruptions"]["plan"]) >= {"architecture", "nodes", "price_per_hour"}
    assert checked_plans(doc, "plan --json")  # `deepvm up --plan` takes the document as it is
    saved = json.loads((isolated_env / "plan.json").read_text())
    assert saved["request"]["interruptions"]["spec"] == "auto"


def test_recovery_flags_change_the_factor(cli):
    slow = plan_json(
        cli,
        "--offline",
        "--max-price",
        "3",
        "--region",
        "us-east-1",
        "--interruptions",
        "0.1",
        "--relaunch-time",
        "120",
        "--replacement-delay",
        "1800",
    )
    info = slow["interruptions"]
    assert info["stop_per_interruption_s"] == 240 and info["replacement_delay_s"] == 1800
    default = plan_interruptions("0.1", RecoveryCosts())
    assert info["types"][0]["factor"] < default.default.node_factor(default.recovery)
    assert info["types"][0]["alive_share"] == pytest.approx(10 / 10.5)  # m = 10 h, then 0.5 h without a node


def test_without_the_flag_nothing_of_the_simulator_loads(isolated_env):
    code = (
        "import runpy, sys\n"
        "sys.argv = ['deepvm', 'plan', '--offline', '--max-price', '3', '--json']\n"
        "try:\n    runpy.run_module('deepvm_cli', run_name='__main__')\n"
        "except SystemExit as exc:\n    assert exc.code == 0, exc.code\n"
        "loaded = [m for m in ('numpy', 'simulation') if m in sys.modules]\n"
        "sys.stderr.write(f'loaded={loaded}\\n')\n"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "loaded=[]" in result.stderr
    doc = json.loads(result.stdout)
    assert "interruptions" not in doc
    assert "interruptions" not in json.loads((isolated_env / "plan.json").read_text())["request"]


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--interruptions", "7%"], "unknown interruption band '7%'; known: <5%, 5-10%"),
        (["--interruptions", "gce-v10"], "unknown trace 'gce-v10'; did you mean gce-v100?"),
        (["--interruptions", "-0.5"], "must be a finite number of reclaims per node-hour >= 0"),
        (["--interruptions", ""], "an interruption band, rate, trace name or trace file is needed"),
        (["--interruptions", "/nonexistent/trace.csv"], "trace file not found: /nonexistent/trace.csv"),
        (["--interruptions", "/dev/zero"], "trace file is not a regular file: /dev/zero"),
        (["--interruptions", "tests"], "trace file is a directory: tests"),
        (["--interruptions", "10-15%", "--relaunch-time", "-1"], "--relaunch-time must be a non-negative number"),
        (["--relaunch-time", "5"], "--relaunch-time applies with --interruptions"),
        (["--interruptions", "10-15%", "--mix"], "--mix does not count --interruptions"),
    ],
)
def test_bad_input_is_one_line_and_nonzero(args, needle, cli):
    result = cli("plan", "--offline", "--max-price", "3", *args)
    assert result.returncode >= 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("deepvm: error:"), result.stderr
    assert needle in lines[0]


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("0,add,node1\n5,remove,node2\n", ":2: node 'node2' is removed but was never added"),
        ('{"metadata": {"gap_seconds": 300}, "data": [4, -1]}', "data[1] must be a whole number of instances >= 0"),
        ("x,y\n", "not a trace deepvm reads"),
    ],
)
def test_a_malformed_trace_file_is_one_line_naming_it(tmp_path, text, needle, cli):
    path = tmp_path / "trace.csv"
    path.write_text(text)
    result = cli("plan", "--offline", "--max-price", "3", "--interruptions", str(path))
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0] and str(path) in lines[0], result.stderr


def test_goodput_share_and_expected_price_by_hand():
    """m = 10 h, d = 1 h, relaunch 30 min (S = 1 h): a = 10/11, lambda = 0.1."""
    recovery = RecoveryCosts(relaunch_s=1800, replacement_delay_s=3600)
    pool = spot_pool(rate_trace(0.1), recovery)
    assert pool.alive_share == pytest.approx(10 / 11)
    counted = Interruptions(label="test", spec="0.1", default=pool, recovery=recovery)
    a = 10 / 11
    assert counted.share("r", "t", spot=2, on_demand=0) == pytest.approx(a * (1 - a * 2 * 0.1 * 1))
    assert counted.share("r", "t", spot=3, on_demand=1) == pytest.approx((1 + 3 * a) / 4 * (1 - a * 3 * 0.1))
    assert counted.share("r", "t", spot=0, on_demand=1) == 1.0
    assert counted.expected_price("r", "t", spot=2, spot_price=0.5, price=1.5) == pytest.approx(1.5 - (1 - a))
    assert pool.node_factor(recovery) == pytest.approx(a * (1 - a * 0.1))
    never = SpotPool(mttf_h=math.inf, alive_share=1.0, source="never")
    assert Interruptions("t", "0", never, recovery).share("r", "t", 5, 0) == 1.0


def test_a_capacity_trace_is_there_its_mean_share_of_the_time():
    trace = resolve_trace("aws-v100-16-us-east-2b")
    pool = plan_interruptions("aws-v100-16-us-east-2b", RecoveryCosts()).default
    assert pool.alive_share == pytest.approx(float(trace.capacity.as_array().mean()))
    assert pool.mttf_h == pytest.approx(trace.mean_lifetime_h())


def test_spot_a_trace_says_is_seldom_there_is_seen_coming_the_plan_starts_on_demand(tmp_path):
    """Capacity one sample in twenty: the best Spot plan's expected Z is below the on-demand cluster's."""
    from provisioning.catalog.model import Market
    from provisioning.catalog.sources import resolve_catalog
    from provisioning.planner import PlanRequest, plan_cluster

    seldom = tmp_path / "seldom.json"
    seldom.write_text(json.dumps({"metadata": {"gap_seconds": 300, "request": 16}, "data": [16] + [0] * 19}))
    catalog = resolve_catalog(regions=["us-east-1"], offline=True, catalog_file=None, refresh=False)
    best = {}
    for spec in (str(seldom), "aws-v100-16-us-east-2b"):
        request = PlanRequest(
            max_price=12.0, regions=("us-east-1",), interruptions=plan_interruptions(spec, RecoveryCosts())
        )
        best[spec] = plan_cluster(catalog, request, with_baselines=False, with_architectures=False).plans[0]
    assert all(g.market is Market.ON_DEMAND for g in best[str(seldom)].nodes)
    assert "on demand: counting interruptions as in trace" in best[str(seldom)].notes[-1]
    assert any(g.market is Market.SPOT for g in best["aws-v100-16-us-east-2b"].nodes)  # there 55 % of the time
