"""The job's nodes as the controller works with them: the node pool says what each node is and what must
be done (training.control.nodepool), and this is where it is done, in one place: checks and preparing
through the session, retiring through the cluster, buying through Replacements.

Each method records what it found in the pool first (observe), then carries out the pool's step (act);
all of it on the controller's thread. ClusterHandle is what the controller and this module ask of the
cluster: provisioning's Cluster is one, a test's fake another (tests/training/test_controller.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Sequence
from typing import Protocol

from provisioning.cloud.keys import ClusterKeys
from provisioning.cloud.ssh import Answer
from provisioning.cloud.types import NodeRecord, SshEndpoint
from provisioning.clusters.cost import ClusterCost
from provisioning.core.errors import DeepvmError
from provisioning.planner.plan import Plan, Role
from training.control.nodepool import Buy, NodePool, NodeStatus, Retire, Slot
from training.control.replacements import NodeBuyer, Note, ReplacementReady, Replacements
from training.control.session import AttemptSession, NodeCheck
from training.control.staging import NodeState
from training.shared.events import NoticeKind
from training.shared.progress import JobReporter

# why a node that a check did not log in to is dropped (one with a host key not pinned is not the node launched)
_UNUSABLE = {Answer.NO: "does not answer over SSH", Answer.NOT_PINNED: "answers with a host key not pinned for it"}


class ClusterHandle(Protocol):
    """What the controller asks of its cluster."""

    @property
    def name(self) -> str: ...

    @property
    def plan(self) -> Plan: ...

    @property
    def keys(self) -> ClusterKeys: ...

    def endpoints(self) -> list[SshEndpoint]:
        """How to log in to each running node (as the cluster's store has them)."""
        ...

    def nodes(self) -> list[NodeRecord]: ...

    def refresh(self) -> bool:
        """Node states from the cloud now."""
        ...

    def cost(self) -> ClusterCost: ...

    def event(self, kind: str, message: str) -> None: ...

    def retire(self, instance_ids: list[str], why: str) -> None:
        """Terminate nodes through the cloud (harmless twice)."""
        ...

    def node_env(self) -> dict[str, str]: ...


class ClusterNodes:
    """The pool of one job's nodes, and the hands that act on it (see the module docstring)."""

    def __init__(self, cluster: ClusterHandle, pool: NodePool, session: AttemptSession, buyer: NodeBuyer,
                 report: JobReporter, event: Callable[[str, str], None]) -> None:  # fmt: skip
        self.cluster, self.pool, self.session, self.report, self._event = cluster, pool, session, report, event
        self.replacements = Replacements(buyer, self._stage_replacement, session.post)

    def ready_for_launch(self) -> list[Slot]:
        """Sync with the cluster; check the nodes that have not answered since the last attempt ended (one
        that does not answer died meanwhile: it is retired), prepare the new ones (a notice found keeps a
        node out, and trainers are bought back); the usable nodes."""
        self.pool.sync(self.cluster.endpoints())
        noticed = 0
        if stale := self.pool.stale():
            checks, noticed = self._check([s.endpoint for s in stale], "unreachable over SSH")
            for instance_id, check in checks.items():
                if check.answer is not Answer.YES:
                    self.report.note(f"{instance_id} {_UNUSABLE[check.answer]}: not using it")
        if fresh := self.pool.with_status({NodeStatus.NEW}):
            self.report.note(f"preparing {len(fresh)} node(s): push runtime and job, setup, checks")
            noticed += self.prepared(self.session.prepare([s.endpoint for s in fresh]))
        self.act(top_up=(Role.TRAINER,) if noticed else ())
        return self.pool.usable()

    def after_failure(self, instance_ids: Sequence[str]) -> tuple[str, ...]:
        """Check the failed attempt's nodes; the dead ones (no answer) are lost, retired and reported."""
        checks, _ = self._check([self.pool.slots[i].endpoint for i in instance_ids],
                                "unreachable over SSH after the job failed")  # fmt: skip
        dead = tuple(i for i, check in checks.items() if check.answer is not Answer.YES)
        if dead:
            text = f"lost without notice: {', '.join(dead)}; restarting from the newest complete checkpoint"
            self.report.note(text)
            self._event("node-lost", text)
        self.act()  # retired before the cluster is read again, which then sees them go
        return dead

    def prepared(self, states: dict[str, NodeState]) -> int:
        """Record what preparing nodes found; how many had an interruption notice."""
        noticed = 0
        for instance_id, state in states.items():
            kind = state.notice.kind if state.notice is not None else None
            out = self.pool.prepared(instance_id, state.home, kind, time.monotonic())
            if kind is not None:
                noticed += self._said(instance_id, out)
        return noticed

    def noticed(self, instance_id: str, name: str, kind: NoticeKind) -> bool:
        """A watcher's notice during an attempt: True when it takes the node out (the caller recovers). A
        rebalance recommendation changes nothing but the node's checkpoint (training.control.attempts says
        why): it is said once per node."""
        said = self.pool.slots[instance_id].recommended
        if self.pool.noticed(instance_id, kind):
            return True
        if self.pool.slots[instance_id].recommended and not said:
            text = (f"rebalance recommendation on {name}: it trains on, and its trainers checkpoint now; an "
                    "interruption notice would still stop it cleanly")  # fmt: skip
            self.report.note(text)
            self._event("rebalance", text)
        return False

    def replacement_ready(self, done: ReplacementReady) -> list[str]:
        """A replacement order ended: its nodes join the pool (those bought for nothing are retired); the
        ids of those ready to train."""
        self.pool.order_settled(done.role, done.requested)
        if done.error is not None:
            self.report.note(f"no replacement node: {done.error}; continuing with what is left")
            for instance_id in done.stranded:
                self.pool.lost(instance_id, f"replacement failed: {done.error}")
            self.act()
            return []
        self._event("replacement", f"{', '.join(e.instance_id for e in done.added)} ready")
        self.pool.bought(done.added)  # known already, unless its buyer posted nothing when it bought
        self.prepared(done.states)
        return [e.instance_id for e in done.added if self.pool.slots[e.instance_id].status is NodeStatus.READY]

    def act(self, top_up: Collection[Role] = ()) -> None:
        """Do what the pool's step asks: retire what bills for nothing, buy what `top_up`'s roles lack
        (counted against the cluster's running nodes as they are now)."""
        if top_up:
            self.pool.sync(self.cluster.endpoints())
        for action in self.pool.step(top_up):
            if isinstance(action, Retire):
                self._retire(action.instance_ids, action.why)
                self.pool.retired(action.instance_ids)
            elif isinstance(action, Buy):
                self.report.note(f"requesting {action.count} replacement {action.role.value} node(s) within the plan")
                self.replacements.start(action.role, action.count)

    def _check(self, endpoints: list[SshEndpoint], why_lost: str) -> tuple[dict[str, NodeCheck], int]:
        """Check nodes and record what was found (a node that does not answer is lost, `why_lost`); the
        checks, and how many had a notice."""
        checks, noticed = self.session.check(endpoints), 0
        for instance_id, check in checks.items():
            if check.answer is not Answer.YES:
                self.pool.lost(instance_id, why_lost)
            elif check.notice is not None and self.pool.noticed(instance_id, check.notice.kind):
                noticed += self._said(instance_id, out=True)
            else:
                if check.notice is not None:
                    self._said(instance_id, out=False)
                self.pool.answered([instance_id], time.monotonic())
        return checks, noticed

    def _said(self, instance_id: str, out: bool) -> int:
        """Say what a notice found before a launch does to the node; 1 when it takes the node out."""
        self.report.note(f"{instance_id} has an interruption notice: not using it" if out else
                         f"{instance_id} has a rebalance recommendation: training on it")  # fmt: skip
        return int(out)

    def _retire(self, instance_ids: Sequence[str], why: str) -> None:
        """Terminate nodes the job dropped without the cloud taking them (they hang, or lost their network):
        they would bill until `deepvm down` while their replacements bill too."""
        try:
            self.cluster.retire(list(instance_ids), why)
        except DeepvmError as exc:
            self.report.note(f"could not terminate {', '.join(instance_ids)} ({exc}); `deepvm down` will")
            return
        self.report.note(f"terminated {', '.join(instance_ids)}: {why}")

    def _stage_replacement(self, nodes: list[SshEndpoint], note: Note) -> dict[str, NodeState]:
        return self.session.prepare(nodes, lambda p: None, lambda line: note(f"[{line.host}] {line.text}"))
