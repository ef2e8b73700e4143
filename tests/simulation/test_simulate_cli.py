"""`deepvm simulate` as a user runs it (in this process): the tables at 80 columns, --json, --plot, a plan file,
bad input."""

from __future__ import annotations

import json
import re
import struct
import subprocess
import sys

import pytest

from deepvm_cli.main import main
from provisioning.planner import PlanRequest
from provisioning.planner.saved import save_plans
from provisioning.scaling.profile import JobIdentity, Measured, ProfileSetup, make_profile, save_profile
from tests.conftest import DATA, REPO, Cli, CliResult
from tests.simulation.sim_cases import paper_result

PAPER = ("--catalog", str(DATA / "deepvm_data.json"), "--max-price", "3")


def simulate(cli: Cli, *args: str, env: dict[str, str] | None = None) -> CliResult:
    return cli("simulate", *args, env=env)


def test_json_on_a_shipped_capacity_trace_with_a_deadline(cli):
    """The on-demand cluster keeps 15 h (14.74 h): deepvm keeps it too, for less (issue 24's bar)."""
    result = simulate(
        cli,
        *PAPER,
        "--work",
        "100000",
        "--runs",
        "60",
        "--seed",
        "7",
        "--deadline",
        "15",
        "--trace",
        "aws-v100-16-us-east-2b",
        "--json",
    )
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert (doc["runs"], doc["seed"], doc["trace"], doc["work"]) == (60, 7, "aws-v100-16-us-east-2b", 100000.0)
    by_name = {p["policy"]: p for p in doc["policies"]}
    assert list(by_name) == [
        "deepvm",
        "plan-only",
        "shrink-only",
        "cost-first",
        "performance-first",
        "on-demand",
        "spot-restart",
        "deadline-fallback",
    ]
    assert by_name["deepvm"]["p_miss_deadline"] <= 0.05 and by_name["on-demand"]["p_miss_deadline"] == 0
    assert by_name["deepvm"]["cost_usd"]["mean"] < by_name["on-demand"]["cost_usd"]["mean"]
    plan_only = by_name["plan-only"]
    assert plan_only["plan"]["nodes"][0] == {
        "instance_type": "g4dn.xlarge",
        "market": "spot",
        "count": 17,
        "role": "trainer",
        "usd_per_hour": 0.1578,
        "gpus": 1,
        "tflops": 377.0,
    }  # as the catalog file states them
    full_speed_h = 100000 / (plan_only["plan"]["effective_flops"] * 3.6)
    assert plan_only["makespan_h"]["p50"] >= full_speed_h and plan_only["interruptions_per_run"] > 1
    assert by_name["on-demand"]["interruptions_per_run"] == 0
    assert by_name["deadline-fallback"]["p_miss_deadline"] < plan_only["p_miss_deadline"]


def test_a_deadline_on_demand_cannot_keep_is_refused_with_the_earliest(capsys):
    """$3/h of on-demand trains 100,000 PFLOP in 14.74 h (plus the reserve): 12 h is no promise deepvm can
    make. The earliest deadline it names is kept, and one 0.01 h sooner is not: it is rounded up, never down
    (14.7914 h was shown as 14.79 h, a deadline the same check refuses)."""

    def refusal(deadline: str) -> str:
        assert main(["simulate", *PAPER, "--work", "100000", "--deadline", deadline]) == 2
        return capsys.readouterr().err

    err = refusal("12")
    assert len(err.splitlines()) == 1 and "--deadline 12 h cannot be kept for sure" in err, err
    assert "5 g4dn.xlarge on-demand" in err and "does 6,786 PFLOP/h" in err, err
    earliest = re.search(r"earliest deadline it keeps is (\d+\.\d\d) h;", err)
    assert earliest is not None, err
    hours = float(earliest.group(1))
    assert 100000 / 6786 < hours < 100000 / 6786 + 0.1  # the fill's hours and a reserve of minutes
    assert f"earliest deadline it keeps is {hours:.2f} h" in refusal(f"{hours - 0.01:.2f}")
    assert main(["simulate", *PAPER, "--work", "100000", "--deadline", f"{hours:.2f}", "--runs", "2", "--json"]) == 0
    capsys.readouterr()
    assert (
        main(
            [
                "simulate",
                *PAPER,
                "--work",
                "100000",
                "--deadline",
                "12",
                "--fallback-max-price",
                "4",
                "--runs",
                "2",
                "--json",
            ]
        )
        == 0
    )


def test_tables_fit_80_columns_and_default_traces_are_the_bands(cli):
    result = simulate(cli, *PAPER, "--steps", "20000", "--step-time", "0.9", "--runs", "50", env={"COLUMNS": "80"})
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80
    for title in ("Makespan (hours)", "Cost (USD)", "What each policy runs"):
        assert title in result.stdout
    assert "band:" in lines[0] + lines[1]  # without --trace each type follows its interruption band
    assert "deadline-fallback" not in result.stdout  # only with --deadline
    assert "17 g4dn.xlarge spot" in result.stdout


def test_plan_file_and_plot(tmp_path, cli):
    """A plan file as `deepvm plan` saves it (its request carries the price cap the baselines share)."""
    plan_file = save_plans(paper_result().plans, PlanRequest(max_price=3.0), tmp_path / "plan.json")
    png = tmp_path / "cdf.png"
    result = simulate(
        cli,
        "--plan",
        str(plan_file),
        "--work",
        "50000",
        "--runs",
        "20",
        "--interruption-rate",
        "0.01",
        "--json",
        "--plot",
        str(png),
    )
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert "0.01" in doc["trace"]
    assert doc["policies"][0]["plan"]["price_per_hour"] == pytest.approx(2.8526)
    assert {p["policy"] for p in doc["policies"]} >= {"cost-first", "performance-first", "on-demand"}
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    assert 800 <= width <= 2000 and 300 <= height <= 1200
    assert 20_000 < len(data) < 2_000_000  # two panels of six curves, not an empty canvas


def test_a_profile_changes_the_plans_and_the_simulated_throughput(tmp_path, cli):
    """A job that scales poorly on g4dn.xlarge: the plan and its makespan follow the profile's curve."""
    setup = ProfileSetup(
        "g4dn.xlarge",
        JobIdentity(name="poor", spec_sha256="ab" * 32, file="job.yaml"),
        "lab",
        10,
        60,
        1,
        "2026-11-24T10:00:00+00:00",
    )
    measured = [Measured(n, (s,)) for n, s in ((1, 100.0), (2, 140.0), (4, 165.0), (8, 175.0), (16, 178.0))]
    save_profile(make_profile(setup, measured), tmp_path / "poor.json")
    result = simulate(
        cli,
        *PAPER,
        "--profile",
        str(tmp_path / "poor.json"),
        "--work",
        "20000",
        "--runs",
        "5",
        "--interruption-rate",
        "0",
        "--json",
    )
    assert result.returncode == 0, result.stderr
    deepvm = json.loads(result.stdout)["policies"][0]
    assert deepvm["plan"]["effective_flops"] != pytest.approx(paper_result().plans[0].effective_flops)
    assert deepvm["makespan_h"]["mean"] == pytest.approx(20000 / (deepvm["plan"]["effective_flops"] * 3.6))


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--trace", "no-such-trace"), "unknown trace 'no-such-trace'"),
        (("--interruption-rate", "30-40%"), "30-40%"),
        (("--work", "-5"), "--work must be a positive number, got -5"),
        (("--work", "nan"), "--work must be a finite number, got nan"),
        (("--runs", "0"), "--runs must be a positive number, got 0"),
        (("--deadline", "inf"), "--deadline must be a finite number, got inf"),
        (("--notice-share", "1.5"), "--notice-share must be at most 1, got 1.5"),
        (("--plot", "/no/such/dir/cdf.png"), "--plot: no folder /no/such/dir to write cdf.png in"),
        (
            ("--trace", "us-east-1a=aws-v100-16-us-east-2b"),
            "us-east-1a is not a zone of the plan's region deepvm (its zones: deepvm-a)",
        ),
        (
            ("--trace", "aws-v100-16-us-east-2b", "--trace", "deepvm-a=aws-v100-4-us-east-1f"),
            "two traces for deepvm-a (the plan's own zone): aws-v100-16-us-east-2b and aws-v100-4-us-east-1f",
        ),
        (
            ("--trace", "deepvm-a=aws-v100-16-us-east-2b", "--trace", "deepvm-a=gce"),
            "two traces for deepvm-a: aws-v100-16-us-east-2b and gce; give one per zone",
        ),
        (("--trace", "deepvm-a="), "--trace deepvm-a=: name a trace or a file after 'deepvm-a='"),
        (("--fallback-max-price", "5"), "--fallback-max-price is what the deadline's on-demand stand-ins bill"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args, message, capsys):
    work = () if "--work" in args else ("--work", "1000")
    code = main(["simulate", *PAPER, *work, *args])  # in this process: a refusal costs no Python start
    err = capsys.readouterr().err
    assert code == 2 and len(err.splitlines()) == 1 and err.startswith("deepvm: error: "), err
    assert message in err and "Traceback" not in err


def test_malformed_trace_file_and_missing_work(tmp_path, capsys):
    bad = tmp_path / "trace.csv"
    bad.write_text("time_ms,add,node1\nsoon,remove,node1\n")
    assert main(["simulate", *PAPER, "--work", "1000", "--trace", str(bad)]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and str(bad) in err
    assert main(["simulate", *PAPER]) == 2
    assert "--work PFLOP, or --steps N with --step-time S" in capsys.readouterr().err


def test_registering_simulate_keeps_plan_free_of_numpy():
    code = (
        "import sys; from deepvm_cli.main import _register_commands; _register_commands(); "
        "print(sorted(m for m in ('numpy', 'matplotlib', 'scipy') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_a_plan_file_refuses_planning_flags_and_a_plot_is_png_whatever_its_name(tmp_path, capsys):
    plan_file = save_plans(paper_result().plans, PlanRequest(max_price=3.0), tmp_path / "plan.json")
    assert main(["simulate", "--plan", str(plan_file), "--region", "us-east-1", "--work", "1000"]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "--region" in err and "--plan FILE" in err, err
    plot = tmp_path / "cdf.txt"
    assert (
        main(
            [
                "simulate",
                "--plan",
                str(plan_file),
                "--work",
                "1000",
                "--runs",
                "5",
                "--interruption-rate",
                "0",
                "--json",
                "--plot",
                str(plot),
            ]
        )
        == 0
    )
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
