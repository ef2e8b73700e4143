"""One attempt of a job, from nodes to its end: prepare nodes, launch mpirun on the head, watch it -> AttemptEnd.

How a job is (re)launched is here, once; when, and on which nodes, is the caller's: the recovery controller
(training.control.controller) runs attempt after attempt through one AttemptSession, `deepvm profile`
(training.client.profiling) one per size. The calls, in order (each on the caller's thread):

1) `prepare(nodes)` pushes the runtime and the job to nodes the job has not used yet, runs its setup once
   and reads their Spot notices; `check(nodes)` asks nodes that may have changed since they last answered
   (an SSH probe, and the notices of the spot ones that answered);
2) `run(number, launch, listener)` readies the head (the internal key, the hostfile, the pinned host keys;
   where Open MPI is, asked once per head), starts mpirun there (an Attempt, see launcher) and watches
   it: every line of every rank is parsed (training.shared.events) and handed to `listener.on_event`, or
   shown as the rank's output; anything else posted on the session's queue goes to `listener.on_post`;
   `listener.on_tick` runs at least every `tick_s` (cancel requests, saving progress); silence (of
   progress, or of every rank's output) longer than the stall watch allows (judged once what had arrived is
   handled) calls `listener.on_stall`, asks every rank for its threads' stacks (they reach the report as the
   ranks' output: where each one waited) and kills mpirun; Ctrl-C asks the trainers to checkpoint and leave,
   a second Ctrl-C kills (or, for a profile, kills and propagates). It returns once mpirun has exited, as an
   AttemptEnd;
3) between attempts, `drain(handle)` hands over what was posted meanwhile, and `wait_for_post()` blocks
   for the next post (a replacement the next launch waits for).

Threads only post: the Attempt's reader threads (its output, its exit), the replacement threads (through
`post`) and the kill timers never call the listener; every callback runs on the thread that called run().
Everything that touches a node goes through a NodeAccess (SshNodes over SSH; a test's fake), so the loop
itself runs in tests without SSH, mpirun or a cloud (tests/training/test_controller.py).
"""

from __future__ import annotations

import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Protocol

from provisioning.catalog.model import Market
from provisioning.cloud.ssh import Answer, probe_all
from provisioning.cloud.types import HostSpec, SshEndpoint
from training.control.attempts import classify
from training.control.launcher import Attempt, AttemptExit, Launch, Node, RankLine, head_files
from training.control.scripterror import ScriptError, script_error
from training.control.staging import JobToStage, NodeState, prepare_head, prepare_nodes, read_notices
from training.control.stall import LEAVE_GRACE_S, Stall, StallWatch
from training.shared.events import End, EndStatus, Event, Flush, Notice, Resumed, Saved, Start, Step, parse
from training.shared.progress import LAUNCHER, JobReporter, Outcome
from training.shared.transport import OutputLine, PushProgress, fetch_files, fetch_tree

OUTPUT_KEPT = 400  # the attempt's last lines of stderr and of mpirun: a traceback, the banner, the others' errors


class Mpirun(Protocol):
    """A running mpirun, as the session drives it (launcher.Attempt; a test's scripted one)."""

    number: int
    launch: Launch
    started_at: float  # time.monotonic() when it was started
    returncode: int | None

    @property
    def running(self) -> bool: ...

    def node_of(self, rank: int | None) -> Node | None: ...

    def request_stop(self) -> None: ...

    def dump_stacks(self) -> None: ...

    def kill(self, grace_s: float = 10.0) -> None: ...


class NodeAccess(Protocol):
    """Everything the session does on nodes. Each call may come from any thread."""

    def prepare(
        self,
        hosts: Sequence[HostSpec],
        spot: set[str],
        job: JobToStage,
        on_push: Callable[[PushProgress], None],
        on_line: Callable[[OutputLine], None],
    ) -> dict[str, NodeState]:
        """staging.prepare_nodes: {host name: what preparing found}."""
        ...

    def probe(self, hosts: Sequence[HostSpec]) -> list[Answer]:
        """Whether each host answers over SSH with its pinned host key, in order."""
        ...

    def read_notices(
        self, hosts: Sequence[HostSpec], python: str, on_line: Callable[[OutputLine], None]
    ) -> dict[str, Notice | None]:
        """The interruption notice posted to each (prepared) host, by host name."""
        ...

    def ready_head(self, launch: Launch, internal_key: Path) -> Launch:
        """Write the launch's files on its head; the launch with where the head's Open MPI is."""
        ...

    def start(self, number: int, launch: Launch, sink: Callable[[object], None]) -> Mpirun:
        """Start mpirun on the launch's head; its lines (RankLine) and its exit (AttemptExit) go to `sink`."""
        ...

    def fetch(self, host: HostSpec, remote_dir: str, local_dir: Path, names: Sequence[str] | None) -> None:
        """Copy `names` from `remote_dir` on `host` into `local_dir` (None: every file under it)."""
        ...


def _kill_hung(mpirun: Mpirun) -> None:
    """A hung attempt's end: the ranks' stacks first (what a user needs to find the hang), then the kill."""
    mpirun.dump_stacks()
    mpirun.kill()


class SshNodes:
    """NodeAccess over SSH: staging's pushes and scripts, probes, the head's files, mpirun under mpirun_guard."""

    def __init__(self) -> None:
        self._open_mpi: dict[str, str | None] = {}  # head instance id -> its Open MPI home, once found
        self._lock = threading.Lock()

    def prepare(
        self,
        hosts: Sequence[HostSpec],
        spot: set[str],
        job: JobToStage,
        on_push: Callable[[PushProgress], None],
        on_line: Callable[[OutputLine], None],
    ) -> dict[str, NodeState]:
        return prepare_nodes(hosts, spot, job, on_push, on_line)

    def probe(self, hosts: Sequence[HostSpec]) -> list[Answer]:
        return probe_all(list(hosts))

    def read_notices(
        self, hosts: Sequence[HostSpec], python: str, on_line: Callable[[OutputLine], None]
    ) -> dict[str, Notice | None]:
        return read_notices(hosts, python, on_line)

    def ready_head(self, launch: Launch, internal_key: Path) -> Launch:
        head = launch.head
        with self._lock:
            known = head.instance_id in self._open_mpi
        found = prepare_head(head.host, launch.paths, internal_key, head_files(launch), find_mpirun=not known)
        with self._lock:
            home = self._open_mpi.setdefault(head.instance_id, found)
        return replace(launch, open_mpi_home=home)

    def start(self, number: int, launch: Launch, sink: Callable[[object], None]) -> Mpirun:
        return Attempt(number, launch, sink)

    def fetch(self, host: HostSpec, remote_dir: str, local_dir: Path, names: Sequence[str] | None) -> None:
        if names is None:
            fetch_tree(host, remote_dir, local_dir)
        else:
            fetch_files(host, remote_dir, names, local_dir)


@dataclass(frozen=True)
class NodeCheck:
    """What asking a node before a launch found."""

    answer: Answer  # YES, or why it cannot be used (NO: no answer; NOT_PINNED: another host key)
    notice: Notice | None  # a spot node's posted interruption notice (None: none, or not asked)


@dataclass
class AttemptRun:
    """What the session knows of the running attempt; the listener reads it and may stop it."""

    mpirun: Mpirun
    trainers: int  # trainer ranks
    started: int = 0  # trainers that reported "start"
    first_step: int = -1  # trainer 0's start step
    last_step: int = -1  # trainer 0's newest step
    status: EndStatus | None = None  # trainer 0's "end"
    hung: Stall | None = None  # the stall watch killed it, for this stall
    stopping: bool = False  # a clean stop was asked (a fold-in, Ctrl-C, a cancel)
    user_stops: int = 0  # Ctrl-C presses and cancel requests
    startup_s: float | None = None  # mpirun started -> its first step
    last_line: str = ""  # trainer 0's newest output line that is no event: a launched script's progress, in its words
    output: deque[RankLine] = field(default_factory=lambda: deque(maxlen=OUTPUT_KEPT))  # for its ScriptError

    @property
    def number(self) -> int:
        return self.mpirun.number

    @property
    def launch(self) -> Launch:
        return self.mpirun.launch

    def request_stop(self) -> None:
        """Ask the trainers to flush a checkpoint at their next step and leave."""
        self.stopping = True
        self.mpirun.request_stop()


@dataclass(frozen=True)
class AttemptEnd:
    """How an attempt ended: mpirun's exit, what trainer 0 said, what the session saw."""

    number: int
    launch: Launch
    returncode: int
    outcome: Outcome  # training.control.attempts.classify
    trainers: int
    first_step: int
    last_step: int
    hung: bool  # the stall watch killed it
    startup_s: float | None
    error: ScriptError  # its cause as a person reads it (meaningful when it FAILED): training.control.scripterror
    exited_at: float  # time.monotonic()

    @property
    def node_ids(self) -> tuple[str, ...]:
        return tuple(n.instance_id for n in self.launch.nodes)

    @property
    def error_node(self) -> str | None:
        """The name of the node whose rank `error` names (None: mpirun's own error)."""
        ranks, rank = self.launch.rank_nodes, self.error.rank
        return ranks[rank].name if rank is not None and 0 <= rank < len(ranks) else None


class AttemptListener(Protocol):
    """What the caller of `run` learns while an attempt runs; every call is on the caller's thread."""

    def on_launch(self, run: AttemptRun) -> None:
        """mpirun was started."""

    def on_event(self, event: Event, node: Node | None, at: float, run: AttemptRun) -> None:
        """A rank's event, read at `at`; `node` is the node mpirun says it came from (None: unknown)."""

    def on_post(self, item: object, run: AttemptRun | None) -> None:
        """Something posted on the session's queue that is not the attempt's (a replacement's news)."""

    def on_tick(self, run: AttemptRun) -> None:
        """A turn of the watch (at least every tick_s)."""

    def on_stall(self, run: AttemptRun, stall: Stall) -> None:
        """No progress for longer than the stall watch allows: the session kills the attempt after this returns."""


class AttemptSession:
    """Attempts of one job (see the module docstring for the order of the calls)."""

    def __init__(
        self,
        nodes: NodeAccess,
        job: JobToStage,
        internal_key: Path,
        report: JobReporter,
        stall: StallWatch,
        *,
        ctrl_c_stops: bool = True,
        tick_s: float = 1.0,
        stop_grace_s: float = LEAVE_GRACE_S,
    ) -> None:
        self.nodes, self.job, self.internal_key, self.report, self.stall = nodes, job, internal_key, report, stall
        self.ctrl_c_stops = ctrl_c_stops  # False: Ctrl-C kills the attempt and propagates (a profile)
        self.tick_s, self.stop_grace_s = tick_s, stop_grace_s
        self._queue: queue.Queue[object] = queue.Queue()

    def post(self, item: object) -> None:
        """What a thread hands to the caller's thread (it reaches the listener's on_post)."""
        self._queue.put(item)

    # --- 1) nodes -----------------------------------------------------------------------------------------
    def prepare(
        self,
        endpoints: Sequence[SshEndpoint],
        on_push: Callable[[PushProgress], None] | None = None,
        on_line: Callable[[OutputLine], None] | None = None,
    ) -> dict[str, NodeState]:
        """Push, set up and check fresh nodes: {instance id: NodeState}. Safe from any thread (replacement
        threads stage with it); progress goes to the report unless told otherwise."""
        hosts = [e.host for e in endpoints]
        spot = {h.name for h, e in zip(hosts, endpoints) if e.market is Market.SPOT}
        push = on_push or (lambda p: self.report.push(p.host, p.bytes_done, p.bytes_total))
        states = self.nodes.prepare(hosts, spot, self.job, push, on_line or self._node_line)
        return {e.instance_id: states[h.name] for e, h in zip(endpoints, hosts)}

    def check(self, endpoints: Sequence[SshEndpoint]) -> dict[str, NodeCheck]:
        """Probe the nodes over SSH, and read the notices of the spot nodes that answered: {instance id: check}."""
        answers = dict(zip((e.instance_id for e in endpoints), self.nodes.probe([e.host for e in endpoints])))
        spot = [e for e in endpoints if e.market is Market.SPOT and answers[e.instance_id] is Answer.YES]
        notices: dict[str, Notice | None] = {}
        if spot:
            found = self.nodes.read_notices([e.host for e in spot], self.job.python, self._node_line)
            notices = {e.instance_id: found[e.host.name] for e in spot}
        return {i: NodeCheck(answer, notices.get(i)) for i, answer in answers.items()}

    def fetch(self, host: HostSpec, remote_dir: str, local_dir: Path, names: Sequence[str] | None) -> None:
        """A completed job's outputs, from trainer 0's node (`names`; None: its whole out directory)."""
        self.nodes.fetch(host, remote_dir, local_dir, names)

    def _node_line(self, line: OutputLine) -> None:
        self.report.log(line.host, line.text)

    # --- 2) one attempt ---------------------------------------------------------------------------------
    def run(self, number: int, launch: Launch, listener: AttemptListener) -> AttemptEnd:
        """Ready the head, start mpirun, watch it to its end (see the module docstring)."""
        launch = self.nodes.ready_head(launch, self.internal_key)
        mpirun = self.nodes.start(number, launch, self._queue.put)
        run = AttemptRun(mpirun, launch.trainer_ranks)
        self.stall.started(mpirun.started_at)
        try:
            listener.on_launch(run)
            while True:
                try:
                    listener.on_tick(run)
                    for item in self._arrived():
                        if isinstance(item, AttemptExit) and item.attempt == number:
                            return self._end(run, item)
                        self._handle(item, run, listener)
                    self._check_stall(run, listener)  # after what had arrived: a backlog is no silence
                except KeyboardInterrupt:
                    if not self.ctrl_c_stops:
                        raise
                    self.stop_by_user(run)
        except BaseException:
            if mpirun.running:
                mpirun.kill()
            raise

    def _arrived(self) -> Iterator[object]:
        """What was posted: the first item within tick_s (nothing if none came), then all that is queued."""
        try:
            yield self._queue.get(timeout=self.tick_s)
        except queue.Empty:
            return
        while True:
            try:
                yield self._queue.get_nowait()
            except queue.Empty:
                return

    def stop_by_user(self, run: AttemptRun) -> None:
        """Ctrl-C (or `deepvm cancel` after a checkpoint): the trainers checkpoint and leave, once every one
        has started (else, and on a second time, mpirun is killed)."""
        run.user_stops += 1
        if run.user_stops == 1 and run.started == run.trainers:
            self.report.note("stopping: trainers checkpoint and leave (Ctrl-C again to kill at once)")
            run.request_stop()
            timer = threading.Timer(self.stop_grace_s, run.mpirun.kill)
            timer.daemon = True
            timer.start()
        else:
            self.report.note("killing the job")
            run.mpirun.kill(grace_s=5.0)

    def kill_by_user(self, run: AttemptRun) -> None:
        """`deepvm cancel --now`: mpirun is killed without a last checkpoint (in the background: the watch
        goes on until it has exited)."""
        run.user_stops = max(run.user_stops, 1)
        threading.Thread(target=run.mpirun.kill, kwargs={"grace_s": 5.0}, name="kill-cancelled", daemon=True).start()

    def _check_stall(self, run: AttemptRun, listener: AttemptListener) -> None:
        stall = self.stall.stalled(time.monotonic())
        if stall is None or run.hung or not run.mpirun.running:
            return
        run.hung = stall
        listener.on_stall(run, stall)
        threading.Thread(target=_kill_hung, args=(run.mpirun,), name="kill-hung", daemon=True).start()

    def _handle(self, item: object, run: AttemptRun, listener: AttemptListener) -> None:
        if isinstance(item, RankLine):
            if item.attempt == run.number:
                self._on_line(item, run, listener)
        elif not isinstance(item, AttemptExit):  # an earlier attempt's exit says nothing new
            listener.on_post(item, run)

    def _on_line(self, line: RankLine, run: AttemptRun, listener: AttemptListener) -> None:
        if line.rank is not None:  # a rank's line, not mpirun's own: the script is not silent
            self.stall.heard(line.at)
        node = run.mpirun.node_of(line.rank)
        event = parse(line.text) if line.stream == "stdout" else None
        if event is None:
            if line.stream == "stderr" or line.rank is None:
                run.output.append(line)
            if line.rank == 0 and line.text.strip():
                run.last_line = line.text
            self.report.log(f"{node.name} r{line.rank}" if node else LAUNCHER, line.text)
            return
        self._account(event, line.at, run)
        listener.on_event(event, node, line.at, run)

    def _account(self, event: Event, at: float, run: AttemptRun) -> None:
        """What the attempt's end and the stall watch need from an event, before the listener sees it."""
        match event:
            case Start():
                run.started += 1
                if event.rank == 0:
                    run.first_step = run.last_step = event.first_step
                    self.stall.resumes_at(event.first_step)
            case Resumed(rank=0):  # a framework's own resume, past the launched script's Start at 0
                run.first_step = run.last_step = event.step
                self.stall.resumes_at(event.step)
            case Step(rank=0):
                self.stall.progressed(at, event.step)
                run.last_step = event.step
                if run.startup_s is None:
                    run.startup_s = round(at - run.mpirun.started_at, 3)
            case Saved() | Flush():  # progress only as the step it was taken at (training/control/stall.py)
                self.stall.progressed(at, event.step)
            case End(rank=0):
                run.status = event.status
                self.stall.ended(at)

    def _end(self, run: AttemptRun, done: AttemptExit) -> AttemptEnd:
        return AttemptEnd(
            number=run.number,
            launch=run.launch,
            returncode=done.returncode,
            outcome=classify(done.returncode, run.status, user_stopped=run.user_stops > 0),
            trainers=run.trainers,
            first_step=run.first_step,
            last_step=run.last_step,
            hung=run.hung is not None,
            startup_s=run.startup_s,
            error=ScriptError.of_hang(run.hung.cause, done.returncode)
            if run.hung
            else script_error(run.output, done.returncode),
            exited_at=done.at,
        )

    # --- 3) between attempts --------------------------------------------------------------------------
    def drain(self, handle: Callable[[object], None]) -> None:
        """Hand over what was posted while no attempt ran (rank lines of an attempt that is over are dropped)."""
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return
            if not isinstance(item, RankLine | AttemptExit):
                handle(item)

    def wait_for_post(self, timeout_s: float | None = None) -> object | None:
        """Block until something is posted (rank lines of an attempt that is over are skipped), at most
        `timeout_s` (None: without end); None when nothing came in time."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            try:
                item = self._queue.get(timeout=None if deadline is None else max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                return None
            if not isinstance(item, RankLine | AttemptExit):
                return item
