"""The cluster tables of deepvm's state database (provisioning/core/db.py): clusters, nodes, events and cost
segments.

Every public method of Store is one committed transaction. The cluster row keeps the plan with the prices
it was made with and their timestamp, and each node's price is copied into a cost segment, so cost
reports never re-read today's prices.
"""

from __future__ import annotations

import json
import sqlite3
from contextlib import AbstractContextManager
from dataclasses import astuple, dataclass, replace
from datetime import datetime, timezone
from enum import Enum
from pathlib import Path

from provisioning.catalog.model import Market
from provisioning.cloud.names import ClusterIdentity
from provisioning.cloud.types import CloudKind, CloudResources, NodeRecord
from provisioning.clusters.cost import ClusterCost, CostSegment, NodeSpan, cluster_cost, cost_fields, iso
from provisioning.core.db import AddedColumn, Database, Schema, exclusive_lock
from provisioning.core.errors import CloudError
from provisioning.planner.plan import Plan, Role

_CLUSTERS = """
CREATE TABLE IF NOT EXISTS clusters (
    name TEXT PRIMARY KEY,
    cloud TEXT NOT NULL,              -- aws | sandbox
    region TEXT NOT NULL,
    availability_zone TEXT NOT NULL,
    status TEXT NOT NULL,             -- provisioning | up | failed | terminating | terminated
    plan_json TEXT NOT NULL,          -- the Plan, with its prices
    prices_as_of TEXT NOT NULL,       -- when those prices were observed
    launch_token TEXT NOT NULL,       -- client tokens derive from it
    resources_json TEXT NOT NULL,     -- CloudResources: key pair, security group, launch template, fleets,
                                      -- the head's instance profile
    ssh_user TEXT NOT NULL,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    cluster_id TEXT NOT NULL DEFAULT '',  -- the id `up` gave it (provisioning.cloud.names); '' before ids
    node_python TEXT NOT NULL DEFAULT ''  -- the Python with the job's stack on the image ('': the cloud's default)
)"""
_NODES = """
CREATE TABLE IF NOT EXISTS nodes (
    instance_id TEXT PRIMARY KEY,
    cluster TEXT NOT NULL REFERENCES clusters(name) ON DELETE CASCADE,
    instance_type TEXT NOT NULL,
    market TEXT NOT NULL,
    role TEXT NOT NULL,
    availability_zone TEXT NOT NULL,
    state TEXT NOT NULL,
    private_ip TEXT,
    public_ip TEXT,
    usd_per_hour REAL NOT NULL,
    ssh_user TEXT NOT NULL,
    ssh_port INTEGER NOT NULL,
    launched_at TEXT NOT NULL
)"""
_EVENTS = """
CREATE TABLE IF NOT EXISTS events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    cluster TEXT NOT NULL,
    at TEXT NOT NULL,
    kind TEXT NOT NULL,
    message TEXT NOT NULL
)"""
_COSTS = """
CREATE TABLE IF NOT EXISTS costs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    cluster TEXT NOT NULL REFERENCES clusters(name) ON DELETE CASCADE,
    instance_id TEXT NOT NULL,
    usd_per_hour REAL NOT NULL,
    prices_as_of TEXT NOT NULL,
    started_at TEXT NOT NULL,
    ended_at TEXT                     -- NULL while the node runs
)"""
_PAST_CLUSTERS = """
CREATE TABLE IF NOT EXISTS past_clusters (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    name TEXT NOT NULL,
    cloud TEXT NOT NULL,
    region TEXT NOT NULL,
    status TEXT NOT NULL,             -- terminated | failed, as it ended
    created_at TEXT NOT NULL,
    launched_at TEXT,                 -- its first node's launch (NULL: none ever ran)
    ended_at TEXT,
    runtime_s REAL NOT NULL,
    cost_usd REAL NOT NULL
)"""
SCHEMA = Schema(
    name="clusters",
    version=4,  # 2: past_clusters; 3: clusters.cluster_id (a cluster recorded before has '': named as then);
    # 4: clusters.node_python
    statements=(
        _CLUSTERS,
        _NODES,
        _EVENTS,
        _COSTS,
        _PAST_CLUSTERS,
        "CREATE INDEX IF NOT EXISTS nodes_by_cluster ON nodes(cluster)",
        "CREATE INDEX IF NOT EXISTS events_by_cluster ON events(cluster)",
        "CREATE INDEX IF NOT EXISTS costs_by_cluster ON costs(cluster)",
    ),
    added_columns=(
        AddedColumn("clusters", "cluster_id", "TEXT NOT NULL DEFAULT ''"),
        AddedColumn("clusters", "node_python", "TEXT NOT NULL DEFAULT ''"),
    ),
)

_GONE = ("shutting-down", "terminated", "stopping", "stopped")
_SPANS = "SELECT c.instance_id, n.instance_type, c.* FROM costs c JOIN nodes n USING (instance_id) WHERE c.cluster = ?"


class ClusterStatus(str, Enum):
    """Where a cluster is in its life (the clusters table's status; `status --json` shows the value)."""

    PROVISIONING = "provisioning"  # `up` is creating it, or died doing so (the next `up` or `down` cleans up)
    UP = "up"
    FAILED = "failed"  # `up` failed and deleted what it had made
    TERMINATING = "terminating"  # `down` is deleting it
    TERMINATED = "terminated"

    def __str__(self) -> str:
        return self.value


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _parse(ts: str) -> datetime:
    return datetime.fromisoformat(ts.replace("Z", "+00:00"))


@dataclass(frozen=True)
class ClusterRow:
    """A cluster as stored: identity, where it runs, its plan and what was created for it."""

    name: str
    cloud: CloudKind
    status: ClusterStatus
    plan: Plan
    launch_token: str
    resources: CloudResources
    ssh_user: str
    created_at: str
    updated_at: str = ""
    cluster_id: str = ""  # the id `up` gave it; "" for a cluster recorded before ids (named as then)
    node_python: str = ""  # the nodes' Python with the job's stack (the image's); "": the cloud's default

    @property
    def identity(self) -> ClusterIdentity:
        """The cluster in the cloud: what its resources are named and tagged with."""
        return ClusterIdentity(self.name, self.cluster_id)

    @property
    def region(self) -> str:
        return self.plan.region

    @property
    def availability_zone(self) -> str:
        return self.plan.availability_zone


@dataclass(frozen=True)
class ClusterBill:
    """A cluster in `deepvm cost-report`: where it ran, how it ended, what it cost."""

    name: str
    cloud: CloudKind
    region: str
    status: ClusterStatus
    created_at: str
    cost: ClusterCost

    def to_dict(self) -> dict[str, object]:
        """The cluster as `cost-report --json` states it (cost fields as in `status` and `down`)."""
        return {
            "name": self.name,
            "cloud": self.cloud.value,
            "region": self.region,
            "status": self.status.value,
            "created_at": self.created_at,
            **cost_fields(self.cost),
            "usd_per_hour": round(self.cost.usd_per_hour, 6),
        }


@dataclass(frozen=True)
class Event:
    at: str
    kind: str
    message: str


class Store:
    """The cluster tables; every public method is one committed transaction. Opening it raises
    StateFileError when the file cannot be used (provisioning/core/db.py)."""

    def __init__(self, path: Path | None = None) -> None:
        self._db = Database(SCHEMA, path)
        self.path = self._db.path

    # clusters

    def put_cluster(self, row: ClusterRow) -> None:
        """Insert the cluster, replacing a finished one of the same name: its nodes and cost segments go
        with it, its cost and runtime stay in past_clusters for `deepvm cost-report`."""
        now = utc_now()
        with self._db.transaction() as db:
            replaced = self.cluster(row.name)
            bill = None if replaced is None else self._bill(replaced)
            if bill is not None:
                cost = bill.cost
                db.execute(
                    "INSERT INTO past_clusters (name, cloud, region, status, created_at, launched_at, ended_at, "
                    "runtime_s, cost_usd) VALUES (?,?,?,?,?,?,?,?,?)",
                    (
                        bill.name,
                        bill.cloud.value,
                        bill.region,
                        bill.status.value,
                        bill.created_at,
                        iso(cost.launched),
                        iso(cost.ended),
                        cost.runtime_s,
                        cost.usd,
                    ),
                )
            db.execute("DELETE FROM clusters WHERE name = ?", (row.name,))
            db.execute(
                "INSERT INTO clusters (name, cloud, region, availability_zone, status, plan_json, prices_as_of, "
                "launch_token, resources_json, ssh_user, created_at, updated_at, cluster_id, node_python) "
                "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (
                    row.name,
                    row.cloud.value,
                    row.region,
                    row.availability_zone,
                    row.status.value,
                    json.dumps(row.plan.to_dict()),
                    row.plan.prices_as_of,
                    row.launch_token,
                    _resources_json(row.resources),
                    row.ssh_user,
                    row.created_at or now,
                    now,
                    row.cluster_id,
                    row.node_python,
                ),
            )
            _event(db, row.name, "created", f"cluster recorded ({row.cloud}, {row.region})")

    def cluster(self, name: str) -> ClusterRow | None:
        found = self._db.read_one("SELECT * FROM clusters WHERE name = ?", (name,))
        return None if found is None else _cluster_row(found)

    def clusters(self) -> list[ClusterRow]:
        return [_cluster_row(r) for r in self._db.read("SELECT * FROM clusters ORDER BY created_at")]

    def set_status(self, name: str, status: ClusterStatus, message: str = "") -> None:
        with self._db.transaction() as db:
            db.execute("UPDATE clusters SET status = ?, updated_at = ? WHERE name = ?", (status.value, utc_now(), name))
            _event(db, name, status.value, message or f"status {status.value}")

    def set_resources(self, name: str, resources: CloudResources) -> None:
        """Record created resources at once, so an interrupted `up` can still be torn down precisely."""
        with self._db.transaction() as db:
            db.execute(
                "UPDATE clusters SET resources_json = ?, updated_at = ? WHERE name = ?",
                (_resources_json(resources), utc_now(), name),
            )

    # nodes and their cost segments

    def put_nodes(self, cluster: str, nodes: list[NodeRecord]) -> None:
        """Insert or refresh nodes. A node's cost segment opens when it is first seen and closes when it
        is seen gone, so the cost so far is the sum of closed and open segments at their own prices."""
        now = utc_now()
        with self._db.transaction() as db:
            as_of = db.execute("SELECT prices_as_of FROM clusters WHERE name = ?", (cluster,)).fetchone()[0]
            for node in nodes:
                known = db.execute("SELECT state FROM nodes WHERE instance_id = ?", (node.instance_id,)).fetchone()
                db.execute(
                    "INSERT INTO nodes VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?) ON CONFLICT(instance_id) DO UPDATE "
                    "SET state = excluded.state, private_ip = excluded.private_ip, "
                    "public_ip = excluded.public_ip",
                    (
                        node.instance_id,
                        cluster,
                        node.instance_type,
                        node.market.value,
                        node.role.value,
                        node.availability_zone,
                        node.state,
                        node.private_ip,
                        node.public_ip,
                        node.usd_per_hour,
                        node.ssh_user,
                        node.ssh_port,
                        node.launched_at or now,
                    ),
                )
                if known is None and node.state not in _GONE:
                    db.execute(
                        "INSERT INTO costs (cluster, instance_id, usd_per_hour, prices_as_of, started_at) "
                        "VALUES (?,?,?,?,?)",
                        (cluster, node.instance_id, node.usd_per_hour, as_of, node.launched_at or now),
                    )
                if node.state in _GONE and (known is None or known[0] not in _GONE):
                    db.execute(
                        "UPDATE costs SET ended_at = ? WHERE instance_id = ? AND ended_at IS NULL",
                        (now, node.instance_id),
                    )
                    _event(db, cluster, "node-gone", f"{node.instance_id} is {node.state}")

    def nodes(self, cluster: str) -> list[NodeRecord]:
        rows = self._db.read("SELECT * FROM nodes WHERE cluster = ? ORDER BY rowid", (cluster,))
        return [_node_record(r) for r in rows]

    def find_node(self, ref: str) -> tuple[str, NodeRecord] | None:
        """The cluster and node for an instance id, or None."""
        row = self._db.read_one("SELECT * FROM nodes WHERE instance_id = ?", (ref,))
        return None if row is None else (row["cluster"], _node_record(row))

    def close_costs(self, cluster: str, at: str | None = None) -> None:
        """End every open cost segment of the cluster at `at` (default now: it was torn down)."""
        with self._db.transaction() as db:
            db.execute(
                "UPDATE costs SET ended_at = ? WHERE cluster = ? AND ended_at IS NULL", (at or utc_now(), cluster)
            )
            db.execute(
                "UPDATE nodes SET state = 'terminated' WHERE cluster = ? AND state != 'terminated'",
                (cluster,),
            )

    def cost(self, cluster: str, now: datetime | None = None) -> ClusterCost:
        """What the cluster has cost so far (provisioning/clusters/cost.py), at its nodes' planned prices."""
        rows = self._db.read("SELECT * FROM costs WHERE cluster = ?", (cluster,))
        return cluster_cost(map(_segment, rows), now or datetime.now(timezone.utc))

    def node_spans(self, cluster: str) -> list[NodeSpan]:  # each cost segment with its node's type (cost.run_cost)
        return [NodeSpan(r[0], r[1], *astuple(_segment(r))) for r in self._db.read(_SPANS, (cluster,))]

    def adopt_record(self, cluster: str, nodes: list[NodeRecord], spans: list[NodeSpan]) -> None:
        """Take the head's record of the cluster's nodes and what they billed as this store's (the head
        bought replacements this store never saw, and ended the cluster before anyone here looked)."""
        with self._db.transaction() as db:
            as_of = db.execute("SELECT prices_as_of FROM clusters WHERE name = ?", (cluster,)).fetchone()[0]
            db.execute("DELETE FROM costs WHERE cluster = ?", (cluster,))
            for span in spans:
                db.execute(
                    "INSERT INTO costs (cluster, instance_id, usd_per_hour, prices_as_of, started_at, ended_at) "
                    "VALUES (?,?,?,?,?,?)",
                    (cluster, span.instance_id, span.usd_per_hour, as_of, iso(span.started), iso(span.ended)),
                )
        self.put_nodes(cluster, [replace(n, state="terminated") for n in nodes])  # every span is closed
        self.close_costs(cluster, max((iso(s.ended) or "" for s in spans), default="") or None)

    def bills(self, now: datetime | None = None) -> list[ClusterBill]:
        """Every cluster ever recorded, oldest first: those in the clusters table with their cost as of
        `now`, and those a later cluster of the same name replaced, as they ended."""
        now = now or datetime.now(timezone.utc)
        segments: dict[str, list[CostSegment]] = {}
        for row in self._db.read("SELECT * FROM costs"):
            segments.setdefault(row["cluster"], []).append(_segment(row))
        current = [
            ClusterBill(r.name, r.cloud, r.region, r.status, r.created_at, cluster_cost(segments.get(r.name, []), now))
            for r in self.clusters()
        ]
        past = [_past_bill(r) for r in self._db.read("SELECT * FROM past_clusters ORDER BY id")]
        return sorted(past + current, key=lambda b: b.created_at)

    def _bill(self, row: ClusterRow, now: datetime | None = None) -> ClusterBill:
        return ClusterBill(row.name, row.cloud, row.region, row.status, row.created_at, self.cost(row.name, now))

    # events

    def add_event(self, cluster: str, kind: str, message: str) -> None:
        with self._db.transaction() as db:
            _event(db, cluster, kind, message)

    def events(self, cluster: str) -> list[Event]:
        rows = self._db.read("SELECT at, kind, message FROM events WHERE cluster = ? ORDER BY id", (cluster,))
        return [Event(r["at"], r["kind"], r["message"]) for r in rows]


def cluster_lock(name: str) -> AbstractContextManager[None]:
    """Hold the cluster for one command that changes it (`up`, `down`); a second one fails at once."""
    busy = CloudError(f"another deepvm command is working on cluster {name}; wait for it to finish")
    return exclusive_lock(f"cluster-{name}", busy)  # its own name space: a cluster may be called train-x


def _event(db: sqlite3.Connection, cluster: str, kind: str, message: str) -> None:
    db.execute(
        "INSERT INTO events (cluster, at, kind, message) VALUES (?,?,?,?)",
        (cluster, utc_now(), kind, message),
    )


def _resources_json(resources: CloudResources) -> str:
    return json.dumps(resources.to_dict())


def _cluster_row(row: sqlite3.Row) -> ClusterRow:
    from provisioning.planner.plan_document import plan_from_dict  # pydantic loads only to read plans back

    res = json.loads(row["resources_json"])
    return ClusterRow(
        name=row["name"],
        cloud=CloudKind(row["cloud"]),
        status=ClusterStatus(row["status"]),
        plan=plan_from_dict(json.loads(row["plan_json"])),
        launch_token=row["launch_token"],
        resources=CloudResources.from_dict(res),  # a row of an older version lacks the newer fields
        ssh_user=row["ssh_user"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        cluster_id=row["cluster_id"],
        node_python=row["node_python"],
    )


def _segment(row: sqlite3.Row) -> CostSegment:
    ended = row["ended_at"]
    return CostSegment(row["usd_per_hour"], _parse(row["started_at"]), _parse(ended) if ended else None)


def _past_bill(row: sqlite3.Row) -> ClusterBill:
    launched, ended = row["launched_at"], row["ended_at"]
    cost = ClusterCost(
        usd=row["cost_usd"],
        usd_per_hour=0.0,
        launched=_parse(launched) if launched else None,
        ended=_parse(ended) if ended else None,
        runtime_s=row["runtime_s"],
    )
    return ClusterBill(
        row["name"], CloudKind(row["cloud"]), row["region"], ClusterStatus(row["status"]), row["created_at"], cost
    )


def _node_record(row: sqlite3.Row) -> NodeRecord:
    return NodeRecord(
        instance_id=row["instance_id"],
        instance_type=row["instance_type"],
        market=Market(row["market"]),
        role=Role(row["role"]),
        availability_zone=row["availability_zone"],
        state=row["state"],
        private_ip=row["private_ip"],
        public_ip=row["public_ip"],
        usd_per_hour=row["usd_per_hour"],
        launched_at=row["launched_at"],
        ssh_user=row["ssh_user"],
        ssh_port=row["ssh_port"],
    )
