"""Clusters whose head took them down (autodown), or whose head died: the user's side finishes the teardown.

A head that takes its cluster down (training/head/autodown.py) terminates every instance, itself last, but
may not delete what only the user's credentials may: the launch template, security group, key pair, fleets
and the cluster's IAM roles. Its last act before terminating itself is to leave its record of the end in
the cluster's outputs bucket (`deepvm-cluster/end.json`: when, why, and every node with what it billed, the
replacements it bought included). The next deepvm command on the user's side that looks at clusters
(`finish_ended`) finds that record, takes it as the cluster's history (so `status` and `cost-report` show
the cluster ended when the head ended it, at the head's cost, not when this machine next looked), deletes
the rest, keeps the outputs bucket, and says so.

A head that died without a record (its instance is gone while the cluster is recorded up) leaves a cluster
with no controller: for a cluster whose head was to take it down, the same command tears the rest down
and says what was lost with the head. A head that handed control of a moved cluster to a new head in the new
zone (training/control/handover.py) is gone too, and is no death: the nodes read from the cloud name a running
head in another zone.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, replace
from datetime import datetime

from botocore.exceptions import BotoCoreError, ClientError

from provisioning.cloud.aws.context import AwsContext, error_code
from provisioning.cloud.aws.instances import describe
from provisioning.cloud.progress import Reporter
from provisioning.cloud.types import NodeRecord
from provisioning.clusters.cost import NodeSpan, iso
from provisioning.clusters.handle import Cluster, target_for
from provisioning.clusters.head import head_node
from provisioning.clusters.lifecycle import finish_down
from provisioning.clusters.store import ClusterRow, ClusterStatus, Store
from provisioning.core.errors import CloudError

END_KEY = "deepvm-cluster/end.json"  # in the cluster's outputs bucket
_ALIVE = ("pending", "running")


@dataclass(frozen=True)
class ClusterEnd:
    """The head's record of the cluster it took down."""

    cluster: str
    cluster_id: str
    reason: str  # why it went down: "job J completed", "no job for 30 minutes", ...
    ended_at: str  # ISO-8601 UTC: the last node's end (the head's own)
    job_id: str  # the job whose end took it down ("" for `up --autodown`)
    nodes: tuple[NodeRecord, ...]  # every node the head knew, replacements included
    spans: tuple[NodeSpan, ...]  # what each billed, from its launch to its end
    # instances the head could not terminate (EC2 refused): the user's side terminates them (finish_down)
    left_running: tuple[str, ...] = ()

    def to_json(self) -> str:
        data = asdict(self)
        data["spans"] = [{**s, "started": iso(s["started"]), "ended": iso(s["ended"])} for s in data["spans"]]
        return json.dumps(data, indent=1)

    @classmethod
    def from_json(cls, text: str) -> ClusterEnd:
        data = json.loads(text)
        nodes = tuple(NodeRecord.from_dict(n) for n in data["nodes"])
        spans = tuple(
            NodeSpan(**{**s, "started": _moment(s["started"]), "ended": _moment(s["ended"])}) for s in data["spans"]
        )
        left = tuple(data.get("left_running", ()))  # absent in a record of an older head
        return cls(**{**data, "nodes": nodes, "spans": spans, "left_running": left})


def _moment(text: str | None) -> datetime | None:
    return None if text is None else datetime.fromisoformat(text)


@dataclass(frozen=True)
class Finished:
    """One cluster whose teardown this command finished, and what to tell the user."""

    cluster: str
    end: ClusterEnd | None  # the head's record; None: the head died without leaving one
    deleted: tuple[str, ...]
    outputs_bucket: str
    lost: str = ""  # with no record: what went with the head

    def lines(self) -> list[str]:
        rest = ", ".join(self.deleted) if self.deleted else "nothing was left"
        kept = f"; its outputs stay in s3://{self.outputs_bucket} (`deepvm down {self.cluster}` deletes them)" * bool(
            self.outputs_bucket
        )
        if self.end is not None:
            left = self.end.left_running
            refused = f" (its head could not terminate {', '.join(left)}: terminated here)" * bool(left)
            return [
                f"cluster {self.cluster} was taken down by its head at {self.end.ended_at} ({self.end.reason}); "
                f"finished its teardown here{refused}: {rest}{kept}"
            ]
        return [
            f"cluster {self.cluster}'s head is gone and left no record: {self.lost}; tore down the rest: {rest}{kept}"
        ]


def read_end(ctx: AwsContext, bucket: str) -> ClusterEnd | None:
    """The head's record in the cluster's bucket, or None when there is none (yet)."""
    try:
        body = ctx.client("s3").get_object(Bucket=bucket, Key=END_KEY)["Body"].read()
    except ClientError as exc:
        if error_code(exc) in ("NoSuchKey", "NoSuchBucket", "404", "AccessDenied"):
            return None
        raise CloudError(f"reading the head's record of its cluster's end: {error_code(exc)}") from exc
    except BotoCoreError as exc:
        raise CloudError(f"reading the head's record of its cluster's end: {exc}") from exc
    return ClusterEnd.from_json(body.decode())


def finish_ended(store: Store | None = None, report: Reporter = Reporter()) -> list[Finished]:
    """Finish the teardown of every cluster recorded up here that its head took down or whose head died
    (only clusters whose head may take them down: `head_takes_down`); see the module docstring."""
    store = store or Store()
    done = []
    for row in store.clusters():
        if row.status is not ClusterStatus.UP or not row.resources.head_takes_down:
            continue
        ctx = target_for(row.cloud).context(row.region, start=False)
        if ctx is None:  # a sandbox that was stopped: its instances went with it (Cluster.refresh says so)
            continue
        found = _finish(ctx, store, row, report)
        if found is not None:
            done.append(found)
    return done


def _finish(ctx: AwsContext, store: Store, row: ClusterRow, report: Reporter) -> Finished | None:
    bucket = row.resources.outputs_bucket
    end = _end_of(ctx, row)
    if end is None:
        head = head_node(store.nodes(row.name))
        if head is None or _alive(ctx, head.instance_id) or _handed_over(store, row, head):
            return None
        # Read again: a head taking its cluster down writes its record, then terminates itself, so a head
        # found gone just after the first read may have left one in between (seen in the sandbox).
        end = _end_of(ctx, row)
        if end is None:
            lost = (
                f"its head {head.instance_id} is not running, so the job's controller, its log and the outputs "
                "and checkpoints on its disk that were not copied to S3 are lost"
            )
            deleted = finish_down(row, store, "its head died", None, report)
            return Finished(row.name, None, tuple(deleted), bucket, lost)
    store.adopt_record(row.name, list(end.nodes), list(end.spans))
    deleted = finish_down(row, store, f"taken down by its head: {end.reason}", end.ended_at, report)
    return Finished(row.name, end, tuple(deleted), bucket)


def _end_of(ctx: AwsContext, row: ClusterRow) -> ClusterEnd | None:
    """The head's record of this cluster's end, if it left one (a bucket name reused by another cluster of
    the same name is not this one's: the cluster id tells)."""
    bucket = row.resources.outputs_bucket
    end = read_end(ctx, bucket) if bucket else None
    return end if end is not None and end.cluster_id == row.cluster_id else None


def _handed_over(store: Store, row: ClusterRow, head: NodeRecord) -> bool:
    """Whether the head recorded here handed control of its moved cluster to a head in another zone
    (training/control/handover.py) rather than died: the cluster's nodes read from the cloud (those the head
    bought adopted) give a running head, by head_node's rule, in another zone than this one's. A cloud that
    cannot be read says so too: nothing is torn down on a guess."""
    if not Cluster(store, row).refresh():
        return True
    now = head_node(store.nodes(row.name))
    return now is not None and now.availability_zone != head.availability_zone


def _alive(ctx: AwsContext, instance_id: str) -> bool:
    """Whether the instance runs (or is starting); one EC2 no longer knows is gone."""
    try:
        found = describe(ctx, [instance_id])
    except (ClientError, BotoCoreError):
        return True  # the cloud could not say: nothing is torn down on a guess
    return any(i.state in _ALIVE for i in found)


def spans_ended(spans: list[NodeSpan], at: datetime) -> tuple[NodeSpan, ...]:
    """The spans with every open one ended `at` (the head's own, as it ends the cluster)."""
    return tuple(s if s.ended is not None else replace(s, ended=at) for s in spans)
