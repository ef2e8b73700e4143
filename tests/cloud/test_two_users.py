"""Two users of one AWS account (two DEEPVM_HOMEs, one moto server) who both call their cluster `deepvm`:
each cluster's key pair, security group, launch template, IAM roles and sweep tag are its own, `down`
deletes only its own, and a cluster recorded before ids existed is still torn down (and only it)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from provisioning.cloud.aws.teardown import leftovers
from provisioning.cloud.names import ClusterIdentity, resource_name, role_name
from provisioning.clusters import lifecycle
from provisioning.clusters.lifecycle import UpRequest
from provisioning.clusters.store import Store
from provisioning.clusters.target import AwsTarget
from provisioning.core.errors import InputError, NotFoundError
from tests.cloud.cloud_state import left_of
from tests.cloud.plans import REGION, make_tiering_plan

NAME = "deepvm"  # the default name: what two users of one account are most likely to share
KINDS = {"instance", "key pair", "security group", "launch template", "IAM role", "IAM instance profile"}


@pytest.fixture
def aws(ctx, monkeypatch):
    monkeypatch.setattr(AwsTarget, "context", lambda self, region, start=True: ctx)
    return ctx


def _as(user: Path, monkeypatch) -> None:
    """The commands that follow run as the user whose deepvm home is `user`."""
    monkeypatch.setenv("DEEPVM_HOME", str(user))


def _up(ami: str) -> ClusterIdentity:
    request = UpRequest(
        name=NAME,
        plans=(make_tiering_plan(spot=1, holders=2),),
        ssh_cidr="198.51.100.7/32",
        image_id=ami,
        wait_ssh=False,
    )
    lifecycle.up(AwsTarget(), request)
    row = Store().cluster(NAME)
    assert row is not None
    return row.identity


def _running(ctx, cluster: ClusterIdentity) -> set[str]:
    reservations = ctx.client("ec2").describe_instances(
        Filters=[
            {"Name": "tag:deepvm:cluster-id", "Values": [cluster.cluster_id]},
            {"Name": "instance-state-name", "Values": ["pending", "running"]},
        ]
    )["Reservations"]
    return {i["InstanceId"] for r in reservations for i in r["Instances"]}


def _roles(ctx) -> set[str]:
    return {r["RoleName"] for r in ctx.client("iam").list_roles()["Roles"]}


def test_two_users_with_one_cluster_name_each_keep_their_own(aws, ami, tmp_path, monkeypatch):
    ctx = aws
    alice, bob = tmp_path / "alice", tmp_path / "bob"
    _as(alice, monkeypatch)
    a = _up(ami)
    _as(bob, monkeypatch)
    b = _up(ami)
    assert a.name == b.name == NAME and a.cluster_id != b.cluster_id
    ec2 = ctx.client("ec2")
    for cluster in (a, b):  # nothing of one was replaced or taken over by the other's `up`
        assert len(_running(ctx, cluster)) == 3
        assert ec2.describe_key_pairs(KeyNames=[resource_name(cluster)])["KeyPairs"]
        assert ec2.describe_security_groups(GroupNames=[resource_name(cluster)])["SecurityGroups"]
        assert ec2.describe_launch_templates(LaunchTemplateNames=[resource_name(cluster)])["LaunchTemplates"]
    assert {role_name(c, REGION, kind) for c in (a, b) for kind in ("controller", "holders")} <= _roles(ctx)

    _as(alice, monkeypatch)
    lifecycle.down(NAME)
    assert _running(ctx, a) == set() and leftovers(ctx, a) == []
    assert len(_running(ctx, b)) == 3  # bob's cluster is untouched, rights included
    assert {role_name(b, REGION, kind) for kind in ("controller", "holders")} <= _roles(ctx)
    assert {item.kind for item in leftovers(ctx, b)} >= KINDS

    _as(bob, monkeypatch)
    lifecycle.down(NAME)
    assert left_of(ctx, NAME) == [] and _roles(ctx) == set()


def test_down_without_a_record_asks_which_cluster_of_that_name(aws, ami, tmp_path, monkeypatch):
    ctx = aws
    _as(tmp_path / "alice", monkeypatch)
    a = _up(ami)
    _as(tmp_path / "bob", monkeypatch)
    b = _up(ami)
    _as(tmp_path / "carol", monkeypatch)  # no record of either: her state was lost, or they are not hers
    with pytest.raises(InputError) as caught:
        lifecycle.down_preview(NAME, cloud="aws", region=REGION)
    message = str(caught.value)
    assert message.startswith(f"2 clusters named {NAME} are tagged in {REGION} (ids: ")
    assert {a.cluster_id, b.cluster_id} <= set(message.replace(",", " ").replace(")", " ").split())
    assert message.endswith((f"--cluster-id {a.cluster_id}`", f"--cluster-id {b.cluster_id}`"))
    with pytest.raises(NotFoundError, match="with id 00000000"):
        lifecycle.down(NAME, cloud="aws", region=REGION, cluster_id="00000000")
    lifecycle.down(NAME, cloud="aws", region=REGION, cluster_id=b.cluster_id)
    assert _running(ctx, b) == set() and leftovers(ctx, b) == []
    assert len(_running(ctx, a)) == 3  # the other one stays, and is now the only one: no id needed
    lifecycle.down(NAME, cloud="aws", region=REGION)
    assert left_of(ctx, NAME) == []


def test_a_cluster_recorded_before_ids_is_torn_down_and_nothing_newer(aws, ami, tmp_path, monkeypatch):
    """An old deepvm named everything by the cluster name alone and its state file has no cluster_id:
    it is read as a cluster without an id, whose resources are found by name, and whose sweep leaves out
    a newer cluster of the same name (which carries an id tag)."""
    ctx = aws
    old, new = tmp_path / "old", tmp_path / "new"
    _as(old, monkeypatch)
    with monkeypatch.context() as m:  # made as an older deepvm made it: no id, names and tags by name
        m.setattr(ClusterIdentity, "new", classmethod(lambda cls, name: ClusterIdentity(name)))
        legacy = _up(ami)
    assert legacy.cluster_id == "" and resource_name(legacy) == "deepvm-deepvm"
    with sqlite3.connect(old / "state.db") as db:  # and its state file as that deepvm wrote it
        db.execute("ALTER TABLE clusters DROP COLUMN cluster_id")
        db.execute("UPDATE schema_versions SET version = 2 WHERE name = 'clusters'")
    _as(new, monkeypatch)
    newer = _up(ami)

    _as(old, monkeypatch)
    row = Store().cluster(NAME)  # the file is brought up to date; the old cluster keeps its names
    assert row is not None and row.identity == ClusterIdentity(NAME)
    with sqlite3.connect(old / "state.db") as db:
        assert db.execute("SELECT version FROM schema_versions WHERE name = 'clusters'").fetchone() == (4,)
    assert {item.kind for item in leftovers(ctx, legacy)} >= {"instance", "key pair", "IAM role"}
    lifecycle.down(NAME)
    assert leftovers(ctx, legacy) == []
    assert len(_running(ctx, newer)) == 3 and {item.kind for item in leftovers(ctx, newer)} >= KINDS
