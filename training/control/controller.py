"""The recovery controller behind `deepvm train`: run a job on a cluster until it completes.

It runs on the user's machine and drives one mpirun at a time (an Attempt), which runs on the cluster's
head node (an on-demand node; see launcher) under training.node.headrun, over SSH: the user's machine needs
no Open MPI and no address the nodes can reach. It reads every rank's output from a single event queue
on its main thread. The cycle:

1. prepare: push the runtime and the job to nodes it has not used yet, run setup once, read notices;
2. launch on every usable node (roles from the plan: holders keep checkpoints, trainers train), after
   giving the head node the cluster-internal key, the hostfile and the nodes' pinned host keys;
3. watch: progress and checkpoints from trainer 0, notices from any spot node's watcher;
4. the attempt ends, and the controller decides:
   - completed: fetch model.pt and metrics.json from trainer 0's node (a job's own script: its whole out
     directory, whatever the script wrote there beside deepvm's metrics.json); done.
   - stopped after a notice: trainers flushed a checkpoint at the current step before leaving, so the
     noticed node is dropped and the job relaunches at once on the survivors from that very step (no
     work lost); a replacement spot node is bought within the plan as soon as the notice arrives.
   - stopped to fold in a replacement: as soon as the new node is prepared, the controller asks the
     running job to stop (`stop` to headrun, SIGUSR1 through mpirun: flush at the next step, leave) and
     relaunches with the bigger world from that step.
   - failed (a node died without notice, mpirun aborted): the controller probes every node over SSH,
     drops the dead ones, buys replacements, and relaunches from the newest complete checkpoint; the
     work lost is at most one checkpoint interval. Attempts that fail without progress are retried
     twice, then the job fails with the ranks' last error lines. Nodes dropped for not answering are
     terminated through EC2, so they stop billing.
   - hung (no progress for much longer than steps take; training/control/stall.py): the attempt is killed and
     handled as failed, which finds and drops the node that hangs.
   - Ctrl-C: the job is asked to stop cleanly (flush, leave); a second Ctrl-C kills mpirun.

The global batch follows the job's shrink policy (the ranks compute it from the plan's trainer count),
so a relaunch on fewer trainers continues the same optimisation. State (step, restarts, lost steps,
cost) is written to the jobs table as it changes; `deepvm train --resume` continues a job whose
controller died (headrun stops its mpirun when the controller's connection ends: see launcher) from the
newest complete checkpoint.
"""

from __future__ import annotations

import queue
import tempfile
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from provisioning.catalog.model import Market
from provisioning.cloud.ssh import Answer, probe_all
from provisioning.cloud.types import SshEndpoint
from provisioning.clusters.handle import Cluster
from provisioning.clusters.store import utc_now
from provisioning.core.errors import DeepvmError, InputError, JobFailed, StoppedByUser
from provisioning.core.home import deepvm_home
from provisioning.planner.plan import Role
from training.control.attempts import (
    Action,
    CancelMode,
    can_continue_without_holders,
    classify,
    decide,
    fold_in_now,
    progressed,
)
from training.control.launcher import (
    Attempt,
    AttemptExit,
    Launch,
    Node,
    RankLine,
    arrange,
    ready_on_head,
    rendezvous_port,
    split_batch,
)
from training.control.plan_facts import UNKNOWN, TypeFacts, planned_trainer_ranks, type_facts
from training.control.recovery import RecoveryLog
from training.control.replacements import ReplacementNote, ReplacementReady, Replacements, cloud_buyer
from training.control.staging import JobPaths, NodeState, prepare_nodes, read_notices, stage_runtime
from training.control.stall import StallWatch
from training.shared.events import (
    End,
    EndStatus,
    Event,
    Flush,
    Notice,
    NoticeSeen,
    Restored,
    Saved,
    Start,
    Step,
    WatcherOff,
    parse,
)
from training.shared.jobspec import JobSpec, load_job_spec
from training.shared.jobstore import JobRow, JobStatus, JobStore, train_lock
from training.shared.metrics import METRICS_FILE, RunMetrics
from training.shared.progress import (
    LAUNCHER,
    AttemptRecord,
    JobReporter,
    Outcome,
    Progress,
    Recovery,
    RecoveryReason,
    TrainResult,
)
from training.shared.transport import OutputLine, PushProgress, fetch_files, fetch_tree

_ROLES = {Role.TRAINER: "trainer", Role.HOLDER: "holder", Role.ANCHOR: "both"}
# why a node that a probe did not log in to is dropped (one with a host key not pinned is not the node launched)
_UNUSABLE = {Answer.NO: "does not answer over SSH", Answer.NOT_PINNED: "answers with a host key not pinned for it"}
_HOLDING = (Role.HOLDER, Role.ANCHOR)  # plan roles whose nodes keep the checkpoints
_FETCH = ("model.pt", METRICS_FILE)
_STOP_GRACE_S = 120.0  # a clean stop (flush + exit) normally takes seconds; then mpirun is killed
_SAVE_EVERY_S = 2.0  # how often progress is written to the jobs table


class TrainingStopped(StoppedByUser):
    """The user stopped the job (Ctrl-C); it can be resumed."""


class TrainingCancelled(StoppedByUser):
    """`deepvm cancel` stopped the job; it is final (a cancelled job is not resumed by its supervisor)."""

    exit_code = 0  # the job ended as its owner asked


class TrainingFailed(JobFailed):
    """The job cannot continue (no holder left, repeated failures without progress)."""


@dataclass(frozen=True)
class TrainRequest:
    """What `deepvm train` was asked to do."""

    job_path: Path
    cluster: str
    python: str  # the interpreter on the nodes (with torch, mpi4py, pyyaml, pydantic)
    resume: bool = False  # continue the newest unfinished job of this name on this cluster
    out_dir: Path | None = None  # default: DEEPVM_HOME/jobs/JOB_ID
    replace_nodes: bool = True  # buy a spot node for each one lost, within the plan's count
    max_failures: int = 3  # consecutive attempts that fail without progress before giving up
    stall_timeout_s: float | None = None  # silence after which a running job counts as hung; None: adaptive
    # set when the controller runs on the cluster's head node (training.control.service):
    job_id: str | None = None  # the job's id, chosen by the client; a stored job of this id is resumed
    node_env: dict[str, str] | None = None  # the ranks' AWS settings, as the user's machine computed them
    cancel_file: Path | None = None  # once it exists, the job is cancelled ("now" in it: without a checkpoint)
    inside_cluster: bool = False  # reach nodes at their private addresses (the head is inside the VPC)


@dataclass
class _Run:
    """What the controller knows of the current attempt."""

    attempt: Attempt
    trainers: int
    started: int = 0  # trainers that reported "start"
    first_step: int = -1
    last_step: int = -1
    status: EndStatus | None = None  # from trainer 0's "end" event
    hung: bool = False  # the stall watch killed it
    startup_s: float | None = None  # mpirun started -> first step
    errors: deque[str] = field(default_factory=lambda: deque(maxlen=8))


def train(request: TrainRequest, report: JobReporter = JobReporter()) -> TrainResult:
    """Run the job on the cluster until it completes (see the module docstring)."""
    spec = load_job_spec(request.job_path)
    cluster = Cluster.open_running(request.cluster)  # NotFoundError (with what to run) unless it is up
    cluster.refresh()  # node states from the cloud now: a node that died meanwhile is not used
    with train_lock(cluster.name), tempfile.TemporaryDirectory(prefix="deepvm-train-") as work:
        controller = Controller(spec, request, cluster, Path(work), report)
        return controller.run()


class Controller:
    """One `deepvm train` session; see the module docstring."""

    def __init__(self, spec: JobSpec, request: TrainRequest, cluster: Cluster, work: Path, report: JobReporter):
        self.spec, self.request, self.cluster, self.report = spec, request, cluster, report
        self.jobs = JobStore()
        self.plan = cluster.plan
        self.facts = type_facts(self.plan)
        self.planned_trainers = planned_trainer_ranks(self.plan)
        planned: Counter[Role] = Counter()  # nodes per role in the plan: replacements restore them
        for group in self.plan.nodes:
            planned[group.role] += group.count
        self.events: queue.Queue[object] = queue.Queue()
        self.replacements = Replacements(planned, cloud_buyer(cluster, request.inside_cluster),
                                         self._stage_replacement, self.events.put)  # fmt: skip
        self.runtime = stage_runtime(work / "runtime")
        self.prepared: dict[str, NodeState] = {}  # instance id -> what preparing it found
        self.excluded: dict[str, str] = {}  # instance id -> why it is not used any more
        self.fold_waiting = False  # a prepared replacement waits for the running attempt to stop
        self.user_stop = 0  # Ctrl-C presses
        self.recovery = RecoveryLog()
        self.stall = StallWatch(fixed_s=request.stall_timeout_s)
        node_env = request.node_env if request.node_env is not None else cluster.node_env()
        self.env = {**node_env, **spec.env}  # the job's own settings win
        self.cancel_mode: CancelMode | None = None  # once `deepvm cancel` asked
        self.members: set[str] = {e.instance_id for e in cluster.endpoints()}  # nodes it may use
        self.attempts: list[AttemptRecord] = []
        self.last_progress: Progress | None = None
        self.saved_at = 0.0
        self.started = time.monotonic()
        self.job = self._begin()

    # --- the job row ------------------------------------------------------------------------------
    def _begin(self) -> JobRow:
        spec, request = self.spec, self.request
        if request.job_id is not None and (known := self.jobs.get(request.job_id)) is not None:
            # the head's controller restarted (crash, reboot): carry on from the newest checkpoint
            self.recovery.trouble(RecoveryReason.CONTROLLER_RESTART, (), 0, known.world_size, time.monotonic(),
                                  known.step)
            self.report.note(f"controller restarted: resuming job {known.job_id} from its newest checkpoint "
                             f"(last at step {known.step})")  # fmt: skip
            return self.jobs.put(replace(known, status=JobStatus.RUNNING, restarts=known.restarts + 1,
                                         message="resumed after a controller restart"))  # fmt: skip
        previous = [j for j in self.jobs.for_cluster(self.cluster.name) if j.name == spec.name]
        unfinished = [j for j in previous if j.status in (JobStatus.RUNNING, JobStatus.STOPPED, JobStatus.FAILED)]
        if request.resume:
            if not unfinished:
                raise InputError(
                    f"nothing to resume: no unfinished job named {spec.name!r} on cluster {self.cluster.name}; "
                    "run without --resume to start it"
                )
            job = unfinished[0]
            # a job the user stopped (Ctrl-C) continues as asked: that is no restart; a crash's resume is one
            asked = job.status is JobStatus.STOPPED
            reason = RecoveryReason.USER_RESUME if asked else RecoveryReason.CONTROLLER_RESTART
            self.recovery.trouble(reason, (), 0, job.world_size, time.monotonic(), job.step)
            self.report.note(f"resuming job {job.job_id} (last at step {job.step}, {job.status})")
            return self.jobs.put(replace(job, status=JobStatus.RUNNING, spec_path=str(request.job_path.resolve()),
                                         python=request.python, restarts=job.restarts + (0 if asked else 1),
                                         message="resumed"))  # fmt: skip
        if unfinished:
            self.report.note(
                f"an earlier run of {spec.name} ({unfinished[0].job_id}) ended at step {unfinished[0].step}; "
                "starting afresh (`--resume` would continue it)"
            )
        job_id = request.job_id or new_job_id(spec.name)
        out = request.out_dir or deepvm_home() / "jobs" / job_id
        return self.jobs.put(
            JobRow(job_id=job_id, cluster=self.cluster.name, name=spec.name, spec_path=str(request.job_path.resolve()),
                   status=JobStatus.RUNNING, started_at=utc_now(), updated_at="", step=0,
                   total_steps=spec.steps or 0, world_size=0, loss=None, restarts=0, lost_steps=0,
                   checkpoint_step=-1, cost_base_usd=self.cluster.cost().usd, cost_usd=0.0,
                   out_dir=str(out), python=request.python, message="starting")
        )  # fmt: skip

    def _save(self, **changes: Any) -> None:
        cost = self.cluster.cost().usd - self.job.cost_base_usd
        self.job = self.jobs.put(replace(self.job, cost_usd=max(cost, 0.0), **changes))
        self.saved_at = time.monotonic()

    def _event(self, kind: str, message: str) -> None:
        self.cluster.event(kind, f"{self.job.job_id}: {message}")

    # --- main loop --------------------------------------------------------------------------------
    def run(self) -> TrainResult:
        run: _Run | None = None
        failures = 0
        try:
            while True:
                self._check_cancel(None)
                launch = self._next_launch()
                self.fold_waiting = False  # whatever was ready is in this launch
                run = _Run(Attempt(len(self.attempts) + 1, launch, self.events.put), launch.trainer_ranks)
                self.stall.started(run.attempt.started_at)
                self._save(world_size=run.trainers, message=f"attempt {run.attempt.number} running")
                holders = len(launch.nodes) - len(launch.trainers)
                self.report.note(
                    f"attempt {run.attempt.number}: {_count(run.trainers, 'trainer')}"
                    + (f" + {_count(holders, 'holder')}" if holders else "")
                    + f" ({', '.join(n.name + (f' x{n.ranks}' if n.ranks > 1 else '') for n in launch.nodes)})"
                )
                outcome = self._watch(run)
                self.recovery.attempt_ended(run.attempt.number, run.last_step)
                self.attempts.append(
                    AttemptRecord(run.attempt.number, tuple(n.instance_id for n in launch.nodes), run.trainers,
                                  run.first_step, run.last_step, outcome, run.attempt.returncode or 0,
                                  run.startup_s)
                )  # fmt: skip
                decision = decide(outcome, progressed(run.first_step, run.last_step), failures,
                                  self.request.max_failures, cancelling=self.cancel_mode is not None)  # fmt: skip
                failures = decision.failures
                if decision.action is Action.FINISH:
                    return self._finish(run)
                if decision.action is Action.CANCEL:
                    self._save(status=JobStatus.CANCELLED, message=f"cancelled ({self.cancel_mode})")
                    raise TrainingCancelled(f"cancelled at step {self.job.step} "
                                            f"(checkpoint at step {self.job.checkpoint_step})")  # fmt: skip
                if decision.action is Action.STOP:
                    self._save(status=JobStatus.STOPPED, message="stopped by the user")
                    raise TrainingStopped(
                        f"stopped at step {self.job.step} (checkpoint at step {self.job.checkpoint_step}); "
                        f"`deepvm train {self.request.job_path} --cluster {self.cluster.name} --controller local "
                        "--resume` continues"
                    )
                if decision.action is Action.GIVE_UP:
                    errors = " | ".join(run.errors) or "no error output"
                    raise TrainingFailed(f"{failures} attempts in a row failed without progress: {errors}")
                if decision.action is Action.RECOVER:
                    self._after_failure(run)
                elif self.recovery.open is None:  # stopped, and not by a notice or a fold-in
                    self.recovery.trouble(RecoveryReason.RESTART, (), run.attempt.number, run.trainers,
                                          time.monotonic())
                self._save(restarts=self.job.restarts + 1)
        except BaseException as exc:
            if run is not None and run.attempt.running:
                run.attempt.kill()
            if self.job.status is JobStatus.RUNNING:
                stopped = isinstance(exc, KeyboardInterrupt | TrainingStopped)
                self._save(status=JobStatus.STOPPED if stopped else JobStatus.FAILED,
                           message=str(exc) or type(exc).__name__)  # fmt: skip
            raise

    # --- launching --------------------------------------------------------------------------------
    def _next_launch(self) -> Launch:
        """Prepare the usable nodes and the head, and describe the launch on them; waits for a replacement
        when no trainer is left but one is on its way."""
        self._drain()
        while True:
            endpoints = [e for e in self.cluster.endpoints() if self._usable(e.instance_id)]
            self._prepare(endpoints)
            endpoints = [e for e in endpoints if e.instance_id not in self.excluded]
            holders = [e for e in endpoints if e.role in _HOLDING]
            trainers = [e for e in endpoints if e.role in (Role.TRAINER, Role.ANCHOR)]
            if holders and trainers:
                break
            self._await_replacement(holders_lost=not holders)
        types = {n.instance_id: n.instance_type for n in self.cluster.nodes()}  # one read per launch
        nodes = arrange([cluster_node(e, self.facts.get(types.get(e.instance_id, ""), UNKNOWN)) for e in endpoints])
        homes = {self.prepared[n.instance_id].home for n in nodes}
        if len(homes) != 1:
            raise InputError(f"the nodes' login users have different home directories ({sorted(homes)})")
        speeds = [n.speed / n.ranks for n in nodes if n.trains for _ in range(n.ranks)]  # per trainer rank
        batches = None
        if len(set(speeds)) > 1:  # a mixed plan: per-trainer batch in proportion to speed
            per = self.spec.shrink.keep_global_batch_by == "per_trainer_batch"
            total = self.spec.batch_size * (self.planned_trainers if per else len(speeds))
            batches = split_batch(total, speeds)
        launch = Launch(
            nodes=nodes,
            paths=JobPaths(homes.pop(), self.job.job_id),
            job_file=self.request.job_path.name,
            python=self.request.python,
            planned_trainers=self.planned_trainers,
            master_port=rendezvous_port(),
            env=self.env,
            rank_batches=batches,
        )
        return ready_on_head(launch, self.cluster.keys.internal_key_path)

    def _await_replacement(self, holders_lost: bool) -> None:
        """With no holder or no trainer left, buy what is missing and wait for the next event.

        Checkpoints live on the holders (RAM and disk), so a new holder can only continue the job when
        they were also uploaded to S3 (level l3): its DeepCheck then finds them there."""
        if holders_lost and not can_continue_without_holders(self.spec.checkpoint.levels):
            raise TrainingFailed(
                "no checkpoint holder (on-demand node) of the cluster is reachable, and the checkpoints "
                f"live there; the job's state is lost unless it had L3 (S3). Nodes: {self.excluded}"
            )
        roles = _HOLDING if holders_lost else (Role.TRAINER,)
        for role in roles:
            self._ensure_replacements(role)
        if not any(self.replacements.on_their_way(role) for role in roles):
            what = "checkpoint holder" if holders_lost else "trainer"
            raise TrainingFailed(f"no {what} node is left and no replacement could be bought")
        waiting = ("no checkpoint holder left: waiting for a replacement; the job continues from S3 (L3)"
                   if holders_lost else "no trainer left: waiting for the replacement spot node")  # fmt: skip
        self.report.note(waiting)
        self._handle(self.events.get(), None)

    def _usable(self, instance_id: str) -> bool:
        return instance_id in self.members and instance_id not in self.excluded

    def _drain(self) -> None:
        """Handle what arrived while no attempt ran (a replacement that is ready joins this launch)."""
        while True:
            try:
                self._handle(self.events.get_nowait(), None)
            except queue.Empty:
                return

    def _prepare(self, endpoints: list[SshEndpoint]) -> None:
        """Push to and set up nodes not used yet; read notices on the others' spot nodes. Once the job
        has run, a node that does not answer is dropped (it died meanwhile) instead of failing the job."""
        if self.attempts:
            answers = probe_all([e.host for e in endpoints])
            lost = [(e, a) for e, a in zip(endpoints, answers) if a is not Answer.YES]
            for e, answer in lost:
                self._exclude(e.instance_id, _UNUSABLE[answer])
                self.report.note(f"{e.instance_id} {_UNUSABLE[answer]}: not using it")
            self._retire([e.instance_id for e, _ in lost], "unreachable over SSH")
            endpoints = [e for e, a in zip(endpoints, answers) if a is Answer.YES]
        fresh = [e for e in endpoints if e.instance_id not in self.prepared]
        known_spot = [e for e in endpoints if e.instance_id in self.prepared and e.market is Market.SPOT]
        notices: dict[str, Notice | None] = {}
        if fresh:
            self.report.note(f"preparing {len(fresh)} node(s): push runtime and job, setup, checks")
            states = self._stage(fresh, lambda p: self.report.push(p.host, p.bytes_done, p.bytes_total),
                                 self._node_line)  # fmt: skip
            self.prepared.update(states)
            notices.update({i: state.notice for i, state in states.items()})
        if known_spot:
            found = read_notices([e.host for e in known_spot], self.request.python, self._node_line)
            notices.update({e.instance_id: found[e.host.name] for e in known_spot})
        for instance_id, notice in notices.items():
            if notice is not None:
                self._exclude(instance_id, f"interruption notice ({notice.kind})")
                self.report.note(f"{instance_id} has an interruption notice: not using it")
        if any(n is not None for n in notices.values()):
            self._ensure_replacements()

    def _stage(
        self,
        endpoints: list[SshEndpoint],
        on_push: Callable[[PushProgress], None],
        on_line: Callable[[OutputLine], None],
    ) -> dict[str, NodeState]:
        """Push, set up and check fresh nodes; {instance id: NodeState}. Safe from any thread."""
        hosts = [e.host for e in endpoints]
        states = prepare_nodes(
            hosts,
            {h.name for h, e in zip(hosts, endpoints) if e.market is Market.SPOT},
            runtime_dir=self.runtime,
            job_dir=self.request.job_path.resolve().parent,
            job_id=self.job.job_id,
            setup=self.spec.setup,
            env=self.env,
            python=self.request.python,
            authorize=self.cluster.keys.internal_public,  # how the head logs in to the nodes
            on_push=on_push,
            on_line=on_line,
        )
        return {e.instance_id: states[h.name] for e, h in zip(endpoints, hosts)}

    def _node_line(self, line: OutputLine) -> None:
        self.report.log(line.host, line.text)

    # --- watching an attempt ----------------------------------------------------------------------
    def _watch(self, run: _Run) -> Outcome:
        """Handle events until the attempt's mpirun exits; its outcome."""
        while True:
            self._check_stall(run)
            self._check_cancel(run)
            try:
                item = self.events.get(timeout=1.0)
            except queue.Empty:
                if time.monotonic() - self.saved_at > _SAVE_EVERY_S:
                    self._save()
                continue
            except KeyboardInterrupt:
                self._user_stop(run)
                continue
            try:
                if isinstance(item, AttemptExit) and item.attempt == run.attempt.number:
                    return self._outcome(run, item)
                self._handle(item, run)
            except KeyboardInterrupt:
                self._user_stop(run)

    def _check_cancel(self, run: _Run | None) -> None:
        """`deepvm cancel` leaves a file: stop as on Ctrl-C (checkpoint, then leave), or at once with "now"."""
        cancel_file = self.request.cancel_file
        if self.cancel_mode is not None or cancel_file is None or not cancel_file.exists():
            return
        self.cancel_mode = CancelMode.requested(cancel_file.read_text())
        self.report.note(f"cancel requested ({self.cancel_mode})")
        if run is None:  # between attempts: nothing runs that could checkpoint
            self._save(status=JobStatus.CANCELLED, message=f"cancelled ({self.cancel_mode})")
            raise TrainingCancelled(f"cancelled at step {self.job.step}")
        if self.cancel_mode is CancelMode.NOW:
            self.user_stop = 1
            threading.Thread(target=run.attempt.kill, kwargs={"grace_s": 5.0}, daemon=True).start()
        else:
            self._user_stop(run)

    def _check_stall(self, run: _Run) -> None:
        """Kill an attempt that stopped making progress (see training/control/stall.py); the failure path then
        finds the node that hangs, retires it and relaunches from the newest complete checkpoint."""
        silent = self.stall.stalled(time.monotonic())
        if silent is None or run.hung or not run.attempt.running:
            return
        run.hung = True
        text = f"no progress for {silent:.0f}s (limit {self.stall.limit_s():.0f}s): a node hangs; stopping the job"
        self.report.note(text)
        self._event("stall", text)
        self.recovery.trouble(RecoveryReason.STALL, (), run.attempt.number, run.trainers, time.monotonic(),
                              run.last_step)
        threading.Thread(target=run.attempt.kill, name="kill-hung", daemon=True).start()

    def _outcome(self, run: _Run, done: AttemptExit) -> Outcome:
        outcome = classify(done.returncode, run.status, user_stopped=bool(self.user_stop))
        if outcome is Outcome.FAILED:
            self.report.note(f"attempt {run.attempt.number} failed (mpirun exit {done.returncode})")
        return outcome

    def _user_stop(self, run: _Run) -> None:
        self.user_stop += 1
        if self.user_stop == 1 and run.started == run.trainers:
            self.report.note("stopping: trainers checkpoint and leave (Ctrl-C again to kill at once)")
            run.attempt.request_stop()
            timer = threading.Timer(_STOP_GRACE_S, run.attempt.kill)
            timer.daemon = True
            timer.start()
        else:
            self.report.note("killing the job")
            run.attempt.kill(grace_s=5.0)

    def _handle(self, item: object, run: _Run | None) -> None:
        if isinstance(item, ReplacementNote):
            self.report.note(item.text)
        elif isinstance(item, ReplacementReady):
            self._on_replacement(item, run)
        elif isinstance(item, RankLine) and run is not None and item.attempt == run.attempt.number:
            self._on_line(item, run)

    def _on_line(self, line: RankLine, run: _Run) -> None:
        node = run.attempt.node_of(line.rank)
        event = parse(line.text) if line.stream == "stdout" else None
        if event is not None:
            self._on_event(event, node, line.at, run)
            return
        prefix = f"{node.name} r{line.rank}" if node else LAUNCHER
        if line.stream == "stderr" and line.text.strip():
            run.errors.append(f"[{prefix}] {line.text.strip()}")
        self.report.log(prefix, line.text)

    def _on_event(self, event: Event, node: Node | None, at: float, run: _Run) -> None:
        """Act on one rank's event; `node` is the node mpirun says the line came from (None: unknown)."""
        match event:
            case Start():
                run.started += 1
                if event.rank == 0:
                    run.first_step = run.last_step = event.first_step
                    self._save(total_steps=event.total_steps)
                    if event.synthetic:
                        self.report.note("dataset: synthetic (generated CIFAR-shaped images, not CIFAR-10)")
            case Restored():
                self.report.note(f"restored step {event.step} from {'/'.join(event.levels)} "
                                 f"in {event.seconds:.2f}s")  # fmt: skip
            case Step(rank=0):
                self.stall.progressed(at)
                self._on_step(event, at, run)
            case Saved() | Flush():
                self.stall.progressed(at)
                self._save(checkpoint_step=event.step)
                if isinstance(event, Flush):
                    self.report.note(f"checkpoint of step {event.step} safe at {event.level} "
                                     f"in {event.seconds:.2f}s ({event.reason})")  # fmt: skip
                    self.recovery.checkpointed(at)
            case NoticeSeen() if node is not None:
                self._on_notice(node, event.notice, at, run)
            case End(rank=0):
                run.status = event.status
            case WatcherOff(rank=0) if run.attempt.number == 1:
                self.report.note(f"not watching for Spot notices: {event.reason}")

    def _on_step(self, event: Step, at: float, run: _Run) -> None:
        step = event.step
        run.last_step = step
        if run.startup_s is None:
            run.startup_s = round(at - run.attempt.started_at, 3)
        recovered = self.recovery.stepped(run.attempt.number, run.first_step, step, run.trainers, at)
        if recovered is not None:
            self._recovered(recovered)
        if self.fold_waiting:
            self._fold_in(run)
        share = run.trainers  # trainer 0's samples/s x trainers: the job's rate (equal batches)
        progress = Progress(
            step=step,
            total_steps=self.job.total_steps,
            epoch=event.epoch,
            loss=event.global_loss,
            samples_per_s=event.samples_per_s * share,
            world_size=run.trainers,
            cost_usd=self.job.cost_usd,
            synthetic=event.synthetic,
        )
        self.last_progress = progress
        changes: dict[str, Any] = {"step": max(step, self.job.step), "loss": progress.loss}
        if time.monotonic() - self.saved_at > _SAVE_EVERY_S:
            self._save(**changes)
        else:
            self.job = replace(self.job, **changes)
        self.report.progress(replace(progress, cost_usd=self.job.cost_usd))

    # --- trouble --------------------------------------------------------------------------------
    def _recovered(self, r: Recovery) -> None:
        self._save(lost_steps=self.job.lost_steps + r.lost_steps)
        since = "notice" if r.reason is RecoveryReason.NOTICE else "detection"
        text = (
            f"recovered ({r.reason}): {r.world_before} -> {r.world_after} trainers, resumed at step "
            f"{r.resumed_step}, {r.lost_steps} steps lost, {r.detect_to_resumed_s:.1f}s from {since} to training"
        )
        self.report.note(text)
        self._event("recovered", text)

    def _on_notice(self, node: Node, notice: Notice, at: float, run: _Run) -> None:
        if node.instance_id in self.excluded:
            return
        self._exclude(node.instance_id, f"interruption notice ({notice.kind})")
        self.recovery.trouble(RecoveryReason.NOTICE, (node.instance_id,), run.attempt.number, run.trainers, at)
        text = f"Spot interruption notice on {node.name} ({notice.kind}): checkpointing, then without it"
        self.report.note(text)
        self._event("notice", text)
        self._ensure_replacements()

    def _after_failure(self, run: _Run) -> None:
        """Find the nodes that died (no SSH), drop them and buy replacements."""
        self.report.note("probing the nodes")
        nodes = run.attempt.launch.nodes
        answers = probe_all([n.host for n in nodes])
        dead = tuple(n.instance_id for n, a in zip(nodes, answers) if a is not Answer.YES)
        for instance_id in dead:
            self._exclude(instance_id, "unreachable after the job failed")
        if dead:
            text = f"lost without notice: {', '.join(dead)}; restarting from the newest complete checkpoint"
            self.report.note(text)
            self._event("node-lost", text)
            self._retire(dead, "unreachable over SSH after the job failed")
        reason = RecoveryReason.NODE_LOST if dead else RecoveryReason.RESTART
        self.recovery.trouble(reason, dead, run.attempt.number, run.trainers, time.monotonic(), run.last_step)
        self.cluster.refresh()  # node states (and their costs) from the cloud
        self._ensure_replacements()

    def _exclude(self, instance_id: str, why: str) -> None:
        self.excluded.setdefault(instance_id, why)

    def _retire(self, instance_ids: Sequence[str], why: str) -> None:
        """Terminate nodes the job dropped without the cloud taking them (they hang, or lost their
        network): they would bill until `deepvm down` while their replacements bill too."""
        if not instance_ids:
            return
        try:
            self.cluster.retire(list(instance_ids), why)
        except DeepvmError as exc:
            self.report.note(f"could not terminate {', '.join(instance_ids)} ({exc}); `deepvm down` will")
            return
        self.report.note(f"terminated {', '.join(instance_ids)}: {why}")

    # --- replacements (bought in the background: training/control/replacements.py) ------------------------
    def _ensure_replacements(self, role: Role = Role.TRAINER) -> None:
        """Buy nodes of `role` (spot trainers unless said otherwise) until the plan's count is met again,
        counting those on their way."""
        if not self.request.replace_nodes or not self.replacements.planned[role]:
            return
        usable = [e for e in self.cluster.endpoints() if e.role is role and self._usable(e.instance_id)]
        missing = self.replacements.request(role, len(usable))
        if missing:
            self.report.note(f"requesting {missing} replacement {role.value} node(s) within the plan")

    def _stage_replacement(self, nodes: list[SshEndpoint], note: Callable[[str], None]) -> dict[str, NodeState]:
        return self._stage(nodes, lambda p: None, lambda line: note(f"[{line.host}] {line.text}"))

    def _on_replacement(self, done: ReplacementReady, run: _Run | None) -> None:
        self.replacements.settled(done)
        if done.error is not None:
            self.report.note(f"no replacement node: {done.error}; continuing with what is left")
            self._retire(done.stranded, f"replacement failed: {done.error}")
            return
        self._event("replacement", f"{', '.join(e.instance_id for e in done.added)} ready")
        self.members.update(e.instance_id for e in done.added)
        self.prepared.update(done.states)
        for instance_id, state in done.states.items():
            if state.notice is not None:  # it can happen, and then it is of no use
                self._exclude(instance_id, f"interruption notice ({state.notice.kind})")
        ready = [e for e in done.added if self._usable(e.instance_id)]
        if not ready or run is None or not run.attempt.running:
            return  # the next launch uses it
        self.report.note(f"replacement {', '.join(e.instance_id for e in ready)} ready: folding it in")
        self.fold_waiting = True  # at the attempt's next step: stopping one still starting wastes its start
        if fold_in_now(run.first_step, run.last_step, recovery_in_flight=self.recovery.open is not None):
            self._fold_in(run)

    def _fold_in(self, run: _Run) -> None:
        """Stop the running attempt cleanly so that the next launch includes the new nodes."""
        self.fold_waiting = False
        running = {n.instance_id for n in run.attempt.launch.nodes}
        added = tuple(i for i in self.members if i not in running and i in self.prepared and self._usable(i))
        if not added:
            return
        self.recovery.trouble(RecoveryReason.FOLD_IN, added, run.attempt.number, run.trainers, time.monotonic())
        run.attempt.request_stop()

    # --- the end ----------------------------------------------------------------------------------
    def _finish(self, run: _Run) -> TrainResult:
        trainer0 = run.attempt.launch.trainers[0]
        out = Path(self.job.out_dir)
        if self.spec.run is None:
            fetch_files(trainer0.host, run.attempt.launch.paths.out, _FETCH, out)
        else:
            fetch_tree(trainer0.host, run.attempt.launch.paths.out, out)
        metrics = RunMetrics.read(out)
        self.replacements.wait(timeout_s=300)
        self._save(status=JobStatus.COMPLETED, step=metrics.steps, loss=metrics.final_loss,
                   message=f"completed; model and metrics in {out}")  # fmt: skip
        self._event("completed", f"step {metrics.steps}, loss {metrics.final_loss:.4f}")
        return TrainResult(
            job_id=self.job.job_id,
            cluster=self.cluster.name,
            status=JobStatus.COMPLETED,
            steps=metrics.steps,
            total_steps=metrics.total_steps,
            final_loss=metrics.final_loss,
            synthetic=metrics.synthetic,
            restarts=self.job.restarts,
            lost_steps=self.job.lost_steps,
            cost_usd=round(self.job.cost_usd, 6),
            wall_s=round(time.monotonic() - self.started, 2),
            out_dir=str(out),
            attempts=self.attempts,
            recoveries=self.recovery.closed,
        )


def new_job_id(name: str) -> str:
    """A job's id: its name and the UTC time it was started."""
    return f"{name}-{datetime.now(timezone.utc).strftime('%Y%m%dT%H%M%S')}"


def cluster_node(e: SshEndpoint, facts: TypeFacts) -> Node:
    """A node as a launch uses it: its DeepCheck role from the plan's, its speed and GPUs from its type's
    facts (training.control.plan_facts)."""
    return Node(e.instance_id, e.host, _ROLES[e.role], e.market, e.private_address, facts.tflops or 1.0,
                facts.gpus)  # fmt: skip


def _count(number: int, noun: str) -> str:
    """`1 holder`, `3 trainers`: a count a person reads, not `1 holders`."""
    return f"{number} {noun}" + ("" if number == 1 else "s")
