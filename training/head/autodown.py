"""Autodown: the head takes its own cluster down, itself last, so that nothing bills once there is no work.

Called when a job's end takes the cluster down (`train --down-when-done`, or config's down_when_done:
training/head/job_end.py) and when a cluster had no job for `up --autodown N` minutes
(training/head/idle_cluster.py). The outputs were copied to S3 before (training/head/outputs.py). The steps,
in this order; a step that fails is said in the log and the next ones still run, so that whatever AWS refuses
the end is recorded and the head ends itself:

1. every other instance of the cluster is terminated (the head's role may terminate exactly those carrying
   its tag: provisioning/cloud/aws/policies.py): those the tag lists, and those the head's store lists that a
   DescribeInstances shows live and tagged as the cluster's; in one batch, or one by one when EC2 refuses
   the batch (one instance the role may not touch fails a whole TerminateInstances). Then looked for once
   more after a pause: an instance a replacement launched a moment ago may be missing from a tag-filtered
   DescribeInstances for a while (https://docs.aws.amazon.com/ec2/latest/devguide/eventual-consistency.html);
2. the hook hears of it (`autodown`), given up to half a minute to be delivered;
3. `last_words` runs (the job's log, with these lines, copied once more);
4. the head's record of the end (provisioning.clusters.ended.ClusterEnd: when, why, every node and what it
   billed, and the instances EC2 would not let it terminate) goes to the cluster's bucket; the next deepvm
   command on the user's side finds it there, terminates what is left and deletes what only the user's
   credentials may (template, security group, key pair, fleets, IAM roles), and shows the cluster as ended
   then, at this cost;
5. the head terminates itself: EC2 ends this process with the instance. When that call is refused or cannot
   be sent, the head shuts its OS down, which EC2 turns into a termination (training/head/poweroff.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime, timezone

from provisioning.cloud.aws.context import AwsContext, cloud_errors
from provisioning.cloud.aws.instances import LIVE_STATES, cluster_instances, describe_raw, terminate_instances
from provisioning.cloud.names import ClusterIdentity, owned_by
from provisioning.cloud.types import NodeRecord
from provisioning.clusters.cost import iso
from provisioning.clusters.ended import END_KEY, ClusterEnd, spans_ended
from provisioning.clusters.head import head_node
from provisioning.clusters.store import ClusterRow, ClusterStatus, Store
from provisioning.core.errors import CloudError
from training.head.notify import Notifier, NotifyKind
from training.head.poweroff import power_off
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
    shut_down: Callable[[bool, Callable[[str], None]], None] = power_off,
) -> None:
    """Take the cluster down as the module docstring says; returns only where terminating the head failed
    (EC2 ends this process otherwise). A step that fails is said and the next ones still run: whatever
    refuses, the end is recorded and the head ends itself, the last thing this process does."""
    store = Store()
    row = store.cluster(down.cluster)
    if row is None:
        raise CloudError(f"the head has no record of cluster {down.cluster}")
    ctx = AwsContext(region=row.region)  # the head's role, through its instance metadata
    head = head_node(store.nodes(down.cluster))
    me = head.instance_id if head is not None else ""
    say(f"taking cluster {down.cluster} down: {down.reason}")
    ending = Ending(ctx, row.identity, say)
    try:
        for pause in (0.0, settle_s):
            time.sleep(pause)
            ending.terminate_others(store.nodes(down.cluster), me)
        store.put_nodes(
            down.cluster,
            [replace(n, state="terminated") for n in store.nodes(down.cluster) if n.instance_id in ending.gone],
        )
        _step(say, "telling the hook", lambda: _notify(notifier, down, summary))
        say(f"terminating the head {me or '(unknown)'} last")
        _step(say, "copying the job's log", last_words)
    finally:
        ended = datetime.now(timezone.utc)
        if down.bucket:
            _step(say, "recording the end", lambda: _record_end(ctx, store, row, down, ended, ending.refused))
        _step(say, "closing the cluster's record", lambda: _close(store, down, ended))
        if me:
            _end_self(ctx, me, say, shut_down)


def _notify(notifier: Notifier, down: Autodown, summary: RunSummary | None) -> None:
    notifier.post(NotifyKind.AUTODOWN, down.reason, summary)
    notifier.close(timeout_s=30.0)


def _record_end(
    ctx: AwsContext, store: Store, row: ClusterRow, down: Autodown, ended: datetime, refused: dict[str, str]
) -> None:
    spans = spans_ended(store.node_spans(down.cluster), ended)
    end = ClusterEnd(
        down.cluster,
        row.cluster_id,
        down.reason,
        iso(ended) or "",
        down.job_id,
        tuple(store.nodes(down.cluster)),
        spans,
        left_running=tuple(sorted(refused)),
    )
    ctx.client("s3").put_object(Bucket=down.bucket, Key=END_KEY, Body=end.to_json().encode())


def _close(store: Store, down: Autodown, ended: datetime) -> None:
    store.close_costs(down.cluster, iso(ended))
    store.set_status(down.cluster, ClusterStatus.TERMINATED, f"taken down by its head: {down.reason}")


def _end_self(
    ctx: AwsContext, me: str, say: Callable[[str], None], shut_down: Callable[[bool, Callable[[str], None]], None]
) -> None:
    """TerminateInstances on the head itself; refused or unsent, the OS shutdown that EC2 turns into one."""
    try:
        terminate_instances(ctx, [me])
    except CloudError as exc:
        say(f"could not terminate the head {me}: {exc}")
        shut_down(ctx.emulated, say)


def _step(say: Callable[[str], None], what: str, step: Callable[[], None]) -> None:
    """Run one step of the teardown; a failure of any kind is said, and the teardown goes on (a head that
    stopped here would bill, and leave its nodes billing, with no one left to see it)."""
    try:
        step()
    except Exception as exc:  # see the docstring: nothing may stop the head's own end
        say(f"{what} failed: {type(exc).__name__}: {exc}")


class Ending:
    """The cluster's other instances, terminated: only those a describe shows live and the cluster's (an id
    the store still lists may be long gone, or, after a mix-up, not the cluster's: the head's tag-scoped role
    may not terminate it, and EC2 refuses a whole TerminateInstances batch for one such id,
    https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_TerminateInstances.html), in one batch, or
    one by one when the batch is refused."""

    def __init__(self, ctx: AwsContext, identity: ClusterIdentity, say: Callable[[str], None]) -> None:
        self.ctx, self.identity, self.say = ctx, identity, say
        self.gone: set[str] = set()
        self.refused: dict[str, str] = {}  # instance id: why EC2 would not terminate it

    def terminate_others(self, stored: list[NodeRecord], me: str) -> None:
        tagged = self._listed()
        known = {n.instance_id for n in stored if n.state in LIVE_STATES}
        others = sorted((tagged | self._live_ours(sorted(known - tagged))) - self.gone - {me})
        if not others:
            return
        try:
            terminate_instances(self.ctx, others)
            self.gone |= set(others)
        except CloudError as exc:
            self.say(f"terminating {len(others)} instances at once was refused ({exc}): one by one")
            for instance_id in others:
                self._terminate_one(instance_id)
        done = sorted(self.gone & set(others))
        if done:
            self.say(f"terminated {', '.join(done)}")

    def _terminate_one(self, instance_id: str) -> None:
        try:
            terminate_instances(self.ctx, [instance_id])
        except CloudError as exc:
            self.refused[instance_id] = str(exc)
            self.say(f"could not terminate {instance_id}: {exc}")
            return
        self.gone.add(instance_id)
        self.refused.pop(instance_id, None)

    def _listed(self) -> set[str]:
        """The live instances carrying the cluster's tag (none when the listing fails: the store's are asked)."""
        try:
            return {i.instance_id for i in cluster_instances(self.ctx, self.identity, LIVE_STATES)}
        except CloudError as exc:
            self.say(f"listing the cluster's instances failed: {exc}")
            return set()

    def _live_ours(self, instance_ids: list[str]) -> set[str]:
        """Of these ids, those EC2 describes live and tagged as the cluster's; all of them when it cannot
        describe them (they are tried: a refusal is then said per id)."""
        if not instance_ids:
            return set()
        try:
            with cloud_errors("describing the cluster's recorded instances"):
                raw = describe_raw(self.ctx, instance_ids)
        except CloudError as exc:
            self.say(f"{exc}: terminating them unread")
            return set(instance_ids)
        return {i["InstanceId"] for i in owned_by(self.identity, raw) if i["State"]["Name"] in LIVE_STATES}
