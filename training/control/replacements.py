"""Replacement nodes: buying nodes for a job's cluster, in the background, while the job trains on.

The recovery ladder decides *what* to buy, from which pool (zone, type, market) and for which role
(training.control.market feeds it and turns its orders into NodeOrders), and the controller *what* a
ready node means for the running attempt (fold it in now or at the next launch: training.control.attempts).
This module does the buying in between:

1. `Replacements.start(order)` starts one thread for the order;
2. that thread buys the nodes with the cluster's own launch template (`NodeBuyer`; `cloud_buyer` asks
   the cluster's handle) and posts `ReplacementBought` with them, then stages them (push, setup, checks:
   `NodeStager`), so the next launch can use them at once. Purchases take turns: buying holds the
   cluster's lock (one command changing a cluster at a time), so a second loss while a replacement is
   being bought waits for that purchase instead of failing on the lock and leaving the cluster short;
3. it posts `ReplacementNote`s while it works and one `ReplacementReady` at the end, with the nodes it
   added (fewer than ordered when EC2 gave fewer) or why there are none (and which nodes it bought for
   nothing, for the controller to retire).

Threads only post: every decision and every change of the controller's state stays on its main thread.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from provisioning.cloud.progress import Reporter
from provisioning.cloud.types import ShortageError, SshEndpoint
from provisioning.clusters.handle import Cluster
from provisioning.core.errors import DeepvmError
from provisioning.planner.plan import NodeGroup, Role
from training.control.staging import NodeState

Note = Callable[[str], None]


@dataclass(frozen=True)
class NodeOrder:
    """One purchase: `group` (its count of one type in one market, for one role, at the offer's price; its GPUs
    and TFLOPS, for the launcher) in `zone`."""

    group: NodeGroup
    zone: str

    @property
    def role(self) -> Role:
        return self.group.role

    @property
    def count(self) -> int:
        return self.group.count

    def describe(self) -> str:
        """e.g. "2 spot g4dn.xlarge trainers in us-east-1a"."""
        g = self.group
        return f"{g.count} {g.market.value} {g.instance_type} {g.role.value}{'s' * (g.count > 1)} in {self.zone}"


class NodeBuyer(Protocol):
    def __call__(self, order: NodeOrder, note: Note) -> list[SshEndpoint]:
        """Buy the order's nodes; return them once they answer over SSH (fewer when the cloud gave fewer; a
        DeepvmError says why there are none)."""
        ...


class NodeStager(Protocol):
    def __call__(self, nodes: list[SshEndpoint], note: Note) -> dict[str, NodeState]:
        """Push the runtime and the job to fresh nodes and set them up; {instance id: what was found}."""
        ...


@dataclass(frozen=True)
class ReplacementNote:
    """A line of what a buying thread is doing, for the job's report."""

    text: str


@dataclass(frozen=True)
class ReplacementBought:
    """An order's nodes are bought (and answer over SSH); its thread prepares them now."""

    order: NodeOrder
    added: tuple[SshEndpoint, ...]


@dataclass(frozen=True)
class ReplacementReady:
    """The end of one request: the nodes bought and prepared, or why there are none."""

    order: NodeOrder
    added: tuple[SshEndpoint, ...]
    states: dict[str, NodeState]  # instance id -> what preparing it found
    error: str | None  # None: bought and prepared
    stranded: tuple[str, ...] = ()  # with an error: nodes bought but not prepared, for the controller to retire
    # with an error: EC2 had no capacity in the order's pool (ShortageError). Anything else (the API away,
    # credentials, a right, a node that would not prepare) says nothing of the pool, and the ladder must not
    # move to dearer pools for it
    shortage: bool = False


class Replacements:
    """The replacement orders of one job, each bought and staged by a thread of its own."""

    def __init__(self, buy: NodeBuyer, stage: NodeStager, post: Callable[[object], None]) -> None:
        self._buy, self._stage, self._post = buy, stage, post
        self._threads: list[threading.Thread] = []
        self._buying = threading.Lock()  # one purchase at a time (each holds the cluster's lock)

    def start(self, order: NodeOrder) -> None:
        """Buy and stage the order's nodes in the background; the news comes on the queue."""
        thread = threading.Thread(target=self._work, args=(order,), name=f"replace-{order.role.value}", daemon=True)
        self._threads.append(thread)
        thread.start()

    def busy(self) -> bool:
        """Whether an order is still being bought or staged."""
        return any(thread.is_alive() for thread in self._threads)

    def wait(self, timeout_s: float) -> None:
        """Wait for the requests still running (so that a node being bought is recorded and `down`
        finds it), at most `timeout_s` each."""
        for thread in self._threads:
            thread.join(timeout=timeout_s)

    def _work(self, order: NodeOrder) -> None:
        def note(text: str) -> None:
            self._post(ReplacementNote(text))

        added: list[SshEndpoint] = []
        try:
            with self._buying:
                added = self._buy(order, note)
            self._post(ReplacementBought(order, tuple(added)))
            states = self._stage(added, note)
        except Exception as exc:  # anything left unanswered here would keep the controller waiting forever
            why = str(exc) if isinstance(exc, DeepvmError) else f"{type(exc).__name__}: {exc}"
            stranded = tuple(e.instance_id for e in added)
            self._post(ReplacementReady(order, (), {}, why, stranded, shortage=isinstance(exc, ShortageError)))
            return
        self._post(ReplacementReady(order, tuple(added), states, None))


def cloud_buyer(cluster: Cluster, inside_cluster: bool) -> NodeBuyer:
    """Buy from the cluster's cloud, with its launch template, recorded in its store (Cluster.add_nodes).
    `inside_cluster`: the buyer runs on the cluster's head, which reaches nodes at private addresses."""

    def buy(order: NodeOrder, note: Note) -> list[SshEndpoint]:
        added = cluster.add_nodes(order.group, Reporter(step=note), inside_cluster=inside_cluster, zone=order.zone)
        ids = {n.instance_id for n in added}
        return [e for e in cluster.endpoints() if e.instance_id in ids]

    return buy
