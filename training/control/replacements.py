"""Replacement nodes: buying a cluster's lost nodes back, in the background, while the job trains on.

The controller's node pool decides *how many* of a role to buy (training.control.nodepool: the plan's
count, less the firm nodes and those on their way) and the controller *what* a ready node means for the
running attempt (fold it in now or at the next launch: training.control.attempts). This module does the
buying in between:

1. `Replacements.start(role, count)` starts one thread for the order;
2. that thread buys the nodes with the cluster's own launch template (`NodeBuyer`; `cloud_buyer` asks
   the cluster's handle) and posts `ReplacementBought` with them, then stages them (push, setup, checks:
   `NodeStager`), so the next launch can use them at once. Purchases take turns: buying holds the
   cluster's lock (one command changing a cluster at a time), so a second loss while a replacement is
   being bought waits for that purchase instead of failing on the lock and leaving the cluster short;
3. it posts `ReplacementNote`s while it works and one `ReplacementReady` at the end, with the nodes it
   added or why there are none (and which nodes it bought for nothing, for the controller to retire).

Threads only post: every decision and every change of the controller's state stays on its main thread.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from provisioning.cloud.progress import Reporter
from provisioning.cloud.types import SshEndpoint
from provisioning.clusters.handle import Cluster
from provisioning.core.errors import DeepvmError
from provisioning.planner.plan import Role
from training.control.staging import NodeState

Note = Callable[[str], None]


class NodeBuyer(Protocol):
    def __call__(self, role: Role, count: int, note: Note, instance_type: str | None = None) -> list[SshEndpoint]:
        """Buy `count` nodes of `role` like the plan's (of `instance_type`, the type that was lost, in a plan
        of several); return them once they answer over SSH (a DeepvmError says why not)."""
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

    role: Role
    added: tuple[SshEndpoint, ...]


@dataclass(frozen=True)
class ReplacementReady:
    """The end of one request: the nodes bought and prepared, or why there are none."""

    role: Role
    requested: int
    added: tuple[SshEndpoint, ...]
    states: dict[str, NodeState]  # instance id -> what preparing it found
    error: str | None  # None: bought and prepared
    stranded: tuple[str, ...] = ()  # with an error: nodes bought but not prepared, for the controller to retire


class Replacements:
    """The replacement orders of one job, each bought and staged by a thread of its own."""

    def __init__(self, buy: NodeBuyer, stage: NodeStager, post: Callable[[object], None]) -> None:
        self._buy, self._stage, self._post = buy, stage, post
        self._threads: list[threading.Thread] = []
        self._buying = threading.Lock()  # one purchase at a time (each holds the cluster's lock)

    def start(self, role: Role, count: int) -> None:
        """Buy and stage `count` nodes of `role` in the background; the news comes on the queue."""
        thread = threading.Thread(target=self._work, args=(role, count), name=f"replace-{role.value}", daemon=True)
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

    def _work(self, role: Role, count: int) -> None:
        def note(text: str) -> None:
            self._post(ReplacementNote(text))

        added: list[SshEndpoint] = []
        try:
            with self._buying:
                added = self._buy(role, count, note)
            self._post(ReplacementBought(role, tuple(added)))
            states = self._stage(added, note)
        except Exception as exc:  # anything left unanswered here would keep the controller waiting forever
            why = str(exc) if isinstance(exc, DeepvmError) else f"{type(exc).__name__}: {exc}"
            self._post(ReplacementReady(role, count, (), {}, why, tuple(e.instance_id for e in added)))
            return
        self._post(ReplacementReady(role, count, tuple(added), states, None))


def cloud_buyer(cluster: Cluster, inside_cluster: bool) -> NodeBuyer:
    """Buy from the cluster's cloud, with its launch template, recorded in its store (Cluster.add_nodes).
    `inside_cluster`: the buyer runs on the cluster's head, which reaches nodes at private addresses."""

    def buy(role: Role, count: int, note: Note, instance_type: str | None = None) -> list[SshEndpoint]:
        added = cluster.add_nodes(role, count, Reporter(step=note), inside_cluster=inside_cluster,
                                  instance_type=instance_type)  # fmt: skip
        ids = {n.instance_id for n in added}
        return [e for e in cluster.endpoints() if e.instance_id in ids]

    return buy
