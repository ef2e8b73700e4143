"""`deepvm plan` as a user runs it: one JSON document or one error line. The command lines run in this process
(the `cli` fixture); one bad input runs as a process of its own, for its exit code and a stderr without a
traceback."""

from __future__ import annotations

import json
import os

import pytest
from conftest import DATA, Cli, run_cli


def plan_json(cli: Cli, *args: str) -> dict:
    result = cli("plan", *args, "--json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_paper_real_world_winner_and_top_three(cli):
    """DeepVM's AWS run: 17 g4dn.xlarge spot + 1 c5.xlarge on-demand at $2.8526/h, then its ranks 2 and 3."""
    doc = plan_json(cli, "--catalog", str(DATA / "deepvm_data.json"), "--max-price", "3", "--objective", "deepvm")
    best = doc["plans"][0]
    assert best["architecture"] == "tiering"
    assert best["price_per_hour"] == pytest.approx(2.8526)
    assert sorted((n["instance_type"], n["market"], n["count"], n["role"]) for n in best["nodes"]) == [
        ("c5.xlarge", "on-demand", 1, "holder"),
        ("g4dn.xlarge", "spot", 17, "trainer"),
    ]
    # realworld_makespan.csv: the paper's top three configurations and its two baselines
    assert [p["price_per_hour"] for p in doc["plans"]] == pytest.approx([2.8526, 2.8746, 2.8986])
    assert doc["baselines"]["cost_first"]["price_per_hour"] == pytest.approx(2.893)
    assert doc["baselines"]["performance_first"]["price_per_hour"] == pytest.approx(2.8168)
    assert doc["max_price"] == 3 and doc["objective"] == "deepvm"


def test_json_document_shape_and_saved_plan(isolated_env, cli):
    doc = plan_json(cli, "--max-price", "12", "--offline", "--region", "all")
    for plan in doc["plans"]:
        assert set(plan) >= {
            "architecture",
            "price_per_hour",
            "objective_value",
            "effective_flops",
            "region",
            "availability_zone",
            "nodes",
        }
        assert plan["price_per_hour"] <= 12 + 1e-9
        for node in plan["nodes"]:
            assert node["market"] in ("spot", "on-demand")
            assert node["role"] in ("trainer", "anchor", "holder")
    values = [p["objective_value"] for p in doc["plans"]]
    assert values == sorted(values, reverse=True)
    assert set(doc["baselines"]) == {"cost_first", "performance_first", "deepvm_no_scaling"}
    saved = json.loads((isolated_env / "plan.json").read_text())
    assert saved["plans"] == doc["plans"]  # best first: `deepvm up` falls back along them
    assert doc["catalog"]["source"] == "snapshot"


def test_human_output_shows_the_four_stages_and_the_snapshot_date(cli):
    result = cli("plan", "--max-price", "12", "--offline")
    assert result.returncode == 0, result.stderr
    for stage in ("Instance-level analysis", "Best plan per architecture", "Decision:", "Ranked plans"):
        assert stage in result.stdout
    assert "snapshot" in result.stdout and "as of" in result.stdout
    units = " ".join(result.stderr.split())  # the line may wrap
    assert "FLOPP = TFLOP bought per dollar" in units and "in TFLOP per dollar" in units


@pytest.mark.parametrize(
    ("objective", "key"),
    [("throughput", "effective_flops"), ("cost", "objective_value")],
)
def test_other_objectives_rank_by_their_own_measure(objective, key, cli):
    doc = plan_json(cli, "--max-price", "8", "--offline", "--objective", objective)
    assert doc["objective"] == objective
    measure = [p[key] for p in doc["plans"]]
    assert measure == sorted(measure, reverse=(objective == "throughput"))


def test_deadline_gives_the_cheapest_plan_that_finishes_in_time(cli):
    doc = plan_json(cli, "--offline", "--deadline", "10", "--work", "20000")
    best = doc["plans"][0]
    hours = 20000 / (best["effective_flops"] * 3.6)
    assert hours <= 10 + 1e-9
    assert best["objective_value"] == pytest.approx(best["price_per_hour"] * hours)


def test_node_limit_caps_every_type_and_market(cli):
    doc = plan_json(cli, "--catalog", str(DATA / "deepvm_simul_data.json"), "--max-price", "10", "--node-limit", "5")
    for plan in doc["plans"]:
        assert all(node["count"] <= 5 for node in plan["nodes"])


def test_infeasible_price_names_the_lowest_price_that_works(cli):
    result = cli("plan", "--catalog", str(DATA / "deepvm_data.json"), "--max-price", "0.2")
    assert result.returncode == 3
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "no cluster is possible within $0.2/h" in lines[0]
    assert "1 g4dn.xlarge spot + 1 t3.xlarge on-demand holder" in lines[0]
    assert "costs $0.3242/h" in lines[0] and "--max-price 0.33" in lines[0]
    # and that price does work
    assert cli("plan", "--catalog", str(DATA / "deepvm_data.json"), "--max-price", "0.33").returncode == 0


def _catalog_file(tmp_path, text: str):
    path = tmp_path / "catalog.json"
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--max-price", "-1", "--offline"], "--max-price must be a positive number"),
        (["--max-price", "0", "--offline"], "--max-price must be a positive number"),
        (["--max-price", "abc", "--offline"], "--max-price"),
        (["--offline"], "--max-price is required"),
        (["--max-price", "5", "--offline", "--region", "us-esat-1"], "did you mean us-east-1"),
        (["--max-price", "5", "--offline", "--objective", "fastest"], "--objective"),
        (["--max-price", "5", "--catalog", "/nonexistent/catalog.json"], "/nonexistent/catalog.json"),
        (["--max-price", "5", "--offline", "--deadline", "3"], "--deadline and --work go together"),
    ],
)
def test_bad_input_is_one_line_and_nonzero(args, needle, cli):
    result = cli("plan", *args)
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("deepvm: error:"), result.stderr
    assert needle in lines[0]
    assert "Traceback" not in result.stderr


def test_a_bad_input_in_a_process_of_its_own_exits_2_with_one_line():
    """The process boundary itself: `python -m deepvm_cli`'s exit status, and nothing else on stderr."""
    result = run_cli("plan", "--max-price", "abc", "--offline")
    assert result.returncode == 2
    (line,) = result.stderr.splitlines()
    assert line.startswith("deepvm: error:") and "--max-price" in line and result.stdout == ""


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ('{"instances": [', "line 1"),
        (
            '{"instances": [{"name": "c5.xlarge", "type": "C", "ondemand_price": 0.17, "spot_price": 0.1, '
            '"vCPU": 4, "memory": 8, "network_bandwidth": 10}], "available_vcpus": {}}',
            "no GPU instance types",
        ),
    ],
)
def test_malformed_or_gpu_less_catalog_is_one_line(tmp_path, text, needle, cli):
    result = cli("plan", "--max-price", "5", "--catalog", _catalog_file(tmp_path, text))
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], result.stderr


def test_no_credentials_falls_back_to_the_snapshot_with_a_warning(tmp_path, cli):
    env = {k: "" for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")}
    env.update(
        AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "none"),
        AWS_CONFIG_FILE=str(tmp_path / "none"),
        AWS_EC2_METADATA_DISABLED="true",
    )
    result = cli("plan", "--max-price", "5", "--json", env=env)
    assert result.returncode == 0, result.stderr
    assert "no AWS credentials" in result.stderr and "snapshot" in result.stderr
    assert json.loads(result.stdout)["catalog"]["source"] == "snapshot"
    assert os.environ.get("AWS_ACCESS_KEY_ID") == "testing"  # the test's own environment is untouched


def test_mix_is_never_worse_than_one_gpu_type(cli):
    args = ("--catalog", str(DATA / "deepvm_simul_data.json"), "--max-price", "3", "--node-limit", "6")
    single, mixed = plan_json(cli, *args), plan_json(cli, *args, "--mix")
    assert mixed["plans"][0]["objective_value"] >= single["plans"][0]["objective_value"] * (1 - 1e-9)
    trainer_types = {n["instance_type"] for n in mixed["plans"][0]["nodes"] if n["role"] != "holder"}
    assert len(trainer_types) >= 2  # six nodes per type cannot use $3/h of the best type: it mixes
    assert mixed["plans"][0]["price_per_hour"] <= 3 + 1e-9


def test_mix_rejects_ratio_objectives(cli):
    result = cli("plan", "--offline", "--max-price", "5", "--mix", "--objective", "cost")
    assert result.returncode == 2 and "--mix plans for --objective deepvm or throughput" in result.stderr


@pytest.mark.parametrize("columns", ["80", "120"])
def test_human_output_cuts_no_number_and_no_type_name(columns, isolated_env, cli):
    """At 80 columns text wraps, but no number, instance type or AZ is cut (`…`) or split across lines."""
    env = {"COLUMNS": columns, "NO_COLOR": "1"}
    doc = json.loads(cli("plan", "--max-price", "12", "--offline", "--json", env=env).stdout)
    result = cli("plan", "--max-price", "12", "--offline", env=env)
    assert result.returncode == 0, result.stderr
    assert "…" not in result.stdout
    for plan in doc["plans"]:
        assert f"{plan['price_per_hour']:.4f}" in result.stdout
        assert f"{plan['effective_flops']:,.1f}" in result.stdout
        assert f"{plan['objective_value']:,.0f}" in result.stdout
        assert plan["availability_zone"] in result.stdout
        for node in plan["nodes"]:
            assert f"{node['count']} {node['instance_type']}" in result.stdout


def test_stages_show_on_a_terminal_and_never_in_a_script(cli):
    """A person sees what the planner is waiting on (the mix's solves included); a script's stderr stays empty."""
    args = ("plan", "--offline", "--max-price", "3", "--mix", "--json")
    terminal = cli(*args, env={"TTY_COMPATIBLE": "1", "TTY_INTERACTIVE": "1"})
    assert terminal.returncode == 0, terminal.stderr
    assert "mixed clusters: the largest effective throughput" in terminal.stderr
    assert "mixed clusters: the cheapest at that throughput" in terminal.stderr
    assert json.loads(terminal.stdout)["plans"]  # stdout is still exactly one JSON document
    script = cli(*args)
    assert script.returncode == 0 and script.stderr == ""
