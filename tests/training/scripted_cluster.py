"""A cluster in this process for the controller's tests: no SSH, no mpirun, no cloud.

Each fake stands in for one seam of training.control, and implements its Protocol:
- FakeCluster: ClusterHandle (the cluster's store and cloud: running nodes, retire, refresh, events, cost);
- FakeBuyer: NodeBuyer (an order is new nodes of the cluster, of its pool's type and market, as far as the
  pool's capacity goes, refused as EC2 refuses an empty pool; a gate holds it until a test opens it);
- ScriptedNodes: NodeAccess (preparing, probes, notices, the head, fetching outputs; every call recorded);
- ScriptedMpirun: Mpirun (a training job that steps, checkpoints every few steps into the cluster's shared
  checkpoint, honours a clean stop at its next step and a kill at once, and meets the faults a test
  scripts for an attempt at a step: a notice, a rebalance recommendation, nodes dying, a hang, a crash).

The ranks' events travel as the real ones do: JSON lines (training.shared.events.line) in RankLines on the
session's queue, read and parsed by the real AttemptSession.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from provisioning.catalog.model import Market
from provisioning.cloud.keys import ClusterKeys
from provisioning.cloud.ssh import Answer
from provisioning.cloud.types import HostSpec, NodeRecord, ShortageError, SshEndpoint
from provisioning.clusters.cost import ClusterCost
from provisioning.core.errors import CloudError
from provisioning.planner.plan import NodeGroup, Plan, Role
from tests.cloud.plans import make_tiering_plan
from training.control.launcher import AttemptExit, Launch, Node, RankLine
from training.control.replacements import NodeOrder
from training.control.staging import JobToStage, NodeState
from training.shared.events import (
    End,
    EndStatus,
    Event,
    Flush,
    Kept,
    KeptHow,
    Metrics,
    Notice,
    NoticeSeen,
    NotSafe,
    Restored,
    Resumed,
    Safe,
    Saved,
    Start,
    Step,
    line,
)
from training.shared.metrics import RunMetrics
from training.shared.scalars import MetricPoint
from training.shared.transport import OutputLine, PushProgress

STEP_S = 0.002  # a training step of the scripted job
NOTICE = Notice("instance-action", '{"action": "terminate", "time": "2026-11-25T10:00:00Z"}', 1.0)
REBALANCE = Notice("rebalance", '{"noticeTime": "2026-11-25T09:58:00Z"}', 1.0)


def tiering_plan(trainers: int = 3, holders: int = 1) -> Plan:
    """3 spot trainers (one GPU each) + 1 on-demand holder, their facts stated (no catalog is read)."""
    plan = make_tiering_plan(spot=trainers, holders=holders)
    trainer, holder = plan.nodes
    return replace(plan, nodes=(replace(trainer, gpus=1, tflops=65.0), replace(holder, gpus=0, tflops=0.0)))


class FakeCluster:
    """The cluster's nodes as its store and its cloud know them."""

    name = "c1"
    zones: tuple[str, ...] = ("us-east-1a",)  # its own, then those its VPC has a subnet in (a test adds some)

    def __init__(self, work: Path, plan: Plan) -> None:
        self.plan = plan
        self.keys = ClusterKeys(
            work, work / "login", "ssh-ed25519 LOGIN", work / "known_hosts", work / "internal", "ssh-ed25519 INTERNAL"
        )
        self.records: list[NodeRecord] = []
        self.terminated_by_cloud: set[str] = set()  # the cloud took them; refresh sees it
        self.retired: list[tuple[tuple[str, ...], str]] = []
        self.events: list[tuple[str, str]] = []
        self.refreshes = 0
        self.spent_usd = 0.25  # what the cluster has cost so far (cost())
        self.billing: tuple[Callable[[], float], float] | None = None  # bill_by: (clock, since when)
        self._lock = threading.Lock()
        for group in plan.nodes:
            for _ in range(group.count):
                self.add(group)

    def add(self, group: NodeGroup, zone: str = "us-east-1a") -> NodeRecord:
        with self._lock:
            letter = {Role.TRAINER: "t", Role.HOLDER: "h", Role.ANCHOR: "a"}[group.role]
            number = sum(1 for r in self.records if r.role is group.role)
            record = NodeRecord(
                f"i-{letter}{number:07d}",
                group.instance_type,
                group.market,
                group.role,
                zone,
                "running",
                f"10.0.0.{len(self.records) + 1}",
                None,
                group.usd_per_hour,
                launched_at=f"2026-11-25T10:{len(self.records):02d}:00+00:00",
            )
            self.records.append(record)
        return record

    def endpoints(self) -> list[SshEndpoint]:
        with self._lock:
            return [
                SshEndpoint(r.instance_id, "127.0.0.1", r.private_ip or "", 22, "root", r.role, r.market, "/k", "/kh")
                for r in self.records
                if r.state == "running"
            ]

    def nodes(self) -> list[NodeRecord]:
        with self._lock:
            return list(self.records)

    def refresh(self) -> bool:
        self.refreshes += 1
        self._set_state(self.terminated_by_cloud, "terminated")
        return True

    def cost(self) -> ClusterCost:
        usd = self.spent_usd
        if self.billing is not None:  # the running nodes bill by the clock
            clock, since = self.billing
            usd += sum(e.usd_per_hour for e in self.nodes() if e.state == "running") * (clock() - since) / 3600.0
        return ClusterCost(usd=usd, usd_per_hour=1.0, launched=None, ended=None, runtime_s=1.0)

    def bill_by(self, clock: Callable[[], float]) -> None:
        """From now on the running nodes bill at their prices by `clock` (seconds)."""
        self.billing = (clock, clock())

    def event(self, kind: str, message: str) -> None:
        self.events.append((kind, message))

    def retire(self, instance_ids: list[str], why: str) -> None:
        self.retired.append((tuple(instance_ids), why))
        self._set_state(set(instance_ids), "shutting-down")

    def node_env(self) -> dict[str, str]:
        return {"AWS_REGION": "us-east-1"}

    def running(self, role: Role | None = None) -> list[str]:
        return [e.instance_id for e in self.endpoints() if role is None or e.role is role]

    def _set_state(self, instance_ids: set[str], state: str) -> None:
        with self._lock:
            self.records = [replace(r, state=state) if r.instance_id in instance_ids else r for r in self.records]


class FakeBuyer:
    """Buys an order's nodes as new nodes of the fake cluster, as far as its pool's capacity goes (`capacity`:
    nodes each (zone, instance type, market) still has, or (instance type, market) in every zone, "*" for
    every type; the first key that names the order's pool counts; a pool not named has no end); `gate` holds
    each purchase until set. Every order is kept in `orders`, what it gave in `bought` as (role, count)."""

    def __init__(self, cluster: FakeCluster) -> None:
        self.cluster = cluster
        self.gate = threading.Event()
        self.gate.set()
        self.fail: str | None = None  # the cloud's refusal of everything, when set
        self.capacity: dict[tuple[str | Market, ...], int] = {}  # ("*", market): the market's types not named
        self.orders: list[NodeOrder] = []
        self.clock: Callable[[], float] = time.time  # when each order came (`ordered_at`), on the ladder's clock
        self.ordered_at: list[float] = []
        self.bought: list[tuple[Role, int]] = []
        self.done = threading.Event()  # set after each purchase
        self._lock = threading.Lock()

    def __call__(self, order: NodeOrder, note: Callable[[str], None]) -> list[SshEndpoint]:
        assert self.gate.wait(timeout=5), "the test never let the purchase through"
        note(f"launching {order.describe()}")
        g = order.group
        keys = (
            (order.zone, g.instance_type, g.market),
            (order.zone, "*", g.market),
            (g.instance_type, g.market),
            ("*", g.market),
        )
        pool = next((k for k in keys if k in self.capacity), keys[-1])
        with self._lock:
            self.orders.append(order)
            self.ordered_at.append(self.clock())
            given = order.count if pool not in self.capacity else min(order.count, self.capacity[pool])
            if pool in self.capacity:
                self.capacity[pool] -= given
        if self.fail:
            raise CloudError(self.fail)
        if not given:
            raise ShortageError(f"no replacement launched: InsufficientInstanceCapacity for {order.describe()}")
        ids = {self.cluster.add(replace(order.group, count=given), order.zone).instance_id for _ in range(given)}
        self.bought.append((order.role, given))
        self.done.set()
        return [e for e in self.cluster.endpoints() if e.instance_id in ids]


@dataclass
class Fault:
    """Something that happens to attempt `attempt` once it has reported `step` (0: before it starts)."""

    attempt: int
    step: int

    def strike(self, mpirun: ScriptedMpirun) -> bool:
        """Do it; True when the attempt ends here."""
        raise NotImplementedError


@dataclass
class NoticeOn(Fault):
    """A Spot notice on `node`: its watcher says so, the trainers flush this step and leave cleanly."""

    node: str = ""
    before_exit: Callable[[], None] | None = None  # returns when the attempt may exit (ordering tests)

    def strike(self, mpirun: ScriptedMpirun) -> bool:
        mpirun.nodes.notices[self.node] = NOTICE  # the more urgent: `watcher --once` names it
        rank = next(r for r, n in enumerate(mpirun.launch.rank_nodes) if n.instance_id == self.node)
        mpirun.emit(rank, NoticeSeen(rank=rank, notice=NOTICE))
        mpirun.flush(self.step, "notice")
        if self.before_exit is not None:
            self.before_exit()
        mpirun.end(EndStatus.STOPPED, self.step)
        return True


@dataclass
class RebalanceOn(Fault):
    """A rebalance recommendation alone on `node`: its watcher says so, the trainers flush this step and train
    on (training.node.checkpointing); `watcher --once` reads it there from now on."""

    node: str = ""

    def strike(self, mpirun: ScriptedMpirun) -> bool:
        mpirun.nodes.notices.setdefault(self.node, REBALANCE)
        rank = next(r for r, n in enumerate(mpirun.launch.rank_nodes) if n.instance_id == self.node)
        mpirun.emit(rank, NoticeSeen(rank=rank, notice=REBALANCE))
        mpirun.flush(self.step, "rebalance")
        return False


@dataclass
class Die(Fault):
    """`nodes` die without a word (the cloud took them, or they lost their network): mpirun aborts."""

    nodes: tuple[str, ...] = ()
    taken_by_cloud: bool = True

    def strike(self, mpirun: ScriptedMpirun) -> bool:
        mpirun.nodes.dead.update(self.nodes)
        if self.taken_by_cloud:
            mpirun.nodes.cluster.terminated_by_cloud.update(self.nodes)
        mpirun.say_error(f"ORTE has lost communication with a remote daemon ({', '.join(self.nodes)})", rank=None)
        mpirun.exit(1)
        return True


@dataclass
class Hang(Fault):
    """`node` freezes: nothing fails, every trainer waits in the next allreduce until mpirun is killed."""

    node: str = ""

    def strike(self, mpirun: ScriptedMpirun) -> bool:
        mpirun.nodes.dead.add(self.node)  # a frozen node does not answer a probe either
        while not mpirun.killed.wait(timeout=0.005):
            pass
        mpirun.exit(137)
        return True


@dataclass
class HangOnExit(Fault):
    """Every trainer says its run ended at this step (put it at the last step); then the job never exits (a rank
    stuck on its way out, every node answering) until mpirun is killed."""

    def strike(self, mpirun: ScriptedMpirun) -> bool:
        for rank in range(mpirun.launch.trainer_ranks):
            mpirun.emit(rank, End(rank=rank, status=EndStatus.COMPLETED, steps=self.step, final_loss=0.5))
        while not mpirun.killed.wait(timeout=0.005):
            pass
        mpirun.exit(137)
        return True


@dataclass
class Stuck(Fault):
    """The job's script blocks before its first step (a data loader, a peer it waits for): every trainer has
    started, no step comes, every node answers; mpirun is killed by the stall watch."""

    def strike(self, mpirun: ScriptedMpirun) -> bool:
        for rank in range(mpirun.launch.trainer_ranks):
            mpirun.emit(
                rank,
                Start(
                    rank=rank,
                    job="fake",
                    synthetic=True,
                    world_size=mpirun.launch.trainer_ranks,
                    device="cpu",
                    total_steps=40,
                    first_step=mpirun.first_step,
                    pid=100 + rank,
                ),
            )
        while not mpirun.killed.wait(timeout=0.005):
            pass
        mpirun.exit(137)
        return True


@dataclass
class Prints(Fault):
    """A script without ctx.step (`run.calls_step: false`, put it at step 0): no Start, no step; every trainer
    prints `lines` lines of its own, `every_s` apart; then, with `hangs`, it waits without a word (every node
    answering) until mpirun is killed, else its run ends completed."""

    lines: int = 0
    every_s: float = 0.0
    hangs: bool = False

    def strike(self, mpirun: ScriptedMpirun) -> bool:
        for n in range(self.lines):
            time.sleep(self.every_s)
            for rank in range(mpirun.launch.trainer_ranks):
                mpirun.say(f"epoch {n}", rank)
        if not self.hangs:
            mpirun.end(EndStatus.COMPLETED, 0)
            return True
        while not mpirun.killed.wait(timeout=0.005):
            pass
        mpirun.exit(137)
        return True


KEPT_FILE = "job/snapshot.pt"  # the file a Launched script keeps


@dataclass
class Launched(Fault):
    """A launched script (run.calls_step: false) as training.node.launched runs it, put at step 0: trainer 0 puts
    back the file kept so far (World.kept_at: Kept restored), every trainer says Start (none of deepvm's steps: 0
    of 0), trainer 0 prints `lines`, `every_s` apart; with `adapter`, a framework adapter inside it resumes at the
    world's checkpoint and reports that many steps (Resumed, Step), saving the framework's checkpoint every
    World.every steps. Its file is kept after its first line (written `written_ago_s` before; at each save with an
    adapter). Then, with `notice_on`, a Spot notice on that node: the script is stopped and the files flushed (Kept
    flushed; an adapter saves the step it stopped at); `dies` then goes before the attempt can end cleanly (mpirun
    fails: with notice_on the same node, the notice's interruption came early; alone, a node lost without notice).
    Else trainer 0's End says completed."""

    lines: tuple[str, ...] = ()
    every_s: float = STEP_S  # between two of its lines
    written_ago_s: float = 0.0
    adapter: int = 0
    notice_on: str = ""
    dies: str = ""

    def strike(self, mpirun: ScriptedMpirun) -> bool:
        world, trainers = mpirun.nodes.world, mpirun.launch.trainer_ranks
        if world.kept_at:
            self._kept(mpirun, KeptHow.RESTORED)
        for rank in range(trainers):
            mpirun.emit(
                rank,
                Start(
                    rank=rank,
                    job="fake",
                    script="train.py",
                    synthetic=False,
                    world_size=trainers,
                    total_steps=0,
                    first_step=0,
                    device="the script's",
                    pid=100 + rank,
                ),
            )
        for n, text in enumerate(self.lines):
            time.sleep(self.every_s)
            mpirun.say(text, 0)
            if n == 0 and not self.adapter:  # it saves its file as it starts printing
                world.kept_at = time.time() - self.written_ago_s
                self._kept(mpirun, KeptHow.KEPT)
        step = world.checkpoint
        if self.adapter:
            mpirun.emit(0, Resumed(rank=0, step=step, total_steps=world.total_steps))
        for _ in range(self.adapter):
            time.sleep(STEP_S)
            step += 1
            mpirun.emit(
                0, Step(rank=0, step=step, epoch=None, loss=0.5, global_loss=0.5, samples_per_s=100.0, synthetic=False)
            )
            if step % world.every == 0:
                self._save(mpirun, step)
        if self.notice_on:
            rank = next(r for r, n in enumerate(mpirun.launch.rank_nodes) if n.instance_id == self.notice_on)
            mpirun.nodes.notices[self.notice_on] = NOTICE
            mpirun.emit(rank, NoticeSeen(rank=rank, notice=NOTICE))
            if self.adapter:
                self._save(mpirun, step)
            self._kept(mpirun, KeptHow.FLUSHED)
        if self.dies:
            Die(self.attempt, 0, nodes=(self.dies,)).strike(mpirun)
            return True
        status = EndStatus.STOPPED if self.notice_on else EndStatus.COMPLETED
        mpirun.emit(0, End(rank=0, status=status, steps=0, final_loss=float("nan")))
        mpirun.exit(0)
        return True

    def _save(self, mpirun: ScriptedMpirun, step: int) -> None:
        """The adapter's framework saved its checkpoint of `step` into the kept files, and they were kept."""
        mpirun.nodes.world.checkpoint, mpirun.nodes.world.kept_at = step, time.time()
        self._kept(mpirun, KeptHow.KEPT)

    @staticmethod
    def _kept(mpirun: ScriptedMpirun, how: KeptHow) -> None:
        flushed = how is not KeptHow.KEPT
        mpirun.emit(
            0,
            Kept(
                rank=0,
                how=how,
                version=1,
                files=1,
                bytes=1 << 20,
                newest=KEPT_FILE,
                written_at=mpirun.nodes.world.kept_at,
                level="L2" if flushed else None,
                seconds=0.001,
            ),
        )


ABORT_BANNER = (
    "-" * 74,
    "MPI_ABORT was invoked on rank 0 in communicator MPI_COMM_WORLD",
    "with errorcode 3.",
    "",
    "NOTE: invoking MPI_ABORT causes Open MPI to kill all MPI processes.",
    "-" * 74,
)


@dataclass
class Crash(Fault):
    """The job crashes (an import error, a bug, `sys.exit(3)`): rank 0 says why on stderr and every rank dies
    before training a step; with `banner`, mpirun then prints Open MPI's MPI_ABORT banner."""

    said: tuple[str, ...] = ("ModuleNotFoundError: No module named 'torchvison'",)
    code: int = 1
    banner: bool = False

    def strike(self, mpirun: ScriptedMpirun) -> bool:
        for text in self.said:
            mpirun.say_error(text)
        for text in ABORT_BANNER if self.banner else ():
            mpirun.say_error(text, rank=None)
        mpirun.exit(self.code)
        return True


@dataclass
class Call(Fault):
    """Run `action` (write a cancel file, open a purchase's gate); the attempt goes on. With `hold`, it goes
    on only once the controller has asked it to stop or killed it (what the test waits for must not race
    a job that would otherwise finish first on a loaded machine)."""

    action: Callable[[], None] = lambda: None
    hold: bool = False

    def strike(self, mpirun: ScriptedMpirun) -> bool:
        self.action()
        deadline = time.monotonic() + 5
        while self.hold and not (mpirun.stop_asked.is_set() or mpirun.killed.is_set()) and time.monotonic() < deadline:
            time.sleep(0.002)
        return False


@dataclass
class World:
    """What outlives an attempt: the newest complete checkpoint (on the holders, or in S3) and the job's length."""

    total_steps: int = 40
    every: int = 5  # checkpoint interval
    checkpoint: int = 0  # the newest complete checkpoint's step (0: none)
    disk_full_from: int | None = None  # checkpoints from this step on never reach L2 (the holder's disk is full)
    faults: list[Fault] = field(default_factory=list)
    metrics: bool = False  # trainer 0 also logs {"loss": step / 100, "attempt": its attempt's number} each step
    kept_at: float = 0.0  # a Launched script's newest kept file: when it was written (time.time(); 0: none kept)


class ScriptedNodes:
    """NodeAccess on the fake cluster: every call recorded in `calls` as (what, host names)."""

    def __init__(self, cluster: FakeCluster, world: World) -> None:
        self.cluster, self.world = cluster, world
        self.dead: set[str] = set()  # instance ids that do not answer
        self.notices: dict[str, Notice] = {}  # instance id -> the notice posted to it
        self.calls: list[tuple[str, tuple[str, ...]]] = []
        self.attempts: list[ScriptedMpirun] = []
        self._lock = threading.Lock()

    def _record(self, what: str, hosts: Sequence[HostSpec]) -> list[str]:
        ids = [self._id(h) for h in hosts]
        with self._lock:
            self.calls.append((what, tuple(ids)))
        return ids

    def _id(self, host: HostSpec) -> str:
        return next(r.instance_id for r in self.cluster.nodes() if r.instance_id[2:10] == host.name.split("-")[1])

    def called(self, what: str) -> list[tuple[str, ...]]:
        return [ids for kind, ids in self.calls if kind == what]

    def prepare(
        self,
        hosts: Sequence[HostSpec],
        spot: set[str],
        job: JobToStage,
        on_push: Callable[[PushProgress], None],
        on_line: Callable[[OutputLine], None],
    ) -> dict[str, NodeState]:
        ids = self._record("prepare", hosts)
        found = {h.name: self.notices.get(i) if h.name in spot else None for h, i in zip(hosts, ids)}
        return {name: NodeState("/home/u", notice) for name, notice in found.items()}

    def probe(self, hosts: Sequence[HostSpec]) -> list[Answer]:
        return [Answer.NO if i in self.dead else Answer.YES for i in self._record("probe", hosts)]

    def read_notices(
        self, hosts: Sequence[HostSpec], python: str, on_line: Callable[[OutputLine], None]
    ) -> dict[str, Notice | None]:
        return {h.name: self.notices.get(i) for h, i in zip(hosts, self._record("notices", hosts))}

    def ready_head(self, launch: Launch, internal_key: Path) -> Launch:
        self._record("head", [launch.head.host])
        return launch

    def start(self, number: int, launch: Launch, sink: Callable[[object], None]) -> ScriptedMpirun:
        self._record("start", [n.host for n in launch.nodes])
        mpirun = ScriptedMpirun(self, number, launch, sink)
        self.attempts.append(mpirun)
        return mpirun

    def fetch(self, host: HostSpec, remote_dir: str, local_dir: Path, names: Sequence[str] | None) -> None:
        self._record("fetch", [host])
        metrics = RunMetrics(
            job="fake",
            status=EndStatus.COMPLETED,
            synthetic=True,
            world_size=3,
            first_step=0,
            steps=self.world.total_steps,
            total_steps=self.world.total_steps,
            final_loss=0.5,
            loss_curve=((self.world.total_steps, 0.5),),
            wall_s=1.0,
        )
        metrics.write(local_dir)
        (local_dir / "model.pt").write_bytes(b"weights")


class ScriptedMpirun:
    """One attempt of the scripted job, played on a thread of its own (see the module docstring)."""

    def __init__(self, nodes: ScriptedNodes, number: int, launch: Launch, sink: Callable[[object], None]) -> None:
        self.nodes, self.number, self.launch, self._sink = nodes, number, launch, sink
        self.started_at = time.monotonic()
        self.returncode: int | None = None
        self.stop_asked, self.killed, self._exited = threading.Event(), threading.Event(), threading.Event()
        self.first_step = nodes.world.checkpoint
        threading.Thread(target=self._play, name=f"mpirun-{number}", daemon=True).start()

    @property
    def running(self) -> bool:
        return not self._exited.is_set()

    def node_of(self, rank: int | None) -> Node | None:
        ranks = self.launch.rank_nodes
        return ranks[rank] if rank is not None and 0 <= rank < len(ranks) else None

    def request_stop(self) -> None:
        self.stop_asked.set()

    def dump_stacks(self) -> None:
        """As faulthandler does on each rank: its threads' stacks on stderr (unless the attempt was killed)."""
        if not self.killed.is_set():
            for rank in range(self.launch.trainer_ranks):
                self.say_error(f"Thread 0x00007f{rank:02d} (most recent call first):", rank)
                self.say_error('  File "worker.py", line 1 in _one_step', rank)

    def kill(self, grace_s: float = 10.0) -> None:
        self.killed.set()
        self._exited.wait(timeout=5)

    # what the ranks and mpirun say
    def emit(self, rank: int, event: Event) -> None:
        self._sink(RankLine(self.number, rank, "stdout", line(event), time.monotonic()))

    def say(self, text: str, rank: int) -> None:
        """A line of the script's own on `rank`'s stdout."""
        self._sink(RankLine(self.number, rank, "stdout", text, time.monotonic()))

    def say_error(self, text: str, rank: int | None = 0) -> None:
        """A line on stderr from `rank` (None: mpirun's own)."""
        self._sink(RankLine(self.number, rank, "stderr", text, time.monotonic()))

    def exit(self, code: int) -> None:
        self.returncode = code
        self._exited.set()
        self._sink(AttemptExit(self.number, code, time.monotonic()))

    def flush(self, step: int, reason: str) -> None:
        self.nodes.world.checkpoint = max(self.nodes.world.checkpoint, step)
        self.emit(0, Flush(rank=0, step=step, reason=reason, level="L1", seconds=0.001, stall_s=0.0))

    def end(self, status: EndStatus, step: int) -> None:
        for rank in range(self.launch.trainer_ranks):
            self.emit(rank, End(rank=rank, status=status, steps=step, final_loss=0.5))
        self.exit(0)

    def _play(self) -> None:
        try:
            self._steps()
        except BaseException as exc:  # a broken script must end the attempt, not leave the controller waiting
            self.say_error(f"scripted mpirun: {type(exc).__name__}: {exc}")
            if self.running:
                self.exit(99)
            raise

    def _steps(self) -> None:
        world, step = self.nodes.world, self.first_step
        faults = {f.step: f for f in world.faults if f.attempt == self.number}
        if 0 in faults and faults[0].strike(self):
            return
        if step > 0:
            self.emit(
                0, Restored(rank=0, step=step, checkpoint=f"step-{step}", levels=("L1",), seconds=0.001, fallbacks=())
            )
        trainers = self.launch.trainer_ranks
        for rank in range(trainers):
            self.emit(
                rank,
                Start(
                    rank=rank,
                    job="fake",
                    synthetic=True,
                    world_size=trainers,
                    device="cpu",
                    total_steps=world.total_steps,
                    first_step=step,
                    pid=100 + rank,
                ),
            )
        while step < world.total_steps:
            time.sleep(STEP_S)
            if self.killed.is_set():
                self.exit(137)
                return
            step += 1
            for rank in range(trainers):  # every trainer reports (log_every: 1), trainer 0 first
                self.emit(
                    rank,
                    Step(rank=rank, step=step, epoch=0, loss=0.5, global_loss=0.5, samples_per_s=100.0, synthetic=True),
                )
            if world.metrics:
                self.emit(0, Metrics(rank=0, point=MetricPoint(step, {"loss": step / 100, "attempt": self.number})))
            if step % world.every == 0:
                self.emit(0, Saved(rank=0, step=step, stall_s=0.0, bytes=1))
                if world.disk_full_from is not None and step >= world.disk_full_from:
                    reason = "holder 0: OSError(28, 'No space left on device')"
                    self.emit(0, NotSafe(rank=0, step=step, level="L2", reason=reason))
                else:
                    world.checkpoint = max(world.checkpoint, step)
                    self.emit(0, Safe(rank=0, step=step, level="L2"))
            if step in faults and faults[step].strike(self):
                return
            if self.stop_asked.is_set():
                if world.checkpoint < step:
                    self.flush(step, "stop")
                self.end(EndStatus.STOPPED, step)
                return
        self.end(EndStatus.COMPLETED, step)
