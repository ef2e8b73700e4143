"""The cluster's outputs bucket (provisioning/cloud/aws/buckets.py) against a moto server: made once and tagged
with the cluster, found by the teardown with no local state, emptied and deleted with the cluster unless the
outputs are kept, and a bucket of that name deepvm did not tag never touched. The head's record of a cluster's
end (provisioning/clusters/ended.py) read back from it, and taken as the store's history at the head's time."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from provisioning.catalog.model import Market
from provisioning.cloud.aws.buckets import BUCKET_NAME_MAX, bucket_name, bucket_of, delete_bucket, ensure_bucket
from provisioning.cloud.aws.teardown import leftovers, terminate_cluster
from provisioning.cloud.names import CLUSTER_ID_TAG, CLUSTER_TAG, ClusterIdentity
from provisioning.cloud.types import CloudKind, CloudResources, NodeRecord
from provisioning.clusters.cost import NodeSpan
from provisioning.clusters.ended import END_KEY, ClusterEnd, read_end
from provisioning.clusters.store import ClusterRow, ClusterStatus, Store
from provisioning.planner.plan import Role
from tests.cloud.plans import REGION, make_plan

C1 = ClusterIdentity("c1", "0a1b2c3d")


def test_the_name_fits_s3_and_keeps_the_clusters_id_and_region():
    long = ClusterIdentity("A_very.long-Cluster_name" * 4, "0a1b2c3d")
    name = bucket_name(long, "ap-southeast-2")
    assert len(name) <= BUCKET_NAME_MAX and name.startswith("deepvm-a-very-long-cluster-name")
    assert name.endswith("-0a1b2c3d-ap-southeast-2-out") and name == name.lower()


def test_made_once_tagged_and_deleted_with_the_cluster_objects_and_all(ctx):
    name = ensure_bucket(ctx, C1)
    assert ensure_bucket(ctx, C1) == name  # a second `train` finds it
    s3 = ctx.client("s3")
    for index in range(3):
        s3.put_object(Bucket=name, Key=f"deepvm-jobs/j1/out/{index}.bin", Body=b"x")
    assert bucket_of(ctx, C1) == name
    assert [(item.kind, item.resource_id) for item in leftovers(ctx, C1)] == [("S3 bucket", name)]
    assert leftovers(ctx, C1, keep_outputs=True) == []
    assert terminate_cluster(ctx, C1, keep_outputs=True) == [] and bucket_of(ctx, C1) == name  # down --keep-outputs
    assert terminate_cluster(ctx, C1) == [f"S3 bucket {name}"]
    assert bucket_of(ctx, C1) == "" and leftovers(ctx, C1) == []
    assert delete_bucket(ctx, name) is False  # gone already: harmless


def test_a_bucket_of_that_name_deepvm_did_not_tag_is_never_touched(ctx):
    name = bucket_name(C1, REGION)
    s3 = ctx.client("s3")
    s3.create_bucket(
        Bucket=name, **({} if REGION == "us-east-1" else {"CreateBucketConfiguration": {"LocationConstraint": REGION}})
    )
    s3.put_object(Bucket=name, Key="theirs", Body=b"keep me")
    assert bucket_of(ctx, C1) == "" and leftovers(ctx, C1) == []
    terminate_cluster(ctx, C1)
    assert s3.get_object(Bucket=name, Key="theirs")["Body"].read() == b"keep me"
    another = [{"Key": CLUSTER_TAG, "Value": "c1"}, {"Key": CLUSTER_ID_TAG, "Value": "ffffffff"}]
    s3.put_bucket_tagging(Bucket=name, Tagging={"TagSet": another})  # a cluster of the same name, not this one
    assert bucket_of(ctx, C1, known=name) == ""
    assert bucket_of(ctx, ClusterIdentity("c1", "ffffffff"), known=name) == name


def test_the_heads_record_of_the_end_becomes_the_stores_history_at_the_heads_time(ctx, tmp_path):
    bucket = ensure_bucket(ctx, C1)
    assert read_end(ctx, bucket) is None
    start = datetime(2026, 11, 25, 1, 0, tzinfo=timezone.utc)
    ended = start + timedelta(hours=2)
    zone = f"{REGION}a"
    nodes = (
        NodeRecord("i-head", "m5.large", Market.ON_DEMAND, Role.HOLDER, zone, "running", "10.0.0.1", None, 0.1),
        NodeRecord("i-new", "g4dn.xlarge", Market.SPOT, Role.TRAINER, zone, "running", "10.0.0.2", None, 0.2),
    )
    spans = (
        NodeSpan("i-head", "m5.large", 0.1, start, ended),
        NodeSpan("i-new", "g4dn.xlarge", 0.2, start + timedelta(hours=1), ended),
    )  # a replacement it bought
    end = ClusterEnd("c1", C1.cluster_id, "job j1 completed", ended.isoformat(), "j1", nodes, spans)
    ctx.client("s3").put_object(Bucket=bucket, Key=END_KEY, Body=end.to_json().encode())
    found = read_end(ctx, bucket)
    assert found == end
    store = Store(tmp_path / "state.db")
    store.put_cluster(
        ClusterRow(
            "c1",
            CloudKind.AWS,
            ClusterStatus.UP,
            make_plan(),
            "tok",
            CloudResources(),
            "root",
            "",
            cluster_id=C1.cluster_id,
        )
    )
    store.adopt_record("c1", list(found.nodes), list(found.spans))
    cost = store.cost("c1", now=ended + timedelta(days=3))  # looked at days later: still the head's end
    assert abs(cost.usd - (2 * 0.1 + 1 * 0.2)) < 1e-9
    assert {n.instance_id: n.state for n in store.nodes("c1")} == {"i-head": "terminated", "i-new": "terminated"}


def test_a_head_that_writes_its_record_and_ends_between_two_looks_is_taken_down_not_dead(ctx, tmp_path, monkeypatch):
    """The head writes its record of the end, then terminates itself: a command here that read no record
    and then found the head gone used to call it dead (seen in the sandbox e2e). It reads again."""
    from provisioning.clusters import ended

    bucket = ensure_bucket(ctx, C1)
    zone = f"{REGION}a"
    head = NodeRecord(
        "i-0123456789abcdef0", "m5.large", Market.ON_DEMAND, Role.HOLDER, zone, "running", "10.0.0.1", None, 0.1
    )
    now = datetime.now(timezone.utc)
    end = ClusterEnd("c1", C1.cluster_id, "job j1 completed", now.isoformat(), "j1", (head,), ())
    store = Store(tmp_path / "state.db")
    row = ClusterRow(
        "c1",
        CloudKind.AWS,
        ClusterStatus.UP,
        make_plan(),
        "tok",
        CloudResources(outputs_bucket=bucket, head_takes_down=True),
        "root",
        "",
        cluster_id=C1.cluster_id,
    )
    store.put_cluster(row)
    store.put_nodes("c1", [head])

    def ends_meanwhile(ctx_, instance_id):
        ctx.client("s3").put_object(Bucket=bucket, Key=END_KEY, Body=end.to_json().encode())
        return False

    monkeypatch.setattr(ended, "_alive", ends_meanwhile)
    monkeypatch.setattr(ended, "_handed_over", lambda store_, row_, head_: False)  # it did not move
    monkeypatch.setattr(ended, "finish_down", lambda row_, store_, why, at, report: [why])
    found = ended._finish(ctx, store, row, ended.Reporter())
    assert found is not None and found.end == end and found.deleted == ("taken down by its head: job j1 completed",)
