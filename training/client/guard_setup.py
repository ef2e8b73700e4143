"""Before a managed job with a money guard is staged: where its outputs go, and the rights to put them there.

A job whose end copies its outputs to S3 (`--down-when-done`, config's down_when_done, `--max-duration`, or
any job on a cluster made with `up --autodown`) needs a place that outlives the cluster. When the job names
its own S3 prefix with l3, its outputs go beside its log mirror there (the head's rights on it come with the
job: training/client/storage.py); otherwise into the bucket deepvm makes for the cluster
(provisioning/cloud/aws/buckets.py), which the head's role may write through a policy of its own
(iam.put_outputs_policy). Either way the cluster's bucket exists, since the head's
record of the cluster's end goes there, and the cluster's record says its head may take it down, so that the
next command here finishes the teardown (provisioning/clusters/ended.py).
"""

from __future__ import annotations

from dataclasses import replace

from provisioning.cloud.aws.buckets import ensure_bucket
from provisioning.cloud.aws.iam import put_outputs_policy
from provisioning.clusters.handle import Cluster, started
from provisioning.clusters.store import Store
from training.shared.guard import JobGuard
from training.shared.jobspec import JobSpec
from training.shared.storage import outputs_url


def ready_guard(cluster: Cluster, spec: JobSpec, guard: JobGuard) -> JobGuard:
    """The guard with its outputs URL and the cluster's bucket filled in (made, and granted to the head, when
    the job's end copies its outputs); the guard as given otherwise. On a cluster its head may take down on
    its own (`up --autodown`), every job's end copies them: the idle watch would take them down with it."""
    row = cluster.row
    guard = replace(guard, cluster_goes_down=row.resources.head_takes_down)
    if not guard.copies_outputs:
        return guard
    ctx = started(cluster.target, row.region)
    bucket = ensure_bucket(ctx, row.identity)
    put_outputs_policy(ctx, row.resources.controller, bucket)
    takes_down = row.resources.head_takes_down or guard.down_when_done
    Store().set_resources(row.name, replace(row.resources, outputs_bucket=bucket, head_takes_down=takes_down))
    return replace(guard, outputs_url=outputs_url(spec, bucket), cluster_bucket=bucket)
