"""Handing a moved cluster's control to a new head in its new zone: which node, what travels, in which order.

A move (training.control.move) relocates the job's nodes; the head that runs the managed controller is the one
node it cannot simply let go, since the controller runs there. Left behind, it bills on in the old zone as the
control node. Handed over, control passes to an on-demand node the move bought in the new zone, and the old
head terminates itself last. The steps, in an order that leaves the old head in control until the new
controller runs:

0. when: between two attempts, after a move's switch (the old zone's attempt stopped cleanly, its checkpoint in
   S3: move.py), before the relaunch in the new zone, and only with nothing on its way (an order in flight would
   deliver nodes that no controller records). The training is stopped anyway, so the hand-over costs no extra
   relaunch: the move's one relaunch is the new controller's first launch.
1. which node: `successor`, head_node's rule (provisioning.clusters.head: the anchor, else the earliest
   on-demand holder) over the new zone's usable nodes. The same rule on purpose: the switch retired every
   other node of the old zone, so once the old head is gone head_node over the whole cluster names the new
   head, and the user's side (`status`, `logs`, `watch`, `cancel`, `fetch`: training.client.managed.head_of)
   finds it with no record and no tag, even if it was away during the move: its next command refreshes the
   cluster from EC2 (Cluster.refresh adopts, by their tags, the nodes the head bought), sees the old head
   terminated, and head_node names the new one; a follower of the job's log (`deepvm train`, `logs -f`) that
   loses the old head goes on on the new one from the last line both logs share (HANDING_OVER, the note
   written before the copy: training.client.managed.follow_across). A tag would need ec2:CreateTags after
   launch, which the head's role may not do (policies.py: TagOnlyWhileLaunching); a record in the cluster's
   bucket would exist only for clusters that have one.
2. the state travels by SSH from the old head with the cluster's internal key (every node authorises it, from
   its user data), not through the cluster's bucket (only clusters with outputs or autodown have one, and both
   heads would need rights on it). The controller first writes the job's row (its message: where control
   goes) and closes its TensorBoard files; then a consistent snapshot of the head's state store (SQLite's
   backup API: the cluster record with the nodes the head bought and their bills, the job's row, the events),
   the cluster's key directory (the internal key, the pinned host keys) and the job's root (job.json, with the
   new head and the old one named in it; job/, the staged YAML and what sits beside it; log.jsonl, so that a
   follower's line numbers carry on; out/, the TensorBoard files; notify.secret), never its pid files or
   service output. The runtime is there already: the new head was prepared as a node (staging pushes
   deepvm/runtime to every node) from the same image, so the controller's modules and Python are the same.
3. the instance profile: the old head gives the new head the controller's profile (profiles.attach_profile
   replaces the holders' profile it got when bought: ec2:ReplaceIamInstanceProfileAssociation and iam:PassRole
   on the controller's own role, limited to the cluster's instances by tag). The old head keeps its own until
   it terminates: a profile may be associated with any number of instances, and terminating ends the
   association, so no Disassociate right is needed.
4. the new controller: the old head starts the job's supervisor on the new head as `deepvm train` does
   (systemd or setsid) and waits until it runs. Its request names its own node (TrainRequest.head: head_node
   over the cluster still names the old head while that runs) and the old head (handed_from), which it
   retires first (`retire_predecessor`: terminating twice is harmless), so that the old head never joins a
   launch; its ladder counts the cluster in its head's zone. It resumes the job from its row: the
   controller-restart path (jobrecord.choose_job), from the newest checkpoint, in S3.
5. the old controller ends (HandedOver): its service tells its supervisor so, which runs no job end (the job is
   not over: no summary, no hook, no autodown) and terminates its own instance, last.

A failure before step 4 completes (no successor, the copy, the profile, the start: HandOverFailed) leaves the
old head in control: the executor undoes what it did (the new head gets its holders' profile back; copied files
no process reads are harmless), the controller says why in the job's log and relaunches in the new zone with
the head staying as the control node (move.py), and does not try again for this job. After step 4 nothing the
old head does matters: if it fails to terminate itself, its successor has terminated it already.

`deepvm train --controller local` has no head: nothing is handed over. The executor of steps 2 to 4 is a
HeadHandOver handed to the controller (training.head.job_service's); without one the head stays, as before.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Protocol

from provisioning.cloud.types import NodeRecord
from provisioning.clusters.head import head_node
from provisioning.core.errors import DeepvmError

# the controller's last note before the state is copied: the old and the new head's logs are the same up to it
# (and a follower that lost the old head goes on from the line after it on the new one: training.client.managed)
HANDING_OVER = "handing control to the new head"


@dataclass(frozen=True)
class Successor:
    """The node that takes control of the job, and the head it takes it from."""

    old: str  # the head that hands over (its instance id)
    new: NodeRecord  # the on-demand node of the new zone that becomes the head
    zone: str  # the zone the cluster moved to

    def describe(self) -> str:
        return f"{self.new.instance_id} in {self.zone}"

    def announce(self) -> str:
        """The controller's note before the copy (HANDING_OVER: the logs' last shared line)."""
        return f"{HANDING_OVER} {self.describe()}"


class HandOverFailed(DeepvmError):
    """A step of the hand-over failed; what it did was undone, and the old head keeps control."""


class HandedOver(Exception):
    """The controller handed its job to `successor`: it ends here, and the job runs on under the new head."""

    def __init__(self, successor: Successor) -> None:
        super().__init__(f"control passed to {successor.describe()}")
        self.successor = successor


class HeadHandOver(Protocol):
    """Steps 2 to 4 of the module docstring, carried out from the old head."""

    def __call__(self, successor: Successor, note: Callable[[str], None]) -> None:
        """Copy the state, move the profile, start the new controller; returns once it runs. HandOverFailed,
        with what was done undone, when a step fails."""
        ...


def successor(nodes: Sequence[NodeRecord], usable: Collection[str], head: str, zone: str) -> Successor | None:
    """The node of `zone` that takes control from `head` (module docstring, step 1): head_node's rule over the
    running nodes of `zone` that the job may use; None when the head runs in `zone` already, or the zone has no
    on-demand anchor or holder."""
    record = next((n for n in nodes if n.instance_id == head), None)
    if record is None or record.availability_zone == zone:
        return None
    there = [n for n in nodes if n.availability_zone == zone and n.instance_id in usable and n.instance_id != head]
    found = head_node(there)
    return None if found is None else Successor(head, found, zone)


def own_head(nodes: Sequence[NodeRecord], inside_cluster: bool, named: str | None) -> NodeRecord | None:
    """The node a controller runs on: the one a hand-over named (TrainRequest.head), else, inside the cluster,
    head_node's (as `up` and `train` chose it); None for a controller on the user's machine."""
    if named:
        return next((n for n in nodes if n.instance_id == named), None)
    return head_node(nodes) if inside_cluster else None


class Retiring(Protocol):
    def retire(self, instance_ids: list[str], why: str) -> None: ...


def retire_predecessor(cluster: Retiring, old: str, me: str, note: Callable[[str], None]) -> None:
    """The new controller terminates the head it took the job from (module docstring, step 4), before it reads
    its nodes: it terminates itself too, and twice is harmless; a failure here is said, not fatal (the old
    head's own termination, or `deepvm down`, ends it)."""
    try:
        cluster.retire([old], f"it handed control of the job to {me}")
    except DeepvmError as exc:
        note(f"could not terminate the previous head {old} ({exc}); it terminates itself")
        return
    note(f"took control from the previous head {old}, which is terminated")
