"""The job's nodes as the controller works with them: the node pool says what each node is and what must
be done (training.control.nodepool), the recovery ladder what to buy and give up (provisioning/ladder, told
the situation by training.control.market), and this is where it is done, in one place: checks and
preparing through the session, retiring through the cluster, buying through Replacements.

Each method records what it found in the pool first (observe), then carries out the pool's step and,
asked to, the ladder's decisions (act): orders bought in the background, nodes given up drained, the
reason of every decision said once in the job's log and kept in its row (`deepvm logs`, `status`); all of
it on the controller's thread. What it cannot do itself it hands back as a LadderStep: a budget's stop,
and the running attempt's nodes given up (a relaunch without them). ClusterHandle is what the controller
and this module ask of the cluster: provisioning's Cluster is one, a test's fake another
(tests/training/test_controller.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from provisioning.cloud.keys import ClusterKeys
from provisioning.cloud.ssh import Answer
from provisioning.cloud.types import NodeRecord, SshEndpoint
from provisioning.clusters.cost import ClusterCost
from provisioning.core.errors import DeepvmError
from provisioning.ladder.decision import Decision, Retire, Rung
from provisioning.ladder.ladder import decide
from provisioning.planner.plan import Plan
from training.control.jobrecord import JobState
from training.control.market import LiveMarket
from training.control.move import launchable, move_end
from training.control.nodepool import HOLDING, NodePool, NodeStatus, Slot
from training.control.replacements import NodeBuyer, Note, ReplacementBought, ReplacementReady, Replacements
from training.control.session import AttemptSession, NodeCheck
from training.control.staging import NodeState
from training.shared.checkpointplan import CheckpointPlan
from training.shared.events import NoticeKind
from training.shared.progress import JobReporter

_ACTS_IN_A_ROW = 8  # decisions that act, asked again at once: more is a ladder that does not settle (a bug)

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

    @property
    def zones(self) -> tuple[str, ...]:
        """Its own zone, then the region's others where its VPC has a subnet (where it may move)."""
        ...

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


@dataclass(frozen=True)
class Dead:
    """The nodes of a failed attempt that did not answer afterwards (ClusterNodes.after_failure)."""

    noticed: tuple[str, ...]  # an interruption notice had named them: they went as it said
    without_notice: tuple[str, ...]  # lost without a word (the cloud took them, they froze, lost their network)

    @property
    def all(self) -> tuple[str, ...]:
        return self.noticed + self.without_notice


@dataclass(frozen=True)
class LadderStep:
    """What the ladder's newest decisions leave to the controller."""

    stop: Decision | None  # STOP: the budget would be exceeded; the job stops after a checkpoint
    let_go: tuple[str, ...]  # nodes given up that the running attempt has: it relaunches without them


class ClusterNodes:
    """The pool of one job's nodes, and the hands that act on it (see the module docstring)."""

    def __init__(
        self,
        cluster: ClusterHandle,
        pool: NodePool,
        session: AttemptSession,
        buyer: NodeBuyer,
        report: JobReporter,
        event: Callable[[str, str], None],
        market: LiveMarket,
        job: Callable[[], JobState],
        said: Callable[[str], None],
        replace_nodes: bool = True,
    ) -> None:
        self.cluster, self.pool, self.session, self.report, self._event = cluster, pool, session, report, event
        self.market, self._job, self._ladder_said, self.replace_nodes = market, job, said, replace_nodes
        self.replacements = Replacements(buyer, self._stage_replacement, session.post)
        self.last: Decision | None = None  # the newest decision said
        self._waiting: str | None = None  # what the job waits for between attempts, as last said

    def ready_for_launch(self) -> None:
        """Sync with the cluster; check the nodes that have not answered since the last attempt ended (one
        that does not answer died meanwhile: it is retired), prepare the new ones (a notice found keeps a
        node out); the controller then asks the ladder (act) and launches on the pool's usable nodes."""
        self.pool.sync(self.cluster.endpoints())
        if stale := self.pool.stale():
            checks = self._check([s.endpoint for s in stale], "unreachable over SSH")
            for instance_id, check in checks.items():
                if check.answer is not Answer.YES:
                    self.report.note(f"{instance_id} {_UNUSABLE[check.answer]}: not using it")
        if fresh := self.pool.with_status({NodeStatus.NEW}):
            self.report.note(f"preparing {len(fresh)} node(s): push runtime and job, setup, checks")
            self.prepared(self.session.prepare([s.endpoint for s in fresh]))
        self.act()

    def after_failure(self, instance_ids: Sequence[str]) -> Dead:
        """Check the failed attempt's nodes; the dead ones (no answer) are lost, retired and reported: as lost
        without notice only those no interruption notice had named. One it had named went as it said, before the
        attempt could end cleanly (a launched script's stop and flush outlasting the notice, say): that is the
        notice's interruption, already said and counted ("notice"), not a second one."""
        checks = self._check(
            [self.pool.slots[i].endpoint for i in instance_ids], "unreachable over SSH after the job failed"
        )
        dead = [i for i, check in checks.items() if check.answer is not Answer.YES]
        found = Dead(
            noticed=tuple(i for i in dead if self.pool.slots[i].interrupted),
            without_notice=tuple(i for i in dead if not self.pool.slots[i].interrupted),
        )
        if found.without_notice:
            text = (
                f"lost without notice: {', '.join(found.without_notice)}; restarting from the newest complete "
                "checkpoint"
            )
            self.report.note(text)
            self._event("node-lost", text)
        if found.noticed:
            self.report.note(
                f"{', '.join(found.noticed)} went as its interruption notice said, before the attempt "
                "ended cleanly; restarting from the newest complete checkpoint"
            )
        self.act()  # retired before the cluster is read again, which then sees them go
        return found

    def prepared(self, states: dict[str, NodeState]) -> None:
        """Record what preparing nodes found (a notice found: `_notice_found` says what it does to the node)."""
        for instance_id, state in states.items():
            kind = state.notice.kind if state.notice is not None else None
            out = self.pool.prepared(instance_id, state.home, kind, time.monotonic())
            if kind is not None:
                self._notice_found(instance_id, out)

    def bought(self, news: ReplacementBought) -> None:
        """An order's thread bought its nodes (it prepares them now)."""
        self.pool.bought(news.added)
        self.market.bought(news.order)

    def noticed(self, instance_id: str, name: str, kind: NoticeKind) -> bool:
        """A watcher's notice during an attempt: True when it takes the node out (the caller recovers). A
        rebalance recommendation changes nothing but the node's checkpoint (training.control.attempts says
        why): it is said once per node."""
        said = self.pool.slots[instance_id].recommended
        if self.pool.noticed(instance_id, kind):
            return True
        if self.pool.slots[instance_id].recommended and not said:
            text = (
                f"rebalance recommendation on {name}: it trains on, and its trainers checkpoint now; an "
                "interruption notice would still stop it cleanly"
            )
            self.report.note(text)
            self._event("rebalance", text)
        return False

    def replacement_ready(self, done: ReplacementReady) -> list[str]:
        """An order ended: its nodes join the pool (those bought for nothing are retired), its pool's refusals
        are counted, and the stand-ins it was bought to relieve go, one per node ready; the ids of the nodes
        ready to train."""
        ready: list[str] = []
        if done.error is not None:
            self.report.note(f"no replacement node: {done.error}")
            for instance_id in done.stranded:
                self.pool.lost(instance_id, f"replacement failed: {done.error}")
        else:
            self._event("replacement", f"{', '.join(e.instance_id for e in done.added)} ready")
            self.pool.bought(done.added)  # known already, unless its buyer posted nothing when it bought
            self.prepared(done.states)
            ready = [e.instance_id for e in done.added if self.pool.slots[e.instance_id].status is NodeStatus.READY]
        # the pool refused: EC2 had no capacity, or gave fewer than asked; not an API or preparation failure
        refused = done.shortage or (done.error is None and len(done.added) < done.order.count)
        stand_ins, going = self.market.settled(done.order, len(ready), done.error is not None or refused, refused)
        if going:
            records = {r.instance_id: r for r in self.cluster.nodes()}
            for instance_id in self.market.stand_ins(self.pool.slots.values(), records, stand_ins)[:going]:
                self.pool.let_go(instance_id, f"Spot is back: its replacement {', '.join(ready)} trains")
        return ready

    def act(self, ask: bool = False) -> LadderStep:
        """Retire what bills for nothing; with `ask`, ask the recovery ladder (again at once while it acts)
        and carry its decisions out: what is left to the controller comes back."""
        let_go: list[str] = []
        if ask:
            self.pool.sync(self.cluster.endpoints())
            if self.market.move_settled():
                let_go += self._switch()
        for _ in range(_ACTS_IN_A_ROW if ask else 0):
            records = {r.instance_id: r for r in self.cluster.nodes()}
            job = self._job()
            decision = decide(self.market.situation(self.pool.slots.values(), records, job.steps_left, job.spent_usd))
            self.market.decided(decision)
            self._say(decision)
            if decision.rung is Rung.STOP:
                return LadderStep(decision, ())
            if not decision.rung.acts or not self.replace_nodes:
                break
            if decision.orders and (cooling := self.market.cloud_cooling_s()) is not None:
                self.market.wake_in(cooling)  # the cloud failed, not a pool: the same order, later
                self.report.note(
                    f"the cloud failed the last order (not for capacity): ordering again in {cooling:.0f}s"
                )
                break
            for order in decision.orders:
                bought = self.market.node_order(order)
                self.market.ordered(order, bought, decision.move_to)
                self.report.note(f"buying {bought.describe()} ({decision.rung.value})")
                self.replacements.start(bought)
            for retire in decision.retire:
                let_go += self._let_go(retire, records, decision)
        for retire in self.pool.step():
            self._retire(retire.instance_ids, retire.why)
            self.pool.retired(retire.instance_ids)
        return LadderStep(None, tuple(i for i in let_go if i in self.pool.running))

    def launchable(self) -> list[Slot]:
        """The nodes the next launch runs on: the usable ones, less a move's new zone until its switch."""
        records = {r.instance_id: r for r in self.cluster.nodes()}
        return launchable(self.pool, records, self.market.moving_to, self.market.plan_zone)

    def nothing_coming(self) -> str | None:
        """Why no node can come (nothing on its way and no next try of the ladder), or None: one can."""
        if self.market.on_their_way() or self.market.wait_s() is not None:
            return None
        return self.last.reason.text if self.last is not None and self.replace_nodes else "--no-replace"

    def waiting(self, text: str | None) -> None:
        """Say what the job waits for between attempts, once per wait (not once per try of the ladder);
        None: the wait is over."""
        if text is not None and text != self._waiting:
            self.report.note(text)
        self._waiting = text

    def checkpoints_lost(self, plan: CheckpointPlan) -> str | None:
        """Why the job's checkpoints are gone (no holder is usable, and they were not in S3), or None."""
        if any(s.role in HOLDING for s in self.pool.usable()) or plan.outlives_holders:
            return None
        return (
            "no checkpoint holder (on-demand node) of the cluster is reachable, and the checkpoints live "
            f"there; the job's state is lost unless it had L3 (S3). Nodes: {self.pool.excluded()}"
        )

    def release_stand_ins(self) -> None:
        """Give up every stand-in that no attempt runs on (they were bought for the job's deadline; the job is
        over or stopped) and retire them now."""
        records = {r.instance_id: r for r in self.cluster.nodes()}
        for instance_id in self.market.stand_ins(self.pool.slots.values(), records):
            if instance_id not in self.pool.running:
                self.pool.let_go(instance_id, "the job's deadline no longer needs it")
        self.act()

    def call_off_move(self) -> None:
        """The job is over while a move is under way: there is nothing left to move (training.control.move), so
        the move is called off and the nodes it bought in its zone are retired, whether or not they reached the
        pool: none of them bills on past the job. Call it once the replacement threads have ended."""
        to = self.market.moving_to
        if to is None:
            return
        self.market.move_ended(False)
        alive = ("pending", "running")
        bought = [r.instance_id for r in self.cluster.nodes() if r.availability_zone == to and r.state in alive]
        text = f"move to {to} called off: the job is over; its {len(bought)} nodes go"
        self.report.note(f"ladder: {text}")
        self._event("ladder", text)
        if bought:
            self._retire(bought, text)

    def _let_go(self, retire: Retire, records: dict[str, NodeRecord], decision: Decision) -> list[str]:
        """Give up the nodes a Retire names (the spare stand-ins; Spot trainers making room under the
        fallback's cap): the next launch leaves them out and they are retired."""
        stand_ins = self.market.stand_ins(self.pool.slots.values(), records, retire.pool)
        if retire.stand_in:
            mine = stand_ins
        else:
            mine = [
                s.instance_id
                for s in self.pool.usable()
                if s.instance_id in records
                and s.role is retire.role
                and self.market.pool_of(records[s.instance_id]) == retire.pool
                and s.instance_id not in stand_ins
            ]
        for instance_id in mine[: retire.count]:
            self.pool.let_go(instance_id, f"{decision.rung.value}: {decision.reason.text}")
        return mine[: retire.count]

    def _switch(self) -> list[str]:
        """Every order of the move under way has ended: switch to its zone or call it off (training.control.move),
        letting the nodes that leave go; those the running attempt has (it relaunches without them)."""
        to = self.market.moving_to
        assert to is not None, "a settled move has a zone"
        records = {r.instance_id: r for r in self.cluster.nodes()}
        end = move_end(self.pool, records, to, self.market.plan_zone)
        self.market.move_ended(end.moved)
        for instance_id in end.leaving:
            self.pool.let_go(instance_id, end.text)
        self.report.note(f"ladder: {end.text}")
        self._ladder_said(end.text)
        self._event("ladder", end.text)
        return list(end.leaving)

    def _say(self, decision: Decision) -> None:
        """Each new decision's reason once: in the job's log (`deepvm logs`), its row (`status`), and, when it
        acts, the cluster's event log."""
        last, self.last = self.last, decision
        if last is not None and (last.rung, last.reason.text) == (decision.rung, decision.reason.text):
            return
        text = f"{decision.rung.value}: {decision.reason.text}"
        self.report.note(f"ladder: {text}")
        self._ladder_said(text)
        if decision.rung.acts or decision.rung is Rung.STOP:
            self._event("ladder", text)

    def _check(self, endpoints: list[SshEndpoint], why_lost: str) -> dict[str, NodeCheck]:
        """Check nodes and record what was found (a node that does not answer is lost, `why_lost`)."""
        checks = self.session.check(endpoints)
        for instance_id, check in checks.items():
            if check.answer is not Answer.YES:
                self.pool.lost(instance_id, why_lost)
            elif check.notice is not None and self.pool.noticed(instance_id, check.notice.kind):
                self._notice_found(instance_id, out=True)
            else:
                if check.notice is not None:
                    self._notice_found(instance_id, out=False)
                self.pool.answered([instance_id], time.monotonic())
        return checks

    def _notice_found(self, instance_id: str, out: bool) -> None:
        """Say what a notice found before a launch does to the node (`out`: it takes the node out)."""
        self.report.note(
            f"{instance_id} has an interruption notice: not using it"
            if out
            else f"{instance_id} has a rebalance recommendation: training on it"
        )

    def _retire(self, instance_ids: Sequence[str], why: str) -> None:
        """Terminate nodes the job dropped without the cloud taking them (they hang, or lost their network):
        they would bill until `deepvm down` while their replacements bill too. The head, which runs the
        controller, is not: a move leaves it behind as the control node (training.control.move)."""
        if self.market.head in instance_ids:
            self.report.note(
                f"{self.market.head} left the job: it runs on as the control node in its zone ({self.market.plan_zone})"
            )
            instance_ids = [i for i in instance_ids if i != self.market.head]
            if not instance_ids:
                return
        try:
            self.cluster.retire(list(instance_ids), why)
        except DeepvmError as exc:
            self.report.note(f"could not terminate {', '.join(instance_ids)} ({exc}); `deepvm down` will")
            return
        self.report.note(f"terminated {', '.join(instance_ids)}: {why}")

    def _stage_replacement(self, nodes: list[SshEndpoint], note: Note) -> dict[str, NodeState]:
        return self.session.prepare(nodes, lambda p: None, lambda line: note(f"[{line.host}] {line.text}"))
