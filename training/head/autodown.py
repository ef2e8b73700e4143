"""Autodown: the head takes its own cluster down, itself last, so that nothing bills once there is no work.

Called when a job's end takes the cluster down (`train --down-when-done`, or config's down_when_done:
training/head/job_end.py) and when a cluster had no job for `up --autodown N` minutes
(training/head/idle_cluster.py). The outputs were copied to S3 before (training/head/outputs.py). The steps,
in this order, each needed by the next:

1. every other instance carrying the cluster's tag is terminated (the head's role may terminate exactly
   those: provisioning/cloud/aws/policies.py), found both in the head's store and by the tag, then looked
   for once more after a pause: an instance a replacement launched a moment ago may be missing from a
   tag-filtered DescribeInstances for a while (https://docs.aws.amazon.com/ec2/latest/devguide/
   eventual-consistency.html);
2. the hook hears of it (`autodown`), given up to half a minute to be delivered;
3. `last_words` runs (the job's log, with these lines, copied once more);
4. the head's record of the end (provisioning.clusters.ended.ClusterEnd: when, why, every node and what it
   billed) goes to the cluster's bucket; the next deepvm command on the user's side finds it there,
   deletes what only the user's credentials may (template, security group, key pair, fleets, IAM roles)
   and shows the cluster as ended then, at this cost;
5. the head terminates itself: EC2 ends this process with the instance.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime, timezone

from provisioning.cloud.aws.context import AwsContext
from provisioning.cloud.aws.instances import LIVE_STATES, cluster_instances, terminate_instances
from provisioning.clusters.cost import iso
from provisioning.clusters.ended import END_KEY, ClusterEnd, spans_ended
from provisioning.clusters.head import head_node
from provisioning.clusters.store import ClusterStatus, Store
from provisioning.core.errors import CloudError
from training.head.notify import Notifier, NotifyKind
from training.shared.summary import RunSummary

SETTLE_S = 5.0  # before looking for instances again: what a listing may still miss


@dataclass(frozen=True)
class Autodown:
    """Why and for whom the cluster goes down."""

    cluster: str
    reason: str  # said in the log, to the hook, and in the record of the end
    job_id: str = ""  # the job whose end takes it down ("" for a cluster idle too long)
    bucket: str = ""  # the cluster's outputs bucket: where the record goes ("" none: nothing is recorded)


def take_down(
    down: Autodown,
    say: Callable[[str], None],
    notifier: Notifier,
    summary: RunSummary | None = None,
    last_words: Callable[[], None] = lambda: None,
    settle_s: float = SETTLE_S,
) -> None:
    """Take the cluster down as the module docstring says; returns only where terminating the head failed
    (EC2 ends this process otherwise)."""
    store = Store()
    row = store.cluster(down.cluster)
    if row is None:
        raise CloudError(f"the head has no record of cluster {down.cluster}")
    ctx = AwsContext(region=row.region)  # the head's role, through its instance metadata
    head = head_node(store.nodes(down.cluster))
    me = head.instance_id if head is not None else ""
    say(f"taking cluster {down.cluster} down: {down.reason}")
    gone: set[str] = set()
    for pause in (0.0, settle_s):
        time.sleep(pause)
        tagged = {i.instance_id for i in cluster_instances(ctx, row.identity, LIVE_STATES)}
        known = {n.instance_id for n in store.nodes(down.cluster) if n.state in LIVE_STATES}
        others = sorted((tagged | known) - gone - {me})
        if others:
            terminate_instances(ctx, others)
            say(f"terminated {', '.join(others)}")
            gone |= set(others)
    ended = datetime.now(timezone.utc)
    store.put_nodes(
        down.cluster, [replace(n, state="terminated") for n in store.nodes(down.cluster) if n.instance_id in gone]
    )
    notifier.post(NotifyKind.AUTODOWN, down.reason, summary)
    notifier.close(timeout_s=30.0)
    say(f"terminating the head {me or '(unknown)'} last")
    last_words()
    if down.bucket:
        spans = spans_ended(store.node_spans(down.cluster), ended)
        end = ClusterEnd(
            down.cluster,
            row.cluster_id,
            down.reason,
            iso(ended) or "",
            down.job_id,
            tuple(store.nodes(down.cluster)),
            spans,
        )
        ctx.client("s3").put_object(Bucket=down.bucket, Key=END_KEY, Body=end.to_json().encode())
    store.close_costs(down.cluster, iso(ended))
    store.set_status(down.cluster, ClusterStatus.TERMINATED, f"taken down by its head: {down.reason}")
    if me:
        terminate_instances(ctx, [me])
