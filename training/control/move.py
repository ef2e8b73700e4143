"""Moving the live cluster to another zone: when the ladder's MOVE switches over, and which nodes go.

The ladder answers MOVE when its zone has refused Spot long enough that moving pays
(provisioning/ladder/moves.py). The controller carries it out in four steps, each a state of the node pool
(training.control.nodepool: "a cluster moving to another zone"):

1. buy: the move's orders (the plan's holders or anchor, its Spot trainers, the stand-ins held) are bought in
   the new zone, in the subnet `up` recorded there (CloudResources.zone_subnets, through Cluster.add_nodes);
   the ladder answers MOVING until they have all ended;
2. train on: meanwhile the old zone's nodes train as before; the new zone's wait READY, folded into no
   attempt (a world spread over two zones would pay inter-zone transfer on every gradient exchange);
3. switch: once every order has ended, and the new zone has a node that keeps checkpoints and one that
   trains, every usable node of the old zone is let go (AT_RISK -> DRAINING): the running attempt stops
   cleanly (its trainers flush the current step) and the job relaunches once, on the new zone's nodes, from
   that checkpoint; the old zone's nodes are retired once that attempt has ended. Otherwise the move is
   called off: the new zone's arrivals are let go, and the ladder decides again (the refusing pools cool);
4. the cluster is in the new zone: the ladder buys like the plan there, and may move again.

Where the checkpoint travels: through S3 (level l3). A clean stop's flush is safe at L1 on the holders, and
DeepCheck's close drains L2 and L3 before the ranks exit (deepcheck/api.py), so the stop's checkpoint is in
S3 when the attempt ends; the new zone's holders list S3's manifests and the trainers restore from there (the
path a job whose holders were all lost takes already). S3 is regional: reading it from any zone of the region
costs no transfer (https://aws.amazon.com/s3/pricing/, "Data Transfer IN/OUT ... same AWS Region": free).
Holder to holder (the old holders' RAM or disk copied to the new ones) would save the upload, but needs a
node-to-node copy the controller does not have; until it does, a job without l3 is offered no other zone
(LiveMarket's `movable`) and never moves.

The head stays, unless it hands control over. The managed controller runs on the head (an on-demand holder or
anchor: provisioning.clusters.head), so the move lets the head go from the job like any old node (it no longer
holds checkpoints or trains) but does not terminate it. Right after the switch, before the relaunch in the new
zone, the controller hands the job to an on-demand node the move bought there and ends, and the old head
terminates itself last (training.control.handover: which node, how the state and the instance profile travel,
how the user's side finds the new head). Where no hand-over is possible (the controller was given no executor
for it, or it failed halfway), the head runs the controller on, in the old zone, and only control traffic
(SSH, mpirun's launch) crosses zones. It bills on as the control node: the ladder counts it in the new
cluster's bill and the cap (Situation.head), and `deepvm status` still finds it (head_node: the earliest
on-demand node running). With --controller local no node is the head and every old node is retired.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from provisioning.cloud.types import NodeRecord
from training.control.nodepool import HOLDING, TRAINING, NodePool, NodeStatus, Slot


@dataclass(frozen=True)
class MoveEnd:
    """How a move whose orders have all ended ends."""

    moved: bool  # the cluster switches to the new zone (else the move is called off)
    leaving: tuple[str, ...]  # the nodes let go: the old zone's (moved), or the new zone's arrivals
    text: str  # why, for the job's log and row


def zone_of(slot: Slot, records: Mapping[str, NodeRecord], default: str) -> str:
    """The zone a node runs in (a record without one is of the plan's zone)."""
    record = records.get(slot.instance_id)
    return (record.availability_zone if record is not None else "") or default


def move_end(pool: NodePool, records: Mapping[str, NodeRecord], to: str, plan_zone: str) -> MoveEnd:
    """Switch to `to` when it has a ready node that keeps checkpoints and one that trains, else call it off."""
    arrived = [s for s in pool.with_status({NodeStatus.READY}) if zone_of(s, records, plan_zone) == to]
    if any(s.role in HOLDING for s in arrived) and any(s.role in TRAINING for s in arrived):
        old = tuple(s.instance_id for s in pool.usable() if zone_of(s, records, plan_zone) != to)
        text = (
            f"move: the cluster moves to {to}: {len(arrived)} nodes there are ready; relaunching there once "
            f"from the checkpoint (through S3), and {len(old)} nodes of the old zone go"
        )
        return MoveEnd(True, old, text)
    text = (
        f"move to {to} called off: it gave no node that keeps checkpoints or none that trains; "
        f"its {len(arrived)} nodes go"
    )
    return MoveEnd(False, tuple(s.instance_id for s in arrived), text)


def launchable(pool: NodePool, records: Mapping[str, NodeRecord], moving_to: str | None, plan_zone: str) -> list[Slot]:
    """The pool's usable nodes, less, while a move is under way, those of its new zone: they join at the
    switch, all at once (step 2 of the module docstring)."""
    usable = pool.usable()
    if moving_to is None:
        return usable
    return [s for s in usable if zone_of(s, records, plan_zone) != moving_to]
