"""`deepvm up` never spends without a yes: it asks on a terminal (a real pty), refuses without one unless
given --yes, and --dry-run creates nothing; each asserted against the moto server."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys

import pytest

from provisioning.core.errors import InputError
from provisioning.sandbox.capacity import HostCapacity, check_fits, measure
from tests.cloud.cloud_state import created_resources
from tests.cloud.plans import make_plan, write_plans
from tests.conftest import REPO, run_cli

PRICE = "$0.9994/h"  # 1 on-demand + 3 spot g4dn.xlarge at the snapshot's us-east-1a prices


def _args(plan_file, ami, *extra):
    return ("up", "--cloud", "aws", "--plan", str(plan_file), "--ami", ami, "--no-wait", "--name", "c1", *extra)


def _on_a_terminal(args, answer: str) -> subprocess.CompletedProcess[str]:
    """Run `deepvm ARGS` with a pty as stdin, typing `answer`; stdout and stderr are captured."""
    master, slave = pty.openpty()
    try:
        os.write(master, answer.encode())
        return subprocess.run(
            [sys.executable, "-m", "deepvm_cli", *args],
            cwd=REPO,
            stdin=slave,
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        os.close(slave)
        os.close(master)


def test_on_a_terminal_it_shows_the_cluster_and_no_creates_nothing(ctx, ami, tmp_path):
    plan = write_plans(tmp_path / "plan.json", make_plan(spot=3, on_demand=1))
    result = _on_a_terminal(_args(plan, ami), "n\n")
    assert result.returncode == 1, result.stderr
    assert "deepvm up launches on aws, in us-east-1 (us-east-1a), a single-anchor cluster" in result.stderr
    assert f"4 nodes, {PRICE} in all" in result.stderr
    assert f"Launch 4 nodes for {PRICE}? [y/N]" in result.stderr
    assert result.stderr.rstrip().endswith("nothing launched") and "error" not in result.stderr
    assert result.stdout == ""
    assert created_resources(ctx) == {}


def test_on_a_terminal_yes_launches(ctx, ami, tmp_path, cli):
    plan = write_plans(tmp_path / "plan.json", make_plan(spot=1, on_demand=1))
    result = _on_a_terminal(_args(plan, ami, "--json"), "y\n")
    assert result.returncode == 0, result.stderr
    assert len(json.loads(result.stdout)["nodes"]) == 2
    assert len(created_resources(ctx)["instances"]) == 2
    assert cli("down", "c1", "--yes").returncode == 0


@pytest.mark.parametrize("extra", [(), ("--json",)])
def test_without_a_terminal_and_without_yes_it_refuses_in_one_line(ctx, ami, tmp_path, extra):
    """A process of its own, stdin not a terminal (/dev/null), as a script or CI runs it."""
    plan = write_plans(tmp_path / "plan.json", make_plan(spot=3, on_demand=1))
    result = run_cli(*_args(plan, ami, *extra))
    assert result.returncode == InputError.exit_code
    errors = [line for line in result.stderr.splitlines() if line.startswith("deepvm: error:")]
    assert errors == [
        f"deepvm: error: up would launch 4 nodes for {PRICE}; pass --yes to confirm (no terminal to ask on)"
    ]
    assert result.stdout == ""
    assert created_resources(ctx) == {}


def test_dry_run_lists_what_it_would_create_and_creates_nothing(ctx, ami, tmp_path, cli):
    plan = write_plans(tmp_path / "plan.json", make_plan(spot=3, on_demand=1))
    result = cli(*_args(plan, ami, "--dry-run"))
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "would create key pair deepvm-c1-<id>",  # the id is made by `up` itself
        "would create security group deepvm-c1-<id>",
        "would create launch template deepvm-c1-<id>",
        "would create EC2 Fleet (instant) of g4dn.xlarge: 3 spot + 1 on-demand in us-east-1a",
    ]
    assert "dry run: nothing was created" in result.stderr
    as_json = json.loads(cli(*_args(plan, ami, "--dry-run", "--json")).stdout)
    assert as_json["dry_run"] is True and as_json["plans"][0]["price_per_hour"] == pytest.approx(0.9994)
    assert created_resources(ctx) == {}


def test_sandbox_capacity_refuses_what_cannot_boot_and_warns_about_what_trains_slowly():
    small = HostCapacity(cpus=2, available_mib=4096)  # bootable 64, trainable 4
    assert check_fits(4, small) is None
    warning = check_fits(16, small)
    assert warning is not None and "trains on about 4 sandbox nodes; the plan's 16 will boot" in warning
    with pytest.raises(InputError, match=r"cannot host 65 nodes on this machine \(2 CPUs and 4.0 GiB"):
        check_fits(65, small)


def test_capacity_is_measured_from_meminfo(tmp_path):
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       24000000 kB\nMemAvailable:    2097152 kB\n")
    capacity = measure(meminfo)
    assert capacity.available_mib == 2048 and capacity.cpus == len(os.sched_getaffinity(0))
