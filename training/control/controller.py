"""The recovery controller behind `deepvm train`: run a job on a cluster until it completes.

It runs on the cluster's head node for a managed job (training.head.job_service), or in `deepvm train
--controller local`, and drives one mpirun at a time (an attempt) through an AttemptSession
(training.control.session: prepare, launch, watch). It decides only *when* and *on which nodes*; its
parts each keep one thing: the node pool (training.control.nodepool) every node's state, the job record
(training.control.jobrecord) the job's row, the pure core (training.control.attempts) every rule.

The loop, each phase on the controller's thread (threads only post: see session and replacements):

1) next launch: the pool is synced with the cluster's running nodes; nodes that may have changed since
   they last answered are checked (a probe, their notices), new ones prepared, the lost retired; the ladder
   is asked what to buy; with no holder or no trainer usable, the job waits for a node on its way or the
   ladder's next try (never a tight loop). Roles come from the plan: holders keep checkpoints, trainers train.
2) the attempt: the session runs it, and the controller listens: progress and checkpoints from trainer
   0 (saved to the jobs table), notices from any spot node's watcher (an interruption notice: the node
   leaves the pool; a rebalance recommendation: it trains on), nodes ready (folded in: the attempt is asked
   to stop cleanly and relaunched with the bigger world from that step) or refused, the ladder's timer,
   `deepvm cancel`, a hang; the ladder is asked after each (training.control.market). A decision that
   gives nodes up relaunches without them; the budget's stop checkpoints and leaves (`--resume`).
3) the attempt ends, and the controller decides (attempts.decide):
   - completed: fetch model.pt and metrics.json from trainer 0's node (a job's own script: its whole out
     directory, whatever the script wrote there beside deepvm's metrics.json); done.
   - stopped after a notice or for a fold-in: trainers flushed a checkpoint at the current step before
     leaving, so the job relaunches at once from that very step (no work lost, no node asked again).
   - failed (a node died without notice, mpirun aborted, the stall watch killed a hung job): the
     launch's nodes are checked over SSH, the dead ones retired through the cloud (they would bill) and
     replaced, and the job relaunches from the newest complete checkpoint; the work lost is at most one
     checkpoint interval. Attempts that fail without progress are retried while their failures differ
     (at most max_failures in a row); the same failure twice in a row ends the job, with its cause first.
   - Ctrl-C (or `deepvm cancel`): the job stops cleanly (flush, leave), resumable; cancel is final.

The global batch follows the job's shrink policy (the ranks compute it from the plan's trainer count),
so a relaunch on fewer trainers continues the same optimisation. `deepvm train --resume` continues a job
whose controller died (mpirun_guard stops its mpirun when the controller's connection ends: see launcher)
from the newest complete checkpoint.
"""

from __future__ import annotations

import tempfile
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path

from provisioning.clusters.handle import Cluster
from provisioning.core.errors import InputError
from training.control.attempts import (
    Action,
    Failures,
    decide,
    fold_in_now,
)
from training.control.handover import HandedOver, HandOverFailed, HeadHandOver, own_head, retire_predecessor, successor
from training.control.jobrecord import JobRecord, TrainRequest, choose_job, fresh_row, train_result
from training.control.launcher import Launch, Node, cluster_node, split_batch
from training.control.market import LiveMarket, job_offers
from training.control.nodepool import HOLDING, TRAINING, NodePool, Slot
from training.control.nodes import ClusterHandle, ClusterNodes, LadderStep
from training.control.plan_facts import UNKNOWN, planned_trainer_ranks, type_facts, with_market
from training.control.recovery import RecoveryLog
from training.control.replacements import (
    NodeBuyer,
    ReplacementBought,
    ReplacementNote,
    ReplacementReady,
    cloud_buyer,
)
from training.control.scalar_sink import job_sinks
from training.control.script_listener import ScriptListener
from training.control.script_view import at_notice
from training.control.session import AttemptEnd, AttemptRun, AttemptSession, NodeAccess, SshNodes
from training.control.staging import JobPaths, JobToStage, stage_runtime
from training.control.stall import Stall, StallWatch
from training.control.stops import JobStops, TrainingFailed, TrainingStopped
from training.control.winddown import drop_replacements
from training.shared.events import (
    Event,
    Flush,
    Metrics,
    Notice,
    NoticeSeen,
    NotSafe,
    Restored,
    Safe,
    Start,
    Step,
    WatcherOff,
)
from training.shared.job_events import job_message
from training.shared.jobspec import JobSpec, load_job_spec
from training.shared.jobstore import JobStatus, JobStore, train_lock
from training.shared.metrics import METRICS_FILE, RunMetrics
from training.shared.progress import (
    AttemptRecord,
    JobReporter,
    Outcome,
    Progress,
    Recovery,
    RecoveryReason,
    TrainResult,
)
from training.shared.wording import count

_FETCH = ("model.pt", METRICS_FILE)


def train(
    cluster: Cluster, request: TrainRequest, report: JobReporter = JobReporter(), handover: HeadHandOver | None = None
) -> TrainResult:
    """Run the job on `cluster` (the caller's handle of the running cluster `request` names) until it
    completes (see the module docstring); `handover`: how the head hands control of a moved cluster over."""
    spec = load_job_spec(request.job_path)
    cluster.refresh()  # node states from the cloud now: a node that died meanwhile is not used
    with train_lock(cluster.name), tempfile.TemporaryDirectory(prefix="deepvm-train-") as work:
        runtime = stage_runtime(Path(work) / "runtime")
        buyer = cloud_buyer(cluster, request.inside_cluster)
        return Controller(spec, request, cluster, runtime, report, buyer, handover=handover).run()


class Controller:
    """One job's controller; see the module docstring. It is the session's AttemptListener."""

    def __init__(
        self,
        spec: JobSpec,
        request: TrainRequest,
        cluster: ClusterHandle,
        runtime_dir: Path,
        report: JobReporter,
        buyer: NodeBuyer,
        access: NodeAccess | None = None,
        tick_s: float = 1.0,
        handover: HeadHandOver | None = None,
    ) -> None:
        self.spec, self.request, self.cluster, self.report = spec, request, cluster, report
        self.handover = handover  # hands the job to a head in a moved cluster's new zone (None: the head stays)
        if request.handed_from and request.head:  # before the pool is read: the old head never joins a launch
            retire_predecessor(cluster, request.handed_from, request.head, report.note)
        plan = cluster.plan
        offers = request.market or job_offers(plan, cluster.zones)
        self.facts = with_market(type_facts(plan), offers)
        self.planned_trainers = planned_trainer_ranks(plan)
        planned = Counter(g.role for g in plan.nodes for _ in range(g.count))  # an at-risk node drains once met
        self.pool = NodePool(planned, cluster.endpoints())
        self.recovery = RecoveryLog()
        self.job = self._begin()
        head = own_head(cluster.nodes(), request.inside_cluster, request.head)  # the node this controller runs on
        self.market = LiveMarket(
            plan,
            offers,
            request.limits,
            self.job.row.started_at,
            movable=spec.checkpoint_plan.outlives_holders,
            head=None if head is None else head.instance_id,
            zone=head.availability_zone if request.head and head else None,
        )
        node_env = request.node_env if request.node_env is not None else cluster.node_env()
        self.env = {**node_env, **spec.env}  # the job's own settings win
        job = JobToStage(
            runtime_dir,
            request.job_path.resolve().parent,
            self.job.job_id,
            tuple(spec.setup),
            self.env,
            request.python,
            cluster.keys.internal_public,
        )
        self.session = AttemptSession(
            access or SshNodes(),
            job,
            cluster.keys.internal_key_path,
            report,
            StallWatch.of(spec.stall, request.stall_timeout_s, request.startup_grace_s, spec.calls_step),
            tick_s=tick_s,
        )
        self.nodes = ClusterNodes(
            cluster,
            self.pool,
            self.session,
            buyer,
            report,
            self._event,
            self.market,
            self.job.state,
            self.job.ladder_said,
            request.replace_nodes,
        )
        self.stops = JobStops(request, cluster.name, self.job, self.session, self.nodes, report)
        self.attempts: list[AttemptRecord] = []
        self.started = time.monotonic()
        self.scalars = job_sinks(self.job.row, spec.env, report.note)  # TensorBoard, and MLflow if the job sets it
        self.script = ScriptListener(spec, self.job, self.recovery, self.scalars, report, self._recovered)

    def _begin(self) -> JobRecord:
        request, jobs = self.request, JobStore()
        known = jobs.get(request.job_id) if request.job_id is not None else None
        choice = choose_job(
            request,
            self.spec.name,
            known,
            jobs.for_cluster(self.cluster.name),
            lambda job_id: fresh_row(
                request, self.spec.name, self.spec.steps or 0, self.cluster.name, job_id, self.cluster.cost().usd
            ),
        )
        if choice.resumed is not None:  # it continues from its newest checkpoint: a recovery opens
            row = choice.row
            self.recovery.trouble(choice.resumed, (), 0, row.world_size, time.monotonic(), row.step)
        if choice.note:
            self.report.note(choice.note)
        return JobRecord(jobs, choice.row, lambda: self.cluster.cost().usd)

    def _event(self, kind: str, message: str) -> None:
        self.cluster.event(kind, job_message(self.job.job_id, message))
        self.report.event(kind, message)

    # --- the loop ---------------------------------------------------------------------------------------
    def run(self) -> TrainResult:
        failures = Failures()
        try:
            while True:
                self.stops.check_cancel(None)
                self.stops.check_limits(None)
                end = self.session.run(len(self.attempts) + 1, self._next_launch(), self)
                self._ended(end)
                decision = decide(
                    end.outcome,
                    self.script.progressed(end),
                    failures,
                    self.request.max_failures,
                    self.stops.stopping,
                    end.error,
                )
                failures = decision.failures
                if decision.action is Action.FINISH:
                    return self._finish(end)
                self.stops.after_attempt(decision, end)
                if decision.action is Action.RECOVER:
                    if self._after_failure(end):  # a node found dead: the next failure is no repeat of this one
                        failures = failures.nodes_lost()
                elif self.recovery.open is None:  # stopped, and not by a notice or a fold-in
                    self.recovery.trouble(RecoveryReason.RESTART, (), end.number, end.trainers, time.monotonic())
                self.job.relaunched()
        except HandedOver:
            raise  # the job runs on under the new head: nothing of it ends here
        except BaseException as exc:
            if self.job.row.status is JobStatus.RUNNING:
                stopped = isinstance(exc, KeyboardInterrupt | TrainingStopped)
                self.job.ended(JobStatus.STOPPED if stopped else JobStatus.FAILED, str(exc) or type(exc).__name__)
            drop_replacements(self.nodes, self.session, self.report)  # nothing bought for the job bills on
            raise
        finally:
            self.scalars.close()

    def _ended(self, end: AttemptEnd) -> None:
        if end.outcome is Outcome.FAILED:  # its own cause in a few lines (Open MPI's banner stays in the log)
            first, *said = end.error.lines(end.error_node)
            for line in [f"attempt {end.number}: {first}", *said]:
                self.report.note(line)
        self.recovery.attempt_ended(end.number, end.last_step, end.exited_at)
        self.pool.attempt_ended(clean=end.returncode == 0, at=end.exited_at)
        self.market.attempt_ended()
        self.attempts.append(
            AttemptRecord(
                end.number,
                end.node_ids,
                end.trainers,
                end.first_step,
                end.last_step,
                end.outcome,
                end.returncode,
                end.startup_s,
            )
        )

    # --- 1) the next launch -----------------------------------------------------------------------------
    def _next_launch(self) -> Launch:
        """Ready the usable nodes and describe the launch on them; waits for a replacement when no trainer
        or no holder is left but one is on its way, or the ladder will try again."""
        self.session.drain(lambda item: self.on_post(item, None))
        while True:
            self.nodes.ready_for_launch()
            self._ask(None)
            self._hand_over()
            usable = self.nodes.launchable()
            holders = [s for s in usable if s.role in HOLDING]
            if holders and any(s.role in TRAINING for s in usable):
                return self._describe(usable)
            self._await_replacement(holders_lost=not holders)
            self.market.waited()  # the relaunch the ladder measures counts from here, not the wait for nodes

    def _hand_over(self) -> None:
        """After a move's switch, with nothing on its way, hand the job to a head in the new zone (HandedOver), or
        keep it, saying why, when that fails (training.control.handover)."""
        head = self.market.head
        if self.handover is None or head is None or self.market.on_their_way():
            return
        to = successor(self.cluster.nodes(), {s.instance_id for s in self.pool.usable()}, head, self.market.zone)
        if to is None:
            return
        self.job.handing_over(f"control passes to the new head {to.describe()}")
        self.report.note(to.announce())
        self.scalars.close()  # its TensorBoard files travel whole (a later point reopens them here)
        handover, self.handover = self.handover, None  # tried once per job
        try:
            handover(to, self.report.note)
        except HandOverFailed as exc:
            text = f"hand-over to {to.describe()} failed ({exc}): {head} stays the control node"
            self.report.note(text)
            self._event("handover", text)
            return
        self._event("handover", f"control passed from {head} to {to.describe()}")
        raise HandedOver(to)

    def _describe(self, usable: list[Slot]) -> Launch:
        types = {n.instance_id: n.instance_type for n in self.cluster.nodes()}  # one read per launch
        nodes = [cluster_node(s.endpoint, self.facts.get(types.get(s.instance_id, ""), UNKNOWN)) for s in usable]
        homes = {s.home for s in usable}
        if len(homes) != 1:
            raise InputError(f"the nodes' login users have different home directories ({sorted(map(str, homes))})")
        speeds = [n.speed / n.ranks for n in nodes if n.trains for _ in range(n.ranks)]  # per trainer rank
        batches = None
        if len(set(speeds)) > 1:  # a mixed plan: per-trainer batch in proportion to speed
            per = self.spec.shrink.keep_global_batch_by == "per_trainer_batch"
            batches = split_batch(self.spec.batch_size * (self.planned_trainers if per else len(speeds)), speeds)
        return Launch.on(
            nodes,
            JobPaths(str(homes.pop()), self.job.job_id),
            self.request.job_path.name,
            self.request.python,
            self.planned_trainers,
            self.env,
            batches,
            restart_count=len(self.attempts),
            max_restarts=self.request.max_failures,
        )

    def _await_replacement(self, holders_lost: bool) -> None:
        """With no holder or no trainer left, wait for the next post (a node on its way) or the ladder's timer
        (its next try after a refusal), minding `deepvm cancel` and the job's limits meanwhile. A new holder
        continues from S3 (l3) only: _check_holders; new trainers only from a checkpoint."""
        self._check_holders()
        if not holders_lost and self.job.row.checkpoint_step < 0:
            raise TrainingFailed("every trainer was lost before the job's first checkpoint: nothing to resume from")
        what = "checkpoint holder" if holders_lost else "trainer"
        if (why := self.nodes.nothing_coming()) is not None:
            raise TrainingFailed(f"no {what} node is left and none is on its way: {why}")
        self.nodes.waiting(
            "no checkpoint holder left: waiting for a replacement; the job continues from S3 (L3)"
            if holders_lost
            else "no trainer left: waiting for the replacement node"
        )
        wait_s = self.market.wait_s()
        until = None if wait_s is None else time.monotonic() + wait_s
        while (item := self.session.wait_for_post(timeout_s=self.session.tick_s)) is None:
            self.stops.check_cancel(None)
            self.stops.check_limits(None, waiting_for=what)
            if until is not None and time.monotonic() >= until:
                return  # the ladder's next try
        self.on_post(item, None)

    # --- 2) listening to the attempt (AttemptListener) ----------------------------------------------------
    def on_launch(self, run: AttemptRun) -> None:
        self.nodes.waiting(None)
        launch = run.launch
        self.pool.launched((n.instance_id for n in launch.nodes), run.mpirun.started_at)
        self.recovery.launched(run.mpirun.started_at)
        self.script.launched()
        self.job.attempt_started(run.number, run.trainers)
        holders = len(launch.nodes) - len(launch.trainers)
        self.report.note(
            f"attempt {run.number}: {count(run.trainers, 'trainer')}"
            + (f" + {count(holders, 'holder')}" if holders else "")
            + f" ({', '.join(n.name + (f' x{n.ranks}' if n.ranks > 1 else '') for n in launch.nodes)})"
        )

    def on_event(self, event: Event, node: Node | None, at: float, run: AttemptRun) -> None:
        if self.script.heard(event, at, run):  # a launched script's own: its kept files, an adapter's resume
            return
        match event:
            case Start(rank=0):
                self.recovery.started(at)
                self.job.total_steps(event.total_steps)
                self.scalars.launched(event.first_step)
                if event.synthetic:
                    self.report.note("dataset: synthetic (generated CIFAR-shaped images, not CIFAR-10)")
                self.script.started(at, run)
            case Restored():
                self.recovery.restored(at, event.seconds)
                self.report.note(f"restored step {event.step} from {'/'.join(event.levels)} in {event.seconds:.2f}s")
            case Step(rank=0):
                self._on_step(event, at, run)
            case Safe():
                self.job.checkpointed(event.step)
            case NotSafe() if self.spec.calls_step:
                self.report.note(
                    f"checkpoint of step {event.step} is not safe at {event.level}: {event.reason}; "
                    f"the newest safe is step {self.job.row.checkpoint_step}"
                )
            case NotSafe():  # a launched script's kept files: their versions are no steps
                self.report.note(f"kept files (version {event.step}) are not safe at {event.level}: {event.reason}")
            case Flush():
                self.job.checkpointed(event.step)
                self.report.note(
                    f"checkpoint of step {event.step} safe at {event.level} in {event.seconds:.2f}s ({event.reason})"
                )
                if event.ends_run:  # a recommendation's is no recovery's
                    self.recovery.checkpointed(at)
            case NoticeSeen() if node is not None:
                self._on_notice(node, event.notice, at, run)
            case Metrics(rank=0):
                self.scalars.add(event.point, time.time())
                self.report.metrics(event.point)
            case WatcherOff(rank=0) if run.number == 1:
                self.report.note(f"not watching for Spot notices: {event.reason}")

    def on_post(self, item: object, run: AttemptRun | None) -> None:
        if isinstance(item, ReplacementNote):
            self.report.note(item.text)
        elif isinstance(item, ReplacementBought):
            self.nodes.bought(item)
        elif isinstance(item, ReplacementReady):
            self._on_replacement(item, run)

    def on_tick(self, run: AttemptRun) -> None:
        self.stops.check_cancel(run)
        self.stops.check_limits(run)
        self.job.save_if_due()
        if self.market.due():
            self._ask(run)
        self.script.tick(run)

    def on_stall(self, run: AttemptRun, stall: Stall) -> None:
        """The session kills the hung attempt; the failure path then finds the node that hangs, retires it
        and relaunches from the newest complete checkpoint (see training/control/stall.py)."""
        text = stall.text()
        self.report.note(text)
        self._event("stall", text)
        self.recovery.trouble(RecoveryReason.STALL, (), run.number, run.trainers, time.monotonic(), run.last_step)

    def _on_step(self, event: Step, at: float, run: AttemptRun) -> None:
        self.stops.clock.stepped()
        recovered = self.recovery.stepped(run.number, run.first_step, event.step, run.trainers, at)
        if recovered is not None:
            self._recovered(recovered)
        if not run.stopping and self.pool.joinable() and self.market.moving_to is None:  # a replacement ready
            self._fold_in(run)
        if self.market.stepped(event.step):  # the rate moved: the deadline's slack with it
            self._ask(run)
        progress = Progress(
            step=event.step,
            total_steps=self.job.row.total_steps,
            epoch=event.epoch,
            loss=event.global_loss,
            samples_per_s=event.samples_per_s * run.trainers,
            world_size=run.trainers,
            cost_usd=self.job.row.cost_usd,
            synthetic=event.synthetic,
        )  # trainer 0's rate x trainers: equal batches
        self.job.progressed(event.step, progress.loss)
        self.report.progress(replace(progress, cost_usd=self.job.row.cost_usd))

    def _recovered(self, r: Recovery) -> None:
        self.job.recovered(r)
        since = "notice" if r.reason is RecoveryReason.NOTICE else "detection"
        text = (
            f"recovered ({r.reason}): {r.world_before} -> {r.world_after} trainers, {r.resumed_text}, {r.lost_text}, "
            f"{r.detect_to_resumed_s:.1f}s from {since} to {r.again}"
        )
        self.report.note(text)
        self._event("recovered", text)

    def _on_notice(self, node: Node, notice: Notice, at: float, run: AttemptRun) -> None:
        if not self.nodes.noticed(node.instance_id, node.name, notice.kind):  # a recommendation, or known
            return
        self.recovery.trouble(RecoveryReason.NOTICE, (node.instance_id,), run.number, run.trainers, at)
        text = f"Spot interruption notice on {node.name} ({notice.kind}): {at_notice(self.spec)}, then without it"
        self.report.note(text)
        self._event("notice", text)
        self._ask(run)

    def _on_replacement(self, done: ReplacementReady, run: AttemptRun | None) -> None:
        ready = self.nodes.replacement_ready(done)
        self._ask(run)  # a node ready or a pool refusing: the ladder's next rung
        if not ready or run is None or not run.mpirun.running or run.stopping or self.market.moving_to is not None:
            return  # the next launch uses it (a move's nodes: the next launch after its switch)
        self.report.note(f"replacement {', '.join(ready)} ready: folding it in")
        # now, or at the attempt's next step: stopping one that is still starting wastes its start
        if fold_in_now(run.first_step, run.last_step, recovery_in_flight=self.recovery.open is not None):
            self._fold_in(run)

    def _fold_in(self, run: AttemptRun) -> None:
        """Stop the running attempt cleanly so that the next launch includes the new nodes."""
        added = tuple(s.instance_id for s in self.pool.joinable())
        if added:
            self.recovery.trouble(RecoveryReason.FOLD_IN, added, run.number, run.trainers, time.monotonic())
            run.request_stop()

    def _check_holders(self) -> None:
        """With no holder left the checkpoints are gone unless they are in S3 (l3): nothing is bought then."""
        if (lost := self.nodes.checkpoints_lost(self.spec.checkpoint_plan)) is not None:
            raise TrainingFailed(lost)

    def _ask(self, run: AttemptRun | None) -> None:
        """Ask the recovery ladder (training.control.nodes acts) and do what it leaves here: the budget's stop
        (a running attempt checkpoints and leaves, else the job stops now), a relaunch without nodes let go."""
        step: LadderStep = self.nodes.act(ask=True)
        if run is None or not run.mpirun.running:
            if step.stop is not None:
                raise self.stops.budget_reached(step.stop.reason.text)
            return
        if step.stop is not None:
            self.stops.budget = step.stop.reason.text
        elif step.let_go and not run.stopping:
            self.recovery.trouble(RecoveryReason.LADDER, step.let_go, run.number, run.trainers, time.monotonic())
        if (step.stop is not None or step.let_go) and not run.stopping:
            run.request_stop()

    # --- 3) after the attempt --------------------------------------------------------------------------
    def _after_failure(self, end: AttemptEnd) -> tuple[str, ...]:
        """Find the nodes that died (no SSH), retire and replace them; the dead (with notice or without)."""
        self.report.note("probing the nodes")
        found = self.nodes.after_failure(end.node_ids)
        dead = found.all
        reason = (
            RecoveryReason.NODE_LOST
            if found.without_notice
            else RecoveryReason.NOTICE
            if found.noticed
            else RecoveryReason.RESTART
        )
        self.recovery.trouble(reason, dead, end.number, end.trainers, time.monotonic(), end.last_step)
        self.cluster.refresh()  # node states (and their costs) from the cloud
        self._check_holders()
        self._ask(None)
        return dead

    def _finish(self, end: AttemptEnd) -> TrainResult:
        out = Path(self.job.row.out_dir)
        self.session.fetch(
            end.launch.trainers[0].host, end.launch.paths.out, out, _FETCH if self.spec.run is None else None
        )
        metrics = RunMetrics.read(out)
        self.nodes.replacements.wait(timeout_s=300)
        self.nodes.call_off_move()  # a move's nodes, bought for a relaunch that will not come
        self.nodes.release_stand_ins()  # they go with the job, and nothing it drained or lost is left billing
        self.job.completed(metrics, out)
        self._event(
            "completed",
            f"step {metrics.steps}, loss {metrics.final_loss:.4f}"
            if metrics.total_steps
            else "its script completed (it reports no steps)",
        )
        return train_result(
            self.job.row,
            self.cluster.name,
            metrics,
            self.attempts,
            self.recovery.closed,
            time.monotonic() - self.started,
        )
