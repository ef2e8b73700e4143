"""A state.db that is not a usable database (truncated, garbage bytes, a directory in its place): every
command that needs it says in one line which file and what to do, `up` creates nothing, and `down NAME`
still deletes the cluster, found by its tags on the moto server. Also the file's schema versions: an
older file is brought up to date, a newer one is refused."""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path

import pytest

from provisioning.cloud.types import CloudKind, CloudResources
from provisioning.clusters.store import ClusterRow, ClusterStatus, Store
from provisioning.core.db import StateFileError
from tests.cloud.cloud_state import created_resources, left_of
from tests.cloud.plans import REGION, make_plan, write_plans
from training.shared.jobstore import JobStore


def _truncate(path: Path) -> None:
    Store(path).put_cluster(_any_row())  # a real database with a cluster in it...
    _cut(path, 2)  # ...cut in half, as a full disk or a lost write leaves it


def _cut(path: Path, parts: int) -> None:
    """Keep the first 1/parts of the database, with everything committed in the main file."""
    with sqlite3.connect(path) as db:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // parts])


def _garbage(path: Path) -> None:
    path.write_bytes(os.urandom(4096))


def _directory(path: Path) -> None:
    path.mkdir()


def _any_row() -> ClusterRow:
    return ClusterRow("other", CloudKind.AWS, ClusterStatus.UP, make_plan(), "tok", CloudResources(), "root", "")


BREAKS = {"truncated": _truncate, "garbage": _garbage, "directory": _directory}


def _one_clean_line(result, state: Path, shown_before: bool = False) -> str:
    """The error line; with shown_before, after what the command shows before it acts (`up`'s plan)."""
    assert result.returncode >= 2, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr
    assert len(lines) == 1 or shown_before, lines
    assert [line for line in lines if line.startswith("deepvm: error:")] == lines[-1:]
    assert str(state) in lines[-1]
    return lines[-1]


@pytest.mark.parametrize("broken", BREAKS)
def test_status_names_the_file_and_says_to_move_it_aside(broken, isolated_env, cli):
    isolated_env.mkdir(parents=True, exist_ok=True)
    state = isolated_env / "state.db"
    BREAKS[broken](state)
    line = _one_clean_line(cli("status"), state)
    assert "move it aside" in line and "deepvm down NAME" in line
    with pytest.raises(StateFileError):
        JobStore()  # the jobs table shares the file, and its refusal


def test_up_creates_nothing_jobs_refuses_plan_is_unaffected_and_down_finds_nothing(
    isolated_env, ctx, ami, tmp_path, cli
):
    isolated_env.mkdir(parents=True, exist_ok=True)
    state = isolated_env / "state.db"
    _garbage(state)
    plan = write_plans(tmp_path / "plan.json", make_plan(spot=1, on_demand=1))

    up = cli("up", "--yes", "--cloud", "aws", "--plan", str(plan), "--ami", ami, "--no-wait", "--name", "c1")
    assert "move it aside" in _one_clean_line(up, state, shown_before=True)
    assert created_resources(ctx) == {}
    assert ctx.client("iam").list_roles()["Roles"] == []

    assert "move it aside" in _one_clean_line(cli("jobs"), state)

    # the planner reads no state: a broken file does not stand in its way
    planned = cli("plan", "--offline", "--max-price", "2", "--region", REGION, "--json")
    assert planned.returncode == 0, planned.stderr
    assert json.loads(planned.stdout)["plans"]

    nothing = cli("down", "c1", "--yes", "--cloud", "aws", "--region", REGION)
    assert nothing.returncode == 5  # nothing tagged c1 either
    assert "no cluster named 'c1'" in _one_clean_line(nothing, state)


def test_down_with_a_broken_state_deletes_the_cluster_found_by_its_tags(isolated_env, ctx, ami, tmp_path, cli):
    plan = write_plans(tmp_path / "plan.json", make_plan(spot=2, on_demand=1))
    up = cli("up", "--yes", "--cloud", "aws", "--plan", str(plan), "--ami", ami, "--no-wait", "--name", "c1")
    assert up.returncode == 0, up.stderr
    assert created_resources(ctx)["instances"]
    state = isolated_env / "state.db"
    _cut(state, 3)

    result = cli("down", "c1", "--yes", "--cloud", "aws", "--region", REGION, "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["had_record"] is False
    assert f"{state} is damaged" in result.stderr and "found by its tags" in result.stderr
    assert "internal error" not in result.stderr
    live = ctx.client("ec2").describe_instances(
        Filters=[{"Name": "instance-state-name", "Values": ["pending", "running"]}]
    )["Reservations"]
    assert live == []
    assert left_of(ctx, "c1") == [] and ctx.client("iam").list_roles()["Roles"] == []


# the jobs table as its first version had it (deepvm before schema versions and managed jobs)
_FIRST_JOB_COLUMNS = (
    "job_id TEXT PRIMARY KEY, cluster TEXT NOT NULL, name TEXT NOT NULL, spec_path TEXT NOT NULL, "
    "status TEXT NOT NULL, started_at TEXT NOT NULL, updated_at TEXT NOT NULL, step INTEGER NOT NULL, "
    "total_steps INTEGER NOT NULL, world_size INTEGER NOT NULL, loss REAL, restarts INTEGER NOT NULL, "
    "lost_steps INTEGER NOT NULL, checkpoint_step INTEGER NOT NULL, cost_base_usd REAL NOT NULL, "
    "cost_usd REAL NOT NULL, out_dir TEXT NOT NULL, python TEXT NOT NULL, message TEXT NOT NULL"
)
_FIRST_JOB = "'j1','c1','resnet','/j.yaml','completed','t','t',10,10,2,0.5,0,0,9,0,0.1,'/out','python3','done'"


def test_an_older_file_is_brought_up_to_date_and_keeps_its_rows(tmp_path):
    path = tmp_path / "state.db"
    with sqlite3.connect(path) as db:  # as deepvm wrote it before schema versions and managed jobs
        db.execute("PRAGMA user_version=1")
        db.execute(f"CREATE TABLE jobs ({_FIRST_JOB_COLUMNS})")
        db.execute(f"INSERT INTO jobs VALUES ({_FIRST_JOB})")
    (job,) = JobStore(path).all()
    assert job.job_id == "j1" and job.controller == "local" and job.ladder == ""
    assert (job.lost_s, job.kept_file, job.kept_at) == (0.0, "", 0.0)  # a launched script's columns (version 4)
    assert (job.outputs_url, job.down_when_done) == ("", False)  # the money guard's columns, with their defaults
    Store(path).put_cluster(_any_row())  # the cluster tables are added beside
    with sqlite3.connect(path) as db:
        versions = dict(db.execute("SELECT name, version FROM schema_versions"))
    assert versions == {"jobs": 4, "clusters": 4}


def test_a_file_of_jobs_version_2_gains_the_ladder_column_and_keeps_the_money_guards(tmp_path):
    """Version 2 of the jobs table (issue 25's outputs_url and down_when_done) to 4 (the live ladder's column, then
    a launched script's lost time and kept file)."""
    path = tmp_path / "state.db"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE schema_versions (name TEXT PRIMARY KEY, version INTEGER NOT NULL)")
        db.execute("INSERT INTO schema_versions VALUES ('jobs', 2)")
        db.execute(
            f"CREATE TABLE jobs ({_FIRST_JOB_COLUMNS}, controller TEXT NOT NULL DEFAULT 'local', "
            "outputs_url TEXT NOT NULL DEFAULT '', down_when_done INTEGER NOT NULL DEFAULT 0)"
        )
        db.execute(f"INSERT INTO jobs VALUES ({_FIRST_JOB}, 'i-head', 's3://b/j1', 1)")
    (job,) = JobStore(path).all()
    assert (job.controller, job.outputs_url, job.down_when_done, job.ladder) == ("i-head", "s3://b/j1", True, "")
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT version FROM schema_versions WHERE name = 'jobs'").fetchone() == (4,)


def test_a_file_from_a_newer_deepvm_is_refused(tmp_path):
    path = tmp_path / "state.db"
    Store(path)
    with sqlite3.connect(path) as db:
        db.execute("UPDATE schema_versions SET version = 7 WHERE name = 'clusters'")
    newer = r"written by a newer deepvm \(clusters tables version 7, this one knows 4\)"
    with pytest.raises(StateFileError, match=newer):
        Store(path)
