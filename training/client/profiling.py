"""`deepvm profile`: measure how a job speeds up on 1..N trainer nodes of a cluster that is up.

The job runs as `deepvm train` runs it (training.control.launcher: mpirun on the head node over SSH, deepvm's
worker or the job's own script on every trainer, DeepCheck's holders), once per size, on a subset of
the cluster: the head, the holders and the first n trainer nodes (the anchor first). Nothing is
bought, replaced or retried: a profile is a measurement, and a failure is reported, not recovered.

Each launch runs a derived spec, written beside the job's file on every node (DERIVED_SPEC), that
differs from the job's own only where measuring needs it:
- `steps`: warm-up + repeats x steps (epochs dropped); the learning-rate schedule is the job's over
  those steps;
- `log_every: 1`, so every trainer reports every step's samples/s (a scalar all-reduce and a line per
  step: negligible next to a training step);
- no checkpoint (`every_steps` beyond the end, level l1 only): a save would pause the very steps timed;
- the global batch is the per-trainer batch x n (the launch is planned for n trainers), as DeepVM
  measured its curves: the same work per trainer, more trainers.

A repeat's rate: every trainer reports, after each step, its samples/s since its previous report, so
its time in the repeat's k steps is the sum of batch/rate and its rate over them k / sum(1/rate) (its
batch cancels out); the job's global samples/s is the sum over trainers.
"""

from __future__ import annotations

import hashlib
import json
import shlex
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from pydantic import ValidationError

from provisioning.cloud.types import NodeRecord, SshEndpoint
from provisioning.clusters.handle import RUNNING, Cluster
from provisioning.clusters.store import ClusterStatus
from provisioning.core.errors import DeepvmError, InputError, JobFailed, NotFoundError
from provisioning.planner.plan import Role
from provisioning.scaling.profile import JobIdentity, Measured
from training.control.jobrecord import new_job_id
from training.control.launcher import Launch, Node, cluster_node
from training.control.plan_facts import UNKNOWN, type_facts
from training.control.session import AttemptEnd, AttemptRun, AttemptSession, SshNodes
from training.control.staging import JobPaths, JobToStage, NodeState, stage_runtime
from training.control.stall import Stall, StallWatch
from training.shared.events import End, EndStatus, Event, Step
from training.shared.jobspec import MAX_JOB_BYTES, JobSpec, load_job_spec
from training.shared.jobstore import train_lock
from training.shared.progress import JobReporter, Progress
from training.shared.transport import run_on_hosts, write_files
from training.shared.yamlmarks import read_yaml

DERIVED_SPEC = ".deepvm-profile.yaml"  # the measuring spec, beside the job's own file on every node
_TRAINING = (Role.ANCHOR, Role.TRAINER)


class ProfileFailed(JobFailed):
    """A launch of the profile failed, stopped early or hung; nothing was written."""


@dataclass(frozen=True)
class ProfileRequest:
    """What `deepvm profile` was asked to measure."""

    job_path: Path
    cluster: str
    python: str  # the nodes' interpreter
    sizes: tuple[int, ...] | None  # trainer nodes per launch; None: 1, 2, 4, ... and all of them
    steps: int = 60  # steps in each measured repeat
    warmup: int = 10  # steps run first at each size and not measured
    repeats: int = 3  # measured repeats at each size, one after the other in the same launch


@dataclass(frozen=True)
class ProfileTarget:
    """What will be profiled, known before anything runs on the cluster."""

    cluster: str
    spec: JobSpec
    job: JobIdentity
    instance_type: str  # of every trainer node
    trainer_nodes: int  # trainer nodes running (the anchor counts)
    sizes: tuple[int, ...]
    usd_per_hour: float  # what the whole cluster bills while the profile runs
    warmup_steps: int
    steps: int
    repeats: int
    measuring_spec: str  # the job as each launch runs it (derived_spec), fixed when the profile starts

    @property
    def total_steps(self) -> int:
        """Steps of each launch."""
        return self.warmup_steps + self.repeats * self.steps


def default_sizes(trainer_nodes: int) -> tuple[int, ...]:
    """1, 2, 4, ... below the trainer count, and the count itself."""
    sizes, n = [], 1
    while n < trainer_nodes:
        sizes.append(n)
        n *= 2
    return (*sizes, trainer_nodes)


def profile_target(request: ProfileRequest, cluster: Cluster) -> ProfileTarget:
    """Check the job, the cluster (the command's handle of the one `request` names) and the sizes (one
    InputError or NotFoundError line each) before anything runs: the cluster is up, trains on one instance
    type and has the trainers the sizes need."""
    spec = load_job_spec(request.job_path)
    measuring = derived_spec(request.job_path, request.warmup + request.repeats * request.steps)
    name = cluster.name
    if not cluster.is_up:
        raise NotFoundError(f"cluster {name} is {cluster.row.status}, not up; `deepvm up --name {name}` starts one")
    trainers = _trainer_nodes(cluster.nodes())
    sizes = _sizes(request.sizes, len(trainers), name)
    types = sorted({n.instance_type for n in trainers})
    if len(types) > 1:
        raise InputError(
            f"cluster {name} trains on {' and '.join(types)}: a profile measures one instance type "
            "(profile on a cluster of one trainer type)"
        )
    view = cluster.view()  # node states from the cloud now
    running = _trainer_nodes(view.nodes)
    if view.cluster.status is not ClusterStatus.UP or len(running) < sizes[-1]:
        raise NotFoundError(
            f"cluster {name} is {view.cluster.status} with {len(running)} trainer nodes running; "
            f"profiling up to {sizes[-1]} needs them running"
        )
    if not any(n.state == RUNNING and n.role in (Role.ANCHOR, Role.HOLDER) for n in view.nodes):
        raise NotFoundError(
            f"cluster {name} has no on-demand node running (anchor or holder): its jobs, the "
            "profile's too, launch from there"
        )
    _no_running_job(cluster, request.python)
    return ProfileTarget(
        cluster=name,
        spec=spec,
        job=JobIdentity(name=spec.name, spec_sha256=spec_hash(spec), file=str(request.job_path)),
        instance_type=types[0],
        trainer_nodes=len(running),
        sizes=sizes,
        usd_per_hour=view.usd_per_hour,
        warmup_steps=request.warmup,
        steps=request.steps,
        repeats=request.repeats,
        measuring_spec=measuring,
    )


def _no_running_job(cluster: Cluster, python: str) -> None:
    """A managed job on the cluster would share its trainers with the profile and skew both (the caller has
    just read the cluster's nodes from the cloud)."""
    from training.client.managed import head_of, running_jobs

    try:
        head = head_of(cluster, python, refreshed=True)
    except InputError:  # no on-demand head: no managed job either
        return
    busy = running_jobs(head)
    if busy:
        job = busy[0].job_id
        raise InputError(
            f"cluster {cluster.name} is running job {job}, which would skew the measurements; profile "
            f"once it ends (`deepvm logs {job} -f`) or stop it (`deepvm cancel {job}`)"
        )


def spec_hash(spec: JobSpec) -> str:
    """SHA-256 of the validated spec: the same job however its file is written (comments, order, defaults)."""
    canonical = json.dumps(spec.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def _trainer_nodes(nodes: list[NodeRecord]) -> list[NodeRecord]:
    """The running trainer nodes, in the order sizes take them: the anchor (the head), then by id."""
    running = [n for n in nodes if n.state == RUNNING and n.role in _TRAINING]
    return sorted(running, key=lambda n: (n.role is not Role.ANCHOR, n.instance_id))


def _sizes(asked: tuple[int, ...] | None, trainer_nodes: int, cluster: str) -> tuple[int, ...]:
    if trainer_nodes < 2:
        raise InputError(
            f"cluster {cluster} has {trainer_nodes} trainer node(s) running: a profile measures 2 sizes at least"
        )
    if asked is None:
        return default_sizes(trainer_nodes)
    sizes = tuple(sorted(set(asked)))
    too_big = [n for n in sizes if n > trainer_nodes]
    if too_big:
        raise InputError(
            f"--sizes {','.join(map(str, too_big))}: cluster {cluster} has {trainer_nodes} trainer "
            f"nodes; sizes go up to {trainer_nodes}"
        )
    if sizes[0] < 1:
        raise InputError(f"--sizes {sizes[0]}: sizes are trainer node counts from 1")
    if sizes[0] != 1 or len(sizes) < 2:
        raise InputError("--sizes must include 1 (speed-ups are over one node) and one more size at least")
    return sizes


def derived_spec(job_path: Path, total_steps: int) -> str:
    """The measuring spec's YAML (see the module docstring), validated as a job spec."""
    data = dict(read_yaml(job_path, "job file", MAX_JOB_BYTES).data)
    data.pop("epochs", None)
    data["steps"] = total_steps
    data["log_every"] = 1
    checkpoint = {k: v for k, v in dict(data.get("checkpoint") or {}).items() if k != "every_seconds"}
    data["checkpoint"] = {**checkpoint, "every_steps": total_steps + 1, "levels": ["l1"]}
    try:
        JobSpec.model_validate(data)  # the job's own spec was valid; this one must be too
    except ValidationError as exc:
        raise InputError(f"{job_path}: cannot be profiled as it is: {exc.errors()[0]['msg']}") from None
    return yaml.safe_dump(data, sort_keys=False)


def repeat_rates(
    reported: dict[int, dict[int, float]], trainers: int, warmup: int, steps: int, repeats: int
) -> tuple[float, ...]:
    """The job's global samples/s in each repeat, from every trainer's per-step rates ({trainer: {step:
    samples/s since its previous report}}): per trainer k / sum(1 / rate) over the repeat's k steps, summed."""
    rates = []
    for repeat in range(repeats):
        first = warmup + repeat * steps + 1
        window = range(first, first + steps)
        total = 0.0
        for trainer in range(trainers):
            seen = reported.get(trainer, {})
            missing = [step for step in window if step not in seen]
            if missing:
                raise ProfileFailed(f"trainer {trainer} reported no progress for step {missing[0]}")
            if any(seen[step] <= 0 for step in window):
                raise ProfileFailed(
                    "the job reports no samples per step: a `run:` script must pass samples= to "
                    "ctx.step() to be profiled"
                )
            total += steps / sum(1.0 / seen[step] for step in window)
        rates.append(round(total, 4))
    return tuple(rates)


def measure(
    cluster: Cluster,
    target: ProfileTarget,
    request: ProfileRequest,
    report: JobReporter,
    on_estimate: Callable[[float], None] = lambda seconds: None,
) -> list[Measured]:
    """Run the job at each size on `cluster` (profile_target's) and measure it; `on_estimate` gets the
    seconds the remaining sizes should take, once the first size has run."""
    with train_lock(target.cluster), tempfile.TemporaryDirectory(prefix="deepvm-profile-") as work:
        return _Profiler(cluster, target, request, report, Path(work)).run(on_estimate)


class _Profiler:
    def __init__(
        self, cluster: Cluster, target: ProfileTarget, request: ProfileRequest, report: JobReporter, work: Path
    ) -> None:
        self.target, self.request, self.report = target, request, report
        self.job_id = new_job_id(f"{target.spec.name}-profile")
        self.cluster = cluster
        env = {**self.cluster.node_env(), **target.spec.env}
        runtime, job_dir, key = stage_runtime(work / "runtime"), request.job_path.resolve().parent, self.cluster.keys
        self.job = JobToStage(
            runtime, job_dir, self.job_id, tuple(target.spec.setup), env, request.python, key.internal_public
        )
        self.access = SshNodes()
        self.started = time.monotonic()

    def _session(self) -> AttemptSession:
        """A session for one launch (its own stall watch, as each size's pace is its own; the job file's limits,
        as `deepvm train` has them); Ctrl-C ends the profile: nothing is written."""
        spec = self.target.spec
        return AttemptSession(
            self.access,
            self.job,
            self.cluster.keys.internal_key_path,
            self.report,
            StallWatch.of(spec.stall, None, None, spec.calls_step),
            ctrl_c_stops=False,
        )

    def run(self, on_estimate: Callable[[float], None]) -> list[Measured]:
        endpoints = {e.instance_id: e for e in self.cluster.endpoints()}
        nodes = self.cluster.nodes()
        facts = type_facts(self.cluster.plan)
        trainers = [n for n in _trainer_nodes(nodes) if n.instance_id in endpoints][: self.target.sizes[-1]]
        holders = [n for n in nodes if n.role is Role.HOLDER and n.instance_id in endpoints]
        used = [endpoints[n.instance_id] for n in trainers + holders]
        try:
            states = self._prepare(used)
            measured = []
            for n in self.target.sizes:
                began = time.monotonic()
                chosen = [
                    cluster_node(endpoints[c.instance_id], facts.get(c.instance_type, UNKNOWN))
                    for c in trainers[:n] + holders
                ]
                measured.append(Measured(n, self._measure(self._launch(chosen, states, n), n)))
                if n == self.target.sizes[0]:
                    on_estimate(self._remaining(time.monotonic() - began))
            return measured
        finally:
            self._clean_up(used)

    def _clean_up(self, endpoints: list[SshEndpoint]) -> None:
        """Remove the profile's job directory from the nodes: the model and state trainer 0 saved at each
        size are of no use, and would fill a node's disk over many profiles."""
        root = shlex.quote(f"deepvm/jobs/{self.job_id}")  # relative to the login user's home, as staging's
        try:
            run_on_hosts([e.host for e in endpoints], f"rm -rf {root}", lambda line: None, timeout=60)
        except DeepvmError as exc:
            self.report.note(f"could not remove {root} from every node ({exc})")

    def _prepare(self, endpoints: list[SshEndpoint]) -> dict[str, NodeState]:
        """Push the runtime and the job, run setup, check the nodes; write the measuring spec beside it."""
        self.report.note(f"preparing {len(endpoints)} node(s): push runtime and job, setup, checks")
        states = self._session().prepare(endpoints)
        noticed = [e.host.name for e in endpoints if states[e.instance_id].notice is not None]
        if noticed:
            raise ProfileFailed(
                f"{noticed[0]} has a Spot interruption notice: profile once the cluster is whole "
                "again (`deepvm status` shows its nodes)"
            )
        homes = {state.home for state in states.values()}
        if len(homes) != 1:
            raise InputError(f"the nodes' login users have different home directories ({sorted(homes)})")
        spec = self.target.measuring_spec.encode()  # as read before anything ran: the job the profile names
        where = f"{JobPaths(homes.pop(), self.job_id).job}/{DERIVED_SPEC}"
        hosts = [e.host for e in endpoints]
        with ThreadPoolExecutor(max_workers=min(8, len(hosts))) as pool:
            list(pool.map(lambda host: write_files(host, {where: spec}), hosts))
        return states

    def _launch(self, nodes: list[Node], states: dict[str, NodeState], n: int) -> Launch:
        home = states[nodes[0].instance_id].home
        self.report.note(
            f"{n} trainer node{'s' if n > 1 else ''}: {self.target.warmup_steps} warm-up steps, then "
            f"{self.target.repeats} x {self.target.steps} measured"
        )
        return Launch.on(
            nodes,
            JobPaths(home, self.job_id),
            DERIVED_SPEC,
            self.request.python,
            sum(node.ranks for node in nodes if node.trains),
            self.job.env,
        )

    def _measure(self, launch: Launch, n: int) -> tuple[float, ...]:
        """Run one launch to its end; the global samples/s of each repeat."""
        size = _SizeRun(self, n, launch.trainer_ranks)
        end = self._session().run(n, launch, size)
        return self._rates(size, end, n)

    def progress(self, step: Step, trainers: int) -> Progress:
        return Progress(
            step=step.step,
            total_steps=self.target.total_steps,
            epoch=step.epoch,
            loss=step.global_loss,
            samples_per_s=step.samples_per_s * trainers,
            world_size=trainers,
            cost_usd=self.target.usd_per_hour * (time.monotonic() - self.started) / 3600,
            synthetic=step.synthetic,
        )

    def _rates(self, size: _SizeRun, end: AttemptEnd, n: int) -> tuple[float, ...]:
        """Each repeat's global samples/s, or ProfileFailed saying why there is none."""
        where = f"{n} trainer node{'s' if n > 1 else ''}"
        if end.returncode != 0:
            errors = " | ".join(end.errors) or "no error output"
            raise ProfileFailed(f"profiling on {where} failed (mpirun exit {end.returncode}): {errors}")
        if any(status is not EndStatus.COMPLETED for status in size.ended.values()):
            raise ProfileFailed(f"the job stopped early on {where} (a Spot notice?); nothing was written")
        target = self.target
        rates = repeat_rates(size.rates, size.trainers, target.warmup_steps, target.steps, target.repeats)
        self.report.note(f"{where}: {', '.join(f'{r:,.1f}' for r in rates)} samples/s")
        return rates

    def _remaining(self, first_size_s: float) -> float:
        """The seconds the other sizes should take if each takes as long as the first (steps of more nodes
        take at least as long: a lower bound of sorts)."""
        return first_size_s * (len(self.target.sizes) - 1)


@dataclass
class _SizeRun:
    """What one launch reported: the listener of its attempt (training.control.session)."""

    profiler: _Profiler
    nodes: int  # trainer nodes
    trainers: int  # trainer ranks
    rates: dict[int, dict[int, float]] = field(default_factory=dict)  # trainer -> step -> samples/s
    ended: dict[int, EndStatus] = field(default_factory=dict)  # trainer -> End status

    def on_launch(self, run: AttemptRun) -> None:
        pass

    def on_event(self, event: Event, node: Node | None, at: float, run: AttemptRun) -> None:
        if isinstance(event, Step):
            self.rates.setdefault(event.rank, {})[event.step] = event.samples_per_s
            if event.rank == 0:
                self.profiler.report.progress(self.profiler.progress(event, self.trainers))
        elif isinstance(event, End):
            self.ended[event.rank] = event.status

    def on_post(self, item: object, run: AttemptRun | None) -> None:
        pass  # nothing else posts to a profile's session

    def on_tick(self, run: AttemptRun) -> None:
        pass

    def on_stall(self, run: AttemptRun, stall: Stall) -> None:
        raise ProfileFailed(f"{stall.found} on {self.nodes} trainer nodes: {stall.meaning}; nothing was written")
