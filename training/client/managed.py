"""The user's side of managed training: submit a job to the cluster's head, follow its log, cancel it,
list jobs, fetch outputs. Every function here returns once it has what it asked for; none of them has to
keep running for the job to go on (see training/__init__.py for what runs where).

A submitted job is also recorded in this machine's jobs table (controller = the head's instance id), so
that `deepvm logs JOB` knows which cluster to ask, and `deepvm status` has the last values it heard
from the head after the cluster is gone.
"""

from __future__ import annotations

import contextlib
import shlex
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from provisioning.cloud.keys import HOST_KEYS_DIR, pinned_host_keys
from provisioning.cloud.ssh import TransportError
from provisioning.cloud.types import HostSpec
from provisioning.clusters.handle import Cluster
from provisioning.clusters.head import head_node
from provisioning.clusters.on_demand import on_demand_prices
from provisioning.clusters.store import utc_now
from provisioning.core.errors import InputError, NotFoundError
from provisioning.core.home import deepvm_home
from training.control.handover import HANDING_OVER
from training.control.head_start import HEAD_ENV, start_script
from training.control.jobrecord import TrainRequest, new_job_id
from training.control.market import job_offers
from training.control.staging import RUNTIME_DIR, authorize_lines, stage_runtime
from training.shared.guard import SECRET_FILE, JobGuard, ResumeFrom
from training.shared.jobspec import load_job_spec
from training.shared.jobstore import JobRow, JobStatus, JobStore
from training.shared.layout import MANAGED_HOME, JobFiles
from training.shared.progress import JobReporter, TrainResult
from training.shared.records import HeadJob, JobSummary, LogKind, LogRecord
from training.shared.summary import RunSummary
from training.shared.transport import (
    OutputLine,
    PushProgress,
    push_tree,
    run_command,
    run_on_hosts,
    write_files,
)

_NEW_HEAD_WAIT_S = 120.0  # after a hand-over, how long a follower looks for the new head
_NEW_HEAD_POLL_S = 3.0


@dataclass(frozen=True)
class Head:
    """The node a cluster's managed jobs run on, and how this machine logs in to it."""

    cluster: str
    instance_id: str
    host: HostSpec
    python: str  # the head's interpreter for deepvm's own modules


@dataclass(frozen=True)
class FollowEnd:
    """How following a job's log ended."""

    status: JobStatus  # the job's final state, or RUNNING when only its log ended
    text: str  # why, as the head said it
    next_line: int  # where a later follow starts


def find_head(cluster: str, python: str) -> Head:
    """The head of the cluster named `cluster` (NotFoundError unless it is up)."""
    return head_of(Cluster.open_running(cluster), python)


def head_of(cluster: Cluster, python: str, refreshed: bool = False) -> Head:
    """The cluster's head (provisioning.clusters.head), as a host this machine can log in to. Its nodes are read
    from the cloud first, unless the caller just did (`refreshed`): a head may have handed control of a moved
    cluster to a node it bought in the new zone, which this machine has not recorded yet, and terminated itself
    (training/control/handover.py); head_node's rule names the new head once the cloud says so, even for a
    user who was away during the move."""
    if not refreshed:
        cluster.refresh()
    endpoints = {e.instance_id: e for e in cluster.endpoints()}
    node = head_node(cluster.nodes())
    if node is None or node.instance_id not in endpoints:
        raise InputError(
            f"cluster {cluster.name} has no running on-demand node to run the job's controller on; "
            "train with --controller local"
        )
    return Head(cluster.name, node.instance_id, endpoints[node.instance_id].host, python)


@dataclass(frozen=True)
class Guarded:
    """What `deepvm train` checked of a managed job beyond its request (its limits are the request's): its
    money guard."""

    guard: JobGuard = field(default_factory=JobGuard)  # autodown, --idle, --max-duration, the hook, outputs
    secret: str = ""  # what the hook's posts are signed with (config's notify_secret): a 0600 file on the head
    resume: ResumeFrom | None = None  # continue this job from its checkpoint in S3 (its id: `resumed_id`)
    resumed_id: str = ""


@dataclass(frozen=True)
class Submitted:
    """A job started under its controller on the cluster's head."""

    job: JobRow
    head: Head


def submit(cluster: Cluster, request: TrainRequest, report: JobReporter, guarded: Guarded) -> Submitted:
    """Stage the job on the cluster's head and start its supervised controller there; the job's row. Its
    limits (deadline, budget, fallback cap) go with it as `deepvm train` checked them, and the pools its
    recovery ladder may buy from, priced here from the plan's catalog."""
    spec = load_job_spec(request.job_path)
    cluster.refresh()  # node states from the cloud now: a node interrupted since is skipped
    head = head_of(cluster, request.python, refreshed=True)
    busy = running_jobs(head)
    if busy:
        raise InputError(
            f"cluster {head.cluster} is running job {busy[0].job_id}; wait for it (`deepvm logs "
            f"{busy[0].job_id} -f`) or stop it (`deepvm cancel {busy[0].job_id}`)"
        )
    keys = cluster.keys
    job_id = guarded.resumed_id or new_job_id(spec.name)
    files = JobFiles(job_id)

    def push(p: PushProgress) -> None:
        report.push(p.host, p.bytes_done, p.bytes_total)

    report.note(f"staging job {job_id} on the head node {head.instance_id} ({head.host.address})")
    with tempfile.TemporaryDirectory(prefix="deepvm-submit-") as work:
        push_tree([head.host], stage_runtime(Path(work) / "runtime"), RUNTIME_DIR, progress=push)
    push_tree([head.host], request.job_path.resolve().parent, files.job_dir, progress=push)
    _authorize_internal_key(cluster, report)
    record = HeadJob(
        job_id=job_id,
        cluster=cluster.row,
        nodes=tuple(cluster.nodes()),
        job_file=request.job_path.name,
        python=request.python,
        replace_nodes=request.replace_nodes,
        max_failures=request.max_failures,
        stall_timeout_s=request.stall_timeout_s,
        startup_grace_s=request.startup_grace_s,
        node_env=cluster.node_env(),
        service_env=cluster.controller_env(),
        submitted_at=utc_now(),
        limits=request.limits,
        market=request.market or job_offers(cluster.plan, cluster.zones),
        guard=guarded.guard,
        on_demand_prices=on_demand_prices(cluster.plan),
        resume=guarded.resume,
    )
    internal = keys.internal_key_path.read_bytes()
    cluster_dir = files.cluster_dir(head.cluster)
    pins = {f"{cluster_dir}/{HOST_KEYS_DIR}/{iid}": f"{key}\n".encode() for iid, key in pinned_host_keys(keys).items()}
    write_files(
        head.host,
        {
            f"{cluster_dir}/id_ed25519": internal,  # the head logs in to the nodes with the internal key
            f"{cluster_dir}/internal_ed25519": internal,
            **pins,  # each node's host key as pinned here: the head checks them as this machine does
            files.record: record.to_json().encode(),
            **({f"{files.root}/{SECRET_FILE}": guarded.secret.encode()} if guarded.secret else {}),  # 0600, no argv
        },
    )
    out = request.out_dir or deepvm_home() / "jobs" / job_id
    job = JobStore().put(
        JobRow(
            job_id=job_id,
            cluster=head.cluster,
            name=spec.name,
            spec_path=str(request.job_path.resolve()),
            status=JobStatus.RUNNING,
            started_at=utc_now(),
            updated_at="",
            step=0,
            total_steps=spec.steps or 0,
            world_size=0,
            loss=None,
            restarts=0,
            lost_steps=0,
            checkpoint_step=-1,
            cost_base_usd=0.0,
            cost_usd=0.0,
            out_dir=str(out),
            python=request.python,
            message=f"submitted to the head {head.instance_id}",
            controller=head.instance_id,
            outputs_url=guarded.guard.outputs_url,
            down_when_done=guarded.guard.down_when_done,
        )
    )
    run_on_head(head, start_script(files, request.python, record.service_env), report.note)
    report.note(f"job {job_id} runs under its controller on {head.instance_id}")
    return Submitted(job, head)


def _authorize_internal_key(cluster: Cluster, report: JobReporter) -> None:
    """Let the head log in to every node with the cluster-internal key (nodes bought later get it at boot
    from their user data)."""
    hosts = [e.host for e in cluster.endpoints()]
    script = "set -e\n" + "\n".join(authorize_lines(cluster.keys.internal_public))
    codes = run_on_hosts(hosts, script, lambda line: report.log(line.host, line.text))
    failed = [name for name, code in codes.items() if code != 0]
    if failed:
        raise TransportError(f"could not authorise the cluster's internal key on {', '.join(failed)}")


def run_on_head(head: Head, script: str, on_text: Callable[[str], None]) -> list[str]:
    """Run a script on the head; its stdout lines (stderr goes to on_text). A failure is one error."""
    out: list[str] = []
    errors: list[str] = []

    def line(item: OutputLine) -> None:
        (out if item.stream == "stdout" else errors).append(item.text)

    code = run_command(head.host, script, line)
    for text in errors:
        on_text(f"[{head.host.name}] {text}")
    if code != 0:
        raise TransportError(f"{head.host.where}: {errors[-1] if errors else f'exit {code}'}")
    return out


def query_script(head: Head, args: str) -> str:
    """The shell line that runs `python -m training.head.query ARGS` on the head, in its managed home."""
    return f"{HEAD_ENV} && {shlex.quote(head.python)} -m training.head.query {args}"


def follow(
    head: Head,
    job_id: str,
    on_record: Callable[[LogRecord], None],
    start: int = 0,
    tail: int | None = None,
    keep_following: bool = True,
) -> FollowEnd:
    """Hand each record of the job's log to on_record, from line `start` (or the last `tail` lines), until
    the job is over (or the log's current end, without keep_following). The end's status is the last state
    record read: lines that begin after the job's end (`--tail 1` of a job that completed: its last line is the
    note of what still bills) say none, and job_on(head, job_id) has it."""
    flags = f"--from {start}" + (f" --tail {tail}" if tail is not None else "") + (" --follow" * keep_following)
    state = FollowEnd(JobStatus.RUNNING, "", start)
    errors: list[str] = []

    def line(item: OutputLine) -> None:
        nonlocal state
        if item.stream == "stderr":
            errors.append(item.text)
            return
        try:
            record = LogRecord.from_json(item.text)
        except (ValueError, TypeError):
            return  # a line the head's service did not write as a record (cannot happen unless edited)
        state = replace(state, next_line=state.next_line + 1)
        if record.kind is LogKind.STATE and record.status is not None:
            state = replace(state, status=record.status, text=record.text)
        on_record(record)

    code = run_command(head.host, query_script(head, f"log {shlex.quote(job_id)} {flags}"), line)
    if code == 2:
        raise _no_such_job(head, job_id)
    if code != 0:
        why = errors[-1] if errors else f"exit {code}"
        raise TransportError(f"{head.host.where}: reading the job's log failed: {why}")
    return state


def follow_across(
    head: Head,
    job_id: str,
    on_record: Callable[[LogRecord], None],
    tail: int | None = None,
    wait_s: float = _NEW_HEAD_WAIT_S,
) -> tuple[FollowEnd, Head]:
    """follow (from the log's first line, or its last `tail` lines, until the job is over), across a hand-over of
    control to a new head (training/control/handover.py): when the head stops answering after its log said it
    hands control over, the cluster's head is found again (find_head reads the nodes from the cloud) and its log
    followed on from the line after that note, the last the two logs share (the old head's later lines, already
    shown, are its own). Begun at the last `tail` lines, the note's line number is not known here: the new
    head's log is then read from its first line, and shown from the line after the same note (the copy's lines
    are the same records). Any other failure is raised as follow's. How the log ended, and the head it ended
    on (the job's outputs are there)."""
    start, reached = 0, 0
    handed: tuple[LogRecord, int] | None = None  # the hand-over's note on the head followed, and its next line
    skip_to: LogRecord | None = None  # on a new head read from its first line: what is shown already ends here

    def count(record: LogRecord) -> None:
        nonlocal reached, handed, skip_to
        reached += 1
        if skip_to is not None:
            skip_to = None if record == skip_to else skip_to
            return
        if record.kind is LogKind.NOTE and record.text.startswith(HANDING_OVER):
            handed = (record, reached)  # the lines before this one's end are on the new head too
        on_record(record)

    while True:
        try:
            return follow(head, job_id, count, start=start, tail=tail), head
        except TransportError:
            if handed is None:
                raise
            note, shared = handed
            head, handed = _next_head(head, wait_s), None
            if tail is None:  # line numbers known: on from the line after the note
                start = reached = shared
            else:
                start, reached, skip_to, tail = 0, 0, note, None


def _next_head(old: Head, wait_s: float) -> Head:
    """The cluster's head once it is another than `old` (EC2 may say the old one runs for a moment after its
    SSH ended); TransportError when none is found within `wait_s`."""
    deadline = time.monotonic() + wait_s
    while True:
        head = find_head(old.cluster, old.python)
        if head.instance_id != old.instance_id:
            return head
        if time.monotonic() >= deadline:
            raise TransportError(
                f"{old.host.where} handed control over and stopped answering, and no new head "
                f"of cluster {old.cluster} runs yet; `deepvm logs JOB -f` finds it later"
            )
        time.sleep(_NEW_HEAD_POLL_S)


def _no_such_job(head: Head, job_id: str) -> NotFoundError:
    return NotFoundError(f"no job {job_id} on cluster {head.cluster}'s head; `deepvm jobs {head.cluster}` lists them")


def jobs_on(head: Head) -> list[JobSummary]:
    """The jobs the head knows, newest first; this machine's rows are brought up to date with them."""
    # a head that never ran a managed job has no jobs, and maybe no deepvm runtime to ask with yet
    script = f'[ -d "$HOME/{MANAGED_HOME}/jobs" ] || exit 0\n{query_script(head, "jobs")}'
    summaries = [JobSummary.from_json(text) for text in run_on_head(head, script, lambda _: None) if text]
    _remember(summaries)
    return summaries


def job_on(head: Head, job_id: str) -> JobSummary | None:
    """The job as the head knows it now (None: the head has no such job)."""
    return next((s for s in jobs_on(head) if s.job_id == job_id), None)


def summary_on(head: Head, job_id: str) -> RunSummary:
    """The job's run summary as its head makes it (the one written at its end, or as of now)."""
    lines = run_on_head(head, query_script(head, f"summary {shlex.quote(job_id)}"), lambda _: None)
    return RunSummary.from_json(lines[-1])


def running_jobs(head: Head) -> list[JobSummary]:
    """The head's jobs whose controller runs now."""
    return [s for s in jobs_on(head) if s.status is JobStatus.RUNNING and s.controller_alive]


def _remember(summaries: list[JobSummary]) -> None:
    jobs = JobStore()
    for s in summaries:
        mine = jobs.get(s.job_id)
        if mine is not None and s.cluster:
            jobs.put(
                replace(
                    mine,
                    status=s.status,
                    step=s.step,
                    total_steps=s.total_steps,
                    loss=s.loss,
                    world_size=s.world_size,
                    checkpoint_step=s.checkpoint_step,
                    restarts=s.restarts,
                    lost_steps=s.lost_steps,
                    cost_usd=s.cost_usd,
                    message=s.message,
                    ladder=s.ladder,
                )
            )


def cancel(head: Head, job_id: str, now: bool) -> None:
    """Ask the job's controller to stop (after a checkpoint, or at once with `now`)."""
    code = run_command(head.host, query_script(head, f"cancel {shlex.quote(job_id)}" + " --now" * now), lambda _: None)
    if code == 2:
        raise _no_such_job(head, job_id)
    if code != 0:
        raise TransportError(f"{head.host.where}: cancelling {job_id} failed (exit {code})")


def fetch_outputs(head: Head, job_id: str, out_dir: Path) -> TrainResult | None:
    """Once the job has completed, copy its outputs from the head into out_dir and return its result
    (its out_dir this one); None for a job that has not (its head holds no outputs:
    training.control.leftovers finds what it left on the nodes)."""
    from training.shared.transport import fetch_files, fetch_tree

    files = JobFiles(job_id)
    try:
        with tempfile.TemporaryDirectory(prefix="deepvm-result-") as work:
            fetch_files(head.host, files.root, ["result.json"], Path(work))
            result = TrainResult.from_json((Path(work) / "result.json").read_text())
    except TransportError:
        return None
    fetch_tree(head.host, files.out, out_dir)
    return replace(result, out_dir=str(out_dir))


def fetch_run_record(head: Head, job_id: str, out_dir: Path) -> list[Path]:
    """Copy the job's log (log.jsonl, what `deepvm watch` shows once the cluster is gone) and its TensorBoard
    files (out/tensorboard/, written by its controller on the head) into out_dir, whatever the job's state;
    the files copied (none that are not there yet)."""
    from training.control.scalar_sink import TENSORBOARD_DIR
    from training.shared.transport import fetch_files, fetch_tree

    files, copied = JobFiles(job_id), []
    with contextlib.suppress(TransportError):  # a job that logged no scalar has no such directory
        copied += fetch_tree(head.host, f"{files.out}/{TENSORBOARD_DIR}", out_dir / TENSORBOARD_DIR)
    with contextlib.suppress(TransportError):
        fetch_files(head.host, files.root, ["log.jsonl"], out_dir)
        copied.append(out_dir / "log.jsonl")
    return copied


def managed_job(job_id: str) -> JobRow:
    """This machine's record of a managed job (which cluster, which head)."""
    row = JobStore().get(job_id)
    if row is None:
        known = [j.job_id for j in JobStore().all()][:5]
        hint = f"; known jobs: {', '.join(known)}" if known else ""
        raise NotFoundError(f"no job {job_id!r} was submitted from this machine (`deepvm jobs` lists them){hint}")
    if row.controller == "local":
        raise InputError(f"job {job_id} ran with --controller local: its log was printed by `deepvm train`")
    return row
