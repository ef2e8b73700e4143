"""`deepvm train`: run a job on a cluster made by `deepvm up`, through Spot interruptions.

By default the job's controller runs on the cluster's on-demand head node (training.client.managed): this
command stages the job there, starts it and follows its log; Ctrl-C only detaches, and `--detach` returns
once the job runs. `--controller local` runs the controller in this process instead, as before: the job
then stops when this process does.

Rendering only: a rich progress bar (step, epoch, loss, samples/s, trainers, $ spent) with controller
events and the ranks' own output printed above it; plain lines when stderr is not a terminal. With
--json the result is one JSON document on stdout (progress still goes to stderr, as plain lines).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from deepvm_cli.render.job import Detached, replay, result_lines
from deepvm_cli.ui import console
from deepvm_cli.ui.cluster_choice import choose_cluster, open_chosen
from deepvm_cli.ui.ended import finish_ended_clusters
from deepvm_cli.ui.flags import DAY_S, MAX_PRICE, at_least, positive, writable_folder
from deepvm_cli.ui.guard_flags import GuardFlags, job_guard
from deepvm_cli.ui.reporters import live_reporter, plain_reporter
from deepvm_cli.ui.user_config import Defaults
from provisioning.catalog.model import Market
from provisioning.core.errors import CloudError, DeepvmError, InputError
from training.shared.guard import MAX_IDLE_MINUTES
from training.shared.jobstore import JobStatus
from training.shared.limits import MAX_HOURS, MAX_USD, JobLimits, check_budget, check_fallback_cap, job_limits
from training.shared.progress import JobReporter, TrainResult
from training.shared.records import LogKind, LogRecord

if TYPE_CHECKING:
    from provisioning.clusters.handle import Cluster
    from training.client.managed import Guarded, Head
    from training.client.outputs import Resumed
    from training.control.jobrecord import TrainRequest

CONTROLLERS = ("head", "local")
_DETACH_WAIT_S = 900.0  # `train --detach`: longest wait for the first attempt to start


def train_command(
    job: Path = typer.Argument(..., help="Job spec YAML, e.g. configs/resnet.yaml."),
    cluster: str | None = typer.Option(
        None, "--cluster", help="Cluster made by `deepvm up` (default: the config file's, else the last one used)."
    ),
    resume: bool = typer.Option(
        False,
        "--resume",
        help="Continue this job's newest unfinished run: with --controller local, on its cluster "
        "(after Ctrl-C or a crash); a managed job stopped at its time limit or failed, on any cluster, from the "
        "checkpoint its head copied to S3.",
    ),
    python: str | None = typer.Option(
        None,
        "--python",
        help="Python on the nodes, with torch and mpi4py (default: this interpreter in the sandbox, python3 on AWS).",
    ),
    out: str | None = typer.Option(
        None, "--out", help="Where the final model and metrics go (default: DEEPVM_HOME/jobs/JOB_ID)."
    ),
    replace_nodes: bool = typer.Option(
        True, "--replace/--no-replace", help="Buy a spot node for each one lost, within the plan."
    ),
    stall_timeout: float | None = typer.Option(
        None,
        "--stall-timeout",
        callback=at_least(1, DAY_S),
        help="Seconds without a step, once the job has trained one, after which it counts as hung and is "
        "restarted without the node that hangs (default: the job file's stall.timeout, else 10x the longest "
        "recent gap between progress reports, at least 60 s; none for a run.calls_step: false script).",
    ),
    startup_grace: float | None = typer.Option(
        None,
        "--startup-grace",
        callback=at_least(1, DAY_S),
        help="Seconds from a launch to its first step after which the job counts as hung before training "
        "(default: the job file's stall.startup_grace, else 300; none for a run.calls_step: false script).",
    ),
    controller: str = typer.Option(
        "head",
        "--controller",
        help="head: the job's controller runs on the cluster's on-demand head node, and the job outlives this "
        "machine; local: it runs in this process, and the job stops when this process does.",
    ),
    detach: bool = typer.Option(False, "--detach", help="Return as soon as the job runs (managed jobs)."),
    deadline: float | None = typer.Option(
        None,
        "--deadline",
        callback=positive(MAX_HOURS),
        help="Hours from the job's start by which it must end: on-demand stand-ins when Spot would miss it "
        "(default: the job file's limits.deadline, else none).",
    ),
    budget: float | None = typer.Option(
        None,
        "--budget",
        callback=positive(MAX_USD),
        help="USD the whole job may cost, replacements included: it stops with a checkpoint before (resumable).",
    ),
    fallback_max_price: float | None = typer.Option(
        None,
        "--fallback-max-price",
        callback=positive(MAX_PRICE),
        help="USD per hour the cluster may bill while the deadline holds on-demand stand-ins (default: the plan's "
        "cap).",
    ),
    down_when_done: bool | None = typer.Option(
        None,
        "--down-when-done/--keep-up",
        help="The job's end (any end) takes the cluster down, its outputs copied to S3 first (default: the config "
        "file's down_when_done, else --keep-up).",
    ),
    idle: float | None = typer.Option(
        None,
        "--idle",
        callback=positive(MAX_IDLE_MINUTES),
        help="Minutes without a training step after which the job ends as failed (and, with "
        "--down-when-done, the cluster goes down).",
    ),
    max_duration: float | None = typer.Option(
        None,
        "--max-duration",
        callback=positive(MAX_HOURS),
        help="Hours after which the job stops with a checkpoint, its outputs and checkpoint "
        "copied to S3 (resumable on any cluster with --resume).",
    ),
    notify: str | None = typer.Option(
        None,
        "--notify",
        help="http(s) URL the head posts signed JSON to on notice, replacement, fallback, failure, "
        "completion and autodown (needs notify_secret in the config file).",
    ),
    notify_cmd: str | None = typer.Option(
        None, "--notify-cmd", help="Shell command the head runs on those events instead (the JSON on its stdin)."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON on stdout."),
) -> None:
    """Train JOB on the cluster; survive Spot interruptions with DeepCheck checkpoints."""
    from training.control.controller import train
    from training.control.jobrecord import TrainRequest
    from training.shared.jobdir import checked_job_file
    from training.shared.jobspec import load_job_spec

    spec = load_job_spec(job)  # a bad job file is its own one-line answer, before any cluster is looked at
    job = checked_job_file(job)  # so is a symbolic link its directory's push would refuse
    out_dir = None if out is None else writable_folder("--out", out)  # not after hours of training
    if controller not in CONTROLLERS:
        raise InputError(f"--controller must be one of {', '.join(CONTROLLERS)}, not {controller!r}")
    if controller == "local" and detach:
        raise InputError("--detach needs the controller on the head (--controller head)")
    limits = job_limits(spec.limits.job_limits(), deadline, budget, fallback_max_price)
    defaults = Defaults()
    guard, secret = job_guard(GuardFlags(down_when_done, idle, max_duration, notify, notify_cmd), controller, defaults)
    finish_ended_clusters()  # before a cluster is chosen: one its head took down is no longer up
    found = open_chosen(choose_cluster(cluster, defaults), "--cluster NAME", running=True)
    check_fallback_cap(limits, sum(g.count * g.usd_per_hour for g in found.plan.nodes if g.market is Market.ON_DEMAND))
    from training.client.managed import Guarded
    from training.client.outputs import find_resumed

    resumed = find_resumed(spec.name) if resume and controller == "head" else None
    if resume:
        _check_resumed_budget(limits, found.name, spec.name, resumed)
    if python is None:
        python = found.node_python
    if found.banner:
        console.info(found.banner)
    from training.client.guard_setup import ready_guard
    from training.client.storage import ready_job_storage

    guard = ready_guard(found, spec, guard)  # where its outputs go (the cluster's bucket), before any staging
    reads = resumed.reads if resumed is not None else ()
    for warning in ready_job_storage(found, spec, reads):  # the job's S3 rights, or a refusal: before any staging
        console.warning(warning)
    guarded = Guarded(guard, secret, resumed.start if resumed else None, resumed.job_id if resumed else "")
    request = TrainRequest(
        job_path=job,
        cluster=found.name,
        python=python,
        resume=resume,
        out_dir=out_dir,
        replace_nodes=replace_nodes,
        stall_timeout_s=stall_timeout,
        startup_grace_s=startup_grace,
        limits=limits,
    )
    live = console.err.is_terminal and not as_json
    with billing_reminder(found.name, guard.down_when_done):
        with live_reporter() if live else plain_reporter() as report:
            if controller == "head":
                result = run_managed(found, request, report, detach=detach, guarded=guarded)
            else:
                console.warning(
                    "--controller local: the job's controller runs in this process; the job stops "
                    "if it ends (Ctrl-C, sleep, a lost network)"
                )
                result = train(found, request, report)
        if isinstance(result, Detached):  # said once, below the bars (not between two of their redraws)
            for line in result.lines():
                console.err.print(line, markup=False, highlight=False)
            return
        if result is None:  # cancelled meanwhile: said by run_managed
            return
        if as_json:
            console.print_json(result.to_dict())
            return
        for line in result_lines(result):
            console.out.print(line, markup=False, highlight=False)


def run_managed(
    cluster: Cluster, request: TrainRequest, report: JobReporter, detach: bool, guarded: Guarded
) -> TrainResult | Detached | None:
    """Submit the job to the cluster's head and follow it to its end (its result; None when it was
    cancelled), or until it runs (detach). Ctrl-C detaches: the job goes on."""
    from training.client.managed import follow_across, submit
    from training.control.stops import ended_on_head

    submitted = submit(cluster, request, report, guarded)
    job, head = submitted.job, submitted.head
    try:
        if detach:
            _wait_running(head, job.job_id, replay(report))
            return Detached(job.job_id, head.instance_id, interrupted=False)
        end, head = follow_across(head, job.job_id, replay(report))  # on the new head after a hand-over
    except KeyboardInterrupt:
        return Detached(job.job_id, head.instance_id, interrupted=True)
    if end.status is JobStatus.COMPLETED:
        from training.client.outputs import completed_outputs

        result = completed_outputs(job, head)
        if result is not None:
            return result
    if end.status is JobStatus.CANCELLED:
        console.info(f"job {job.job_id} was cancelled: {end.text}")
        return None
    if end.status in (JobStatus.FAILED, JobStatus.STOPPED):  # stopped: resumable (its budget, --max-duration)
        raise ended_on_head(end.status, end.text)
    raise CloudError(
        f"job {job.job_id}'s log ended without a result ({end.status}: {end.text or 'no word'}); "
        f"`deepvm jobs {job.cluster}` shows what its head knows"
    )


def _check_resumed_budget(limits: JobLimits, cluster: str, name: str, resumed: Resumed | None) -> None:
    """`--resume` continues the newest unfinished run of the job on the cluster (training/control), or a managed
    one from S3: its budget must be above what that run has spent."""
    from training.shared.jobstore import JobStore

    if limits.budget_usd is None:
        return
    if resumed is not None:
        check_budget(limits, resumed.start.cost_usd, resumed.job_id)
        return
    resumable = (JobStatus.RUNNING, JobStatus.STOPPED, JobStatus.FAILED)  # what `--resume` continues
    unfinished = [j for j in JobStore().for_cluster(cluster) if j.name == name and j.status in resumable]
    if unfinished:
        check_budget(limits, unfinished[0].cost_usd, unfinished[0].job_id)


def _wait_running(head: Head, job_id: str, show: Callable[[LogRecord], None]) -> None:
    """Show the job's log until its first attempt starts (or it is over already)."""
    from training.client.managed import follow

    start, deadline = 0, time.monotonic() + _DETACH_WAIT_S
    started = False

    def watch(record: LogRecord) -> None:
        nonlocal started
        started = started or record.text.startswith("attempt ") or record.kind is LogKind.STATE
        show(record)

    while time.monotonic() < deadline:
        end = follow(head, job_id, watch, start=start, keep_following=False)
        if started or end.status.final:
            return
        start = end.next_line
        time.sleep(1.0)


@contextmanager
def billing_reminder(cluster: str, head_takes_it_down: bool = False) -> Iterator[None]:
    """After the block (the job completed, failed, was detached from or stopped with Ctrl-C), one line
    saying that the cluster still bills and the command that stops it: the job's end does not end the
    cluster, unless its head takes it down (--down-when-done), which is said instead. Not after a mistake
    in the input (that line stays alone)."""
    try:
        yield
    except InputError:
        raise
    except (DeepvmError, KeyboardInterrupt):
        _remind(cluster, head_takes_it_down)
        raise
    _remind(cluster, head_takes_it_down)


def _remind(cluster: str, head_takes_it_down: bool) -> None:
    if head_takes_it_down:
        console.plain(
            f"cluster {cluster} goes down when the job ends (--down-when-done); `deepvm status` then shows it ended"
        )
        return
    from provisioning.clusters.handle import Cluster
    from provisioning.clusters.store import ClusterStatus

    try:
        found = Cluster.find(cluster)
        view = found.view(refresh=True) if found is not None and found.is_up else None  # nodes bought or lost
    except DeepvmError as exc:  # the job's own outcome stays what the user sees
        console.warning(f"could not check whether cluster {cluster} is still up ({exc})")
        return
    if view is None or view.cluster.status is not ClusterStatus.UP:  # a sandbox found stopped meanwhile
        return
    rate = f"${view.usd_per_hour:.4f}/h"
    bills = (
        f"still up ({rate} at AWS prices; the sandbox bills nothing)"
        if not view.cluster.cloud.bills
        else f"still billing {rate}"
    )
    line = f"cluster {cluster} is {bills}: `deepvm down {cluster}` stops it"
    if not console.err.is_terminal or len(line) <= console.err.width:
        console.plain(line)  # unwrapped: one line, one command
        return
    console.err.print(f"cluster {cluster} is {bills}", markup=False, highlight=False)  # wrapped between words
    console.plain(f"  stop it: deepvm down {cluster}")  # the command whole, on a line of its own


def register(app: typer.Typer) -> None:
    app.command("train")(train_command)
