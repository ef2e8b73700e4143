"""The nodes one job may train on: one slot per instance, each in one state (NodeStatus), moved only along
the edges of TRANSITIONS.

Why one place: a node's life (prepared, in use, noticed, dead, bought as a replacement, terminated) used to
be spread over five fields of the controller; what a node may become next was nowhere written down, and
a node could be dropped without anyone owning its bill (a node excluded after a rebalance recommendation
ran on unused). Here every node the job knows is in exactly one state, and the states that bill without
training (LOST, DRAINING) have one way out: retired. A rebalance recommendation moves no node: it keeps
training (training.control.attempts says why), and the pool only remembers it (`Slot.recommended`).

How it is driven (observe, then act, as Ray autoscaler v2's reconciler is; on the controller's thread only):
1) the controller records what it saw, and nothing else happens: `sync` (the cluster's running nodes),
   `prepared` (staging found the node's home, and maybe a notice), `answered` / `lost` (a probe,
   or a clean end of an attempt the node ran in), `noticed` (a watcher's notice),
   `bought` (a replacement thread's news), `launched` / `attempt_ended` (which nodes run the attempt),
   `let_go` (the recovery ladder gave the node up), `retired` (what step asked for was done);
2) `step()` says what to do now, as typed actions: `Retire` nodes that bill for nothing (lost, or
   drained and out of every attempt);
3) the controller carries the actions out (Cluster.retire) and reports back (1).
What to buy is not the pool's: the recovery ladder decides it from the nodes the pool holds
(training.control.market).

Whether a node is in the running attempt is the attempt's fact, not a stage of the node's life: a node
at risk trains in it as a ready one does, so the pool keeps the attempt's members beside the states
(`launched`) instead of doubling every usable state with an "in use" twin.

What later work needs is in the table already (a unit test walks every edge):
- a node at risk that keeps training until it is replaced: READY -> AT_RISK; the ladder buys a replacement
  for it (it does not count as held); once its role is whole without it, AT_RISK -> DRAINING; the next
  launch leaves it out and it is retired. If an interruption notice comes first, AT_RISK -> NOTICED.
- a node the recovery ladder gives up (an on-demand stand-in once its Spot replacement trains, a Spot
  trainer that makes room under the fallback's cap): READY -> AT_RISK -> DRAINING at once (`let_go`),
  then RETIRED, as above.
- a cluster moving to another zone: the new zone's nodes are bought (the ladder's orders carry a zone) and
  wait READY while the old zone's train on; at the switch every usable node of the old zone is let go
  (READY -> AT_RISK -> DRAINING), so the next launch, on the new zone's, is the move's one relaunch
  (training/control/move.py).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from enum import Enum

from provisioning.cloud.types import SshEndpoint
from provisioning.planner.plan import Role
from training.control.attempts import leaves_the_job
from training.shared.events import NoticeKind

HOLDING = (Role.HOLDER, Role.ANCHOR)  # plan roles whose nodes keep the checkpoints
TRAINING = (Role.TRAINER, Role.ANCHOR)  # plan roles whose nodes train


class NodeStatus(str, Enum):
    """Where a node is in its life with this job."""

    NEW = "new"  # a node of the cluster this job has not prepared yet (its first launch; a restarted controller)
    BOUGHT = "bought"  # bought for this job; its buying thread is preparing it
    READY = "ready"  # prepared (runtime, job, setup, checks): a launch may use it
    AT_RISK = "at-risk"  # usable, but to be replaced and then retired (see the module docstring)
    DRAINING = "draining"  # its role is whole without it: no launch uses it again; retired once no attempt runs on it
    NOTICED = "noticed"  # an interruption notice (not a recommendation): never used again; the cloud takes it
    LOST = "lost"  # it did not answer (dead, hung, a host key not pinned) or its preparing failed: to be retired
    RETIRED = "retired"  # terminated by the controller (final)
    GONE = "gone"  # the cloud no longer runs it (final)

    def __str__(self) -> str:
        return self.value


S = NodeStatus
# Every move a node may make, and why. Any other is a bug: NodePool raises InvalidTransition.
TRANSITIONS: dict[NodeStatus, frozenset[NodeStatus]] = {
    S.NEW: frozenset(
        {
            S.READY,  # prepared for this job before its launch
            S.NOTICED,  # preparing it found an interruption notice already posted
            S.GONE,  # the cloud stopped running it before the job used it
        }
    ),
    S.BOUGHT: frozenset(
        {
            S.READY,  # its buying thread prepared it
            S.NOTICED,  # preparing it found a notice: bought for nothing, and the cloud takes it
            S.LOST,  # preparing it failed: it would bill for nothing, so it is retired
            S.GONE,  # the cloud stopped running it while it was prepared
        }
    ),
    S.READY: frozenset(
        {
            S.NOTICED,  # its watcher saw a notice during an attempt, or one was read before a launch
            S.LOST,  # it did not answer after a failed attempt, or before a launch
            S.AT_RISK,  # a stand-in whose Spot is back; a node of the zone left behind
            S.GONE,  # the cloud stopped running it (seen when the cluster is read again)
        }
    ),
    S.AT_RISK: frozenset(
        {
            S.READY,  # the risk passed (a move called off): it counts as firm again
            S.DRAINING,  # its role is whole without it: the replacement is ready
            S.NOTICED,  # the interruption came before the replacement
            S.LOST,  # it died before the replacement came
            S.GONE,  # the cloud stopped running it
        }
    ),
    S.DRAINING: frozenset(
        {
            S.RETIRED,  # no attempt runs on it any more: terminated
            S.NOTICED,  # the cloud takes it anyway: no need to terminate it
            S.LOST,  # it died while draining: retired as the dead are
            S.GONE,  # the cloud stopped running it
        }
    ),
    S.NOTICED: frozenset(
        {
            S.GONE,  # the cloud took it at the notice's deadline
        }
    ),
    S.LOST: frozenset(
        {
            S.RETIRED,  # terminated through the cloud, so it stops billing
            S.GONE,  # the cloud stopped running it before we did
        }
    ),
    S.RETIRED: frozenset(),
    S.GONE: frozenset(),
}
del S

USABLE = frozenset({NodeStatus.READY, NodeStatus.AT_RISK})  # a launch may run on these
FIRM = frozenset({NodeStatus.NEW, NodeStatus.READY})  # count towards the plan's nodes of their role
FINAL = frozenset(s for s, moves in TRANSITIONS.items() if not moves)
OUT = frozenset({NodeStatus.DRAINING, NodeStatus.NOTICED, NodeStatus.LOST, *FINAL})  # no launch uses these again


class InvalidTransition(RuntimeError):
    """A move the table does not allow: a bug in the controller, never a cloud's doing."""


def check_move(start: NodeStatus, to: NodeStatus) -> None:
    """Raise InvalidTransition unless TRANSITIONS lets a node in `start` become `to`."""
    if to not in TRANSITIONS[start]:
        raise InvalidTransition(f"{start} -> {to} is not a move a node makes")


@dataclass
class Slot:
    """One instance and what the job knows of it."""

    endpoint: SshEndpoint  # how to log in to it, its role and market (as the cluster last said)
    status: NodeStatus
    why: str = ""  # why it is in its status, for notes and the cluster's event log
    home: str | None = None  # the login user's home, once prepared
    answered_at: float | None = None  # when it last answered: prepared, probed, or ran an attempt to a clean end
    recommended: bool = False  # EC2 posted a rebalance recommendation for it: it trains on (see the docstring)
    interrupted: bool = False  # an interruption notice named it (kept once it is gone: it went with notice)

    @property
    def instance_id(self) -> str:
        return self.endpoint.instance_id

    @property
    def role(self) -> Role:
        return self.endpoint.role


@dataclass(frozen=True)
class Retire:
    """Terminate these nodes through the cloud: they bill for nothing."""

    instance_ids: tuple[str, ...]
    why: str


class NodePool:
    """The slots of one job's nodes (see the module docstring)."""

    def __init__(self, planned: Mapping[Role, int], endpoints: Iterable[SshEndpoint]) -> None:
        self.planned = Counter(planned)  # nodes per role in the plan: an at-risk node drains once its role has them
        self.slots: dict[str, Slot] = {e.instance_id: Slot(e, NodeStatus.NEW) for e in endpoints}
        self.running: frozenset[str] = frozenset()  # the running attempt's nodes (empty between attempts)
        self.last_launch: float | None = None  # when the newest attempt was launched (None: none was yet)

    # --- 1) observations: they only record ------------------------------------------------------------
    def sync(self, endpoints: Iterable[SshEndpoint]) -> None:
        """The cluster's running nodes now: a slot among them takes its newest endpoint (pinned keys,
        addresses); one no longer running is GONE. Nodes the job never had are not taken in."""
        running = {e.instance_id: e for e in endpoints}
        self.slots = {**{i: self.slots[i] for i in running if i in self.slots}, **self.slots}  # the cluster's order
        for slot in self.slots.values():
            if slot.status in FINAL:
                continue
            if slot.instance_id in running:
                slot.endpoint = running[slot.instance_id]
            else:
                self._move(slot, NodeStatus.GONE, "no longer running")

    def prepared(self, instance_id: str, home: str, notice_kind: NoticeKind | None, at: float) -> bool:
        """Preparing the node found its home, and the kind of notice posted to it, if any; True when that
        notice keeps it out (a recommendation alone leaves it usable)."""
        slot = self.slots[instance_id]
        slot.home = home
        if notice_kind is not None and self.noticed(instance_id, notice_kind):
            return True
        slot.answered_at = at
        if slot.status is not NodeStatus.READY:
            self._move(slot, NodeStatus.READY)
        return False

    def answered(self, instance_ids: Iterable[str], at: float) -> None:
        """The nodes answered at `at` (a probe, or an attempt they ran to a clean end), no notice seen."""
        for instance_id in instance_ids:
            slot = self.slots[instance_id]
            if slot.status in USABLE:
                slot.answered_at = at

    def lost(self, instance_id: str, why: str) -> None:
        """The node is of no use and may still bill (it did not answer; preparing it failed): the next step
        retires it, `why` saying why."""
        slot = self.slots[instance_id]
        if slot.status not in (NodeStatus.LOST, NodeStatus.NOTICED, *FINAL):
            self._move(slot, NodeStatus.LOST, why)

    def noticed(self, instance_id: str, kind: NoticeKind) -> bool:
        """A Spot notice of `kind` on the node: True when it takes the node out of use now. False for a
        rebalance recommendation (only remembered: the node trains on), and for a node out of use already."""
        slot = self.slots[instance_id]
        if not leaves_the_job(kind):
            slot.recommended = True
            return False
        if NodeStatus.NOTICED not in TRANSITIONS[slot.status]:  # noticed, lost or gone before
            return False
        self._move(slot, NodeStatus.NOTICED, f"interruption notice ({kind})")
        slot.interrupted = True
        return True

    def at_risk(self, instance_id: str, why: str) -> None:
        """The node is to be replaced and then retired, training until then (see the module docstring)."""
        self._move(self.slots[instance_id], NodeStatus.AT_RISK, why)

    def let_go(self, instance_id: str, why: str) -> None:
        """The recovery ladder gave the (usable) node up: no launch uses it again, and it is retired once no
        attempt runs on it."""
        slot = self.slots[instance_id]
        if slot.status is NodeStatus.READY:
            self._move(slot, NodeStatus.AT_RISK, why)
        self._move(slot, NodeStatus.DRAINING, why)

    def bought(self, endpoints: Iterable[SshEndpoint]) -> None:
        """A replacement thread bought these nodes and prepares them now."""
        for e in endpoints:
            self.slots.setdefault(e.instance_id, Slot(e, NodeStatus.BOUGHT))

    def launched(self, instance_ids: Iterable[str], at: float) -> None:
        """An attempt runs on these nodes since `at`."""
        self.running, self.last_launch = frozenset(instance_ids), at

    def attempt_ended(self, clean: bool, at: float) -> None:
        """The running attempt ended at `at`; `clean`: mpirun exited 0, so every node of it answered."""
        if clean:
            self.answered(self.running, at)
        self.running = frozenset()

    def retired(self, instance_ids: Iterable[str]) -> None:
        """What a Retire asked for was done (or tried: a failure is reported, and `down` ends the node)."""
        for instance_id in instance_ids:
            slot = self.slots[instance_id]
            if slot.status not in FINAL:
                self._move(slot, NodeStatus.RETIRED, slot.why)

    # --- 2) decisions ----------------------------------------------------------------------------------
    def step(self) -> list[Retire]:
        """What to do now: drain what is replaced, retire what bills for nothing."""
        self._drain()
        return [Retire(ids, why) for why, ids in self._to_retire().items()]

    def _drain(self) -> None:
        """AT_RISK nodes that their role no longer needs to be whole (its firm nodes and the others at risk
        make the plan's count without them) start draining, oldest first."""
        for role in {s.role for s in self.slots.values() if s.status is NodeStatus.AT_RISK}:
            at_risk = self.of(role, {NodeStatus.AT_RISK})
            spare = len(self.of(role, FIRM)) + len(at_risk) - self.planned[role]
            for slot in at_risk[: max(0, spare)]:
                self._move(slot, NodeStatus.DRAINING, slot.why)

    def _to_retire(self) -> dict[str, tuple[str, ...]]:
        """{why: nodes}: the lost, and the drained that no attempt runs on."""
        found: dict[str, list[str]] = {}
        for slot in self.slots.values():
            draining = slot.status is NodeStatus.DRAINING and slot.instance_id not in self.running
            if slot.status is NodeStatus.LOST or draining:
                found.setdefault(slot.why, []).append(slot.instance_id)
        return {why: tuple(ids) for why, ids in found.items()}

    # --- what a launch sees -------------------------------------------------------------------------------
    def of(self, role: Role, statuses: Collection[NodeStatus]) -> list[Slot]:
        return [s for s in self.slots.values() if s.role is role and s.status in statuses]

    def with_status(self, statuses: Collection[NodeStatus]) -> list[Slot]:
        return [s for s in self.slots.values() if s.status in statuses]

    def usable(self) -> list[Slot]:
        """The nodes a launch may run on, in the order the pool learnt of them."""
        return self.with_status(USABLE)

    def stale(self) -> list[Slot]:
        """Usable nodes that have not answered since the newest attempt was launched: ask them before the
        next launch. Not asked again: a node that ran that attempt to its clean end, answered a probe
        after it failed, or was prepared while it ran (a replacement folded in)."""
        if self.last_launch is None:
            return []
        return [s for s in self.usable() if s.answered_at is None or s.answered_at < self.last_launch]

    def joinable(self) -> list[Slot]:
        """Ready nodes that the running attempt does not have: a fold-in would add them."""
        return [s for s in self.with_status({NodeStatus.READY}) if s.instance_id not in self.running]

    def excluded(self) -> dict[str, str]:
        """{instance id: why} of the nodes no launch uses again, for a message that names them."""
        return {s.instance_id: s.why or str(s.status) for s in self.with_status(OUT)}

    def _move(self, slot: Slot, to: NodeStatus, why: str = "") -> None:
        check_move(slot.status, to)
        slot.status, slot.why = to, why
