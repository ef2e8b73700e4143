"""The state store: round trips, cost segments at the planned prices, WAL readers beside a writer."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from dataclasses import replace
from datetime import datetime, timedelta, timezone

from provisioning.catalog.model import Market
from provisioning.cloud.types import CloudKind, CloudResources, ControllerAccess, NodeRecord
from provisioning.clusters.store import ClusterRow, ClusterStatus, Store
from provisioning.planner.plan import Role
from tests.cloud.plans import make_plan


def _row(name: str = "c1") -> ClusterRow:
    return ClusterRow(
        name, CloudKind.SANDBOX, ClusterStatus.PROVISIONING, make_plan(), "tok", CloudResources(), "root", ""
    )


def _node(instance_id: str, state: str = "running", launched: str = "2026-11-21T10:00:00+00:00") -> NodeRecord:
    return NodeRecord(
        instance_id,
        "g4dn.xlarge",
        Market.SPOT,
        Role.TRAINER,
        "us-east-1a",
        state,
        "127.1.1.4",
        None,
        0.5,
        launched,
        "root",
        22,
    )


def test_cluster_round_trip_keeps_plan_prices_and_resources():
    store = Store()
    store.put_cluster(_row())
    store.set_resources("c1", CloudResources("k", "sg-1", "lt-1", ("fleet-1",)))
    row = store.cluster("c1")
    assert row.plan.nodes == make_plan().nodes
    assert row.plan.prices_as_of == "2026-11-01T00:00:00Z"
    assert row.resources.fleet_ids == ("fleet-1",)
    assert [e.kind for e in store.events("c1")] == ["created"]


def test_the_head_s_instance_profile_is_kept_and_older_rows_read_without_one():
    store = Store()
    store.put_cluster(_row())
    controller = ControllerAccess(profile="deepvm-c1-controller", role="deepvm-c1-controller", owned=True)
    store.set_resources("c1", CloudResources("k").with_controller(controller))
    assert store.cluster("c1").resources.controller == controller
    older = json.dumps(
        {"key_name": "k", "security_group_id": "sg-1", "launch_template_id": "lt-1", "fleet_ids": ["fleet-1"]}
    )
    with sqlite3.connect(store.path) as db:  # a row as an older deepvm wrote it
        db.execute("UPDATE clusters SET resources_json = ? WHERE name = 'c1'", (older,))
    assert store.cluster("c1").resources == CloudResources("k", "sg-1", "lt-1", ("fleet-1",))


def test_cost_is_the_sum_of_segments_at_planned_prices():
    store = Store()
    store.put_cluster(_row())
    store.put_nodes("c1", [_node("i-1"), _node("i-2")])
    now = datetime(2026, 11, 21, 12, 0, tzinfo=timezone.utc)
    assert abs(store.cost("c1", now).usd - 2 * 2 * 0.5) < 1e-9
    store.put_nodes("c1", [_node("i-2", state="terminated")])  # closes i-2's segment (at wall-clock now)
    later = datetime.now(timezone.utc) + timedelta(hours=1)
    assert store.cost("c1", later).usd < store.cost("c1", later + timedelta(hours=1)).usd
    assert [e.kind for e in store.events("c1")][-1] == "node-gone"
    assert store.find_node("i-2")[1].state == "terminated"


def test_wal_lets_a_second_process_read_while_a_write_is_open(tmp_path):
    store = Store()
    store.put_cluster(_row())
    writer = sqlite3.connect(store.path, isolation_level=None)
    writer.execute("BEGIN IMMEDIATE")
    writer.execute("UPDATE clusters SET status = 'up'")
    reader = subprocess.run(
        [sys.executable, "-c", "from provisioning.clusters.store import Store; print(Store().cluster('c1').status)"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    writer.execute("COMMIT")
    assert reader.returncode == 0, reader.stderr
    assert reader.stdout.strip() == "provisioning"  # the committed state, not the open write
    assert Store().cluster("c1").status == "up"


def test_replacing_a_finished_cluster_drops_its_nodes():
    store = Store()
    store.put_cluster(_row())
    store.put_nodes("c1", [_node("i-1")])
    store.put_cluster(_row())
    assert store.nodes("c1") == []


def test_a_cluster_called_train_x_is_not_held_by_training_on_x(isolated_env):
    """The cluster locks and the training locks are separate name spaces."""
    from provisioning.clusters.store import cluster_lock
    from training.shared.jobstore import controller_running, train_lock

    with train_lock("x"), cluster_lock("train-x"):
        assert controller_running("x")
    with cluster_lock("train-x"):
        assert not controller_running("x")


def test_an_older_file_gets_node_python_and_keeps_its_clusters(tmp_path):
    path = tmp_path / "state.db"
    with sqlite3.connect(path) as db:  # clusters tables version 2: no node_python
        db.execute("CREATE TABLE schema_versions (name TEXT PRIMARY KEY, version INTEGER NOT NULL)")
        db.execute("INSERT INTO schema_versions VALUES ('clusters', 2)")
        db.execute(_CLUSTERS_V2)
        db.execute(
            "INSERT INTO clusters VALUES ('old','aws','us-east-1','us-east-1a','up',?,'t','tok',?,'ubuntu','t','t')",
            (
                json.dumps(make_plan().to_dict()),
                json.dumps({"key_name": "k", "security_group_id": "", "launch_template_id": "", "fleet_ids": []}),
            ),
        )
    store = Store(path)
    assert store.cluster("old").node_python == "" and store.cluster("old").resources.key_name == "k"
    store.put_cluster(replace(_row("new"), node_python="/opt/pytorch/bin/python"))
    assert store.cluster("new").node_python == "/opt/pytorch/bin/python"


_CLUSTERS_V2 = """CREATE TABLE clusters (name TEXT PRIMARY KEY, cloud TEXT NOT NULL, region TEXT NOT NULL,
    availability_zone TEXT NOT NULL, status TEXT NOT NULL, plan_json TEXT NOT NULL, prices_as_of TEXT NOT NULL,
    launch_token TEXT NOT NULL, resources_json TEXT NOT NULL, ssh_user TEXT NOT NULL, created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL)"""
