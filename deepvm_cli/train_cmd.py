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

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn
from rich.table import Column

from deepvm_cli import console
from deepvm_cli.cluster_choice import choose_cluster, open_chosen
from deepvm_cli.flags import DAY_S, at_least
from deepvm_cli.job_render import Eta, describe_progress, progress_line, result_lines, screened
from provisioning.core.errors import DeepvmError, InputError
from training.shared.progress import JobReporter
from training.shared.progress import Progress as JobProgress

CONTROLLERS = ("head", "local")


@contextmanager
def plain_reporter() -> Iterator[JobReporter]:
    """A job's events as plain lines on stderr (no terminal there, or --json)."""
    pushed: set[str] = set()
    eta = Eta()

    def push(host: str, done: int, total: int) -> None:
        if done == total and host not in pushed:
            pushed.add(host)
            console.plain(f"pushed {total:,} bytes to {host}")

    yield screened(JobReporter(
        note=console.plain,
        log=lambda prefix, text: console.plain(f"[{prefix}] {text}"),
        progress=lambda p: console.plain(progress_line(p, eta.update(p.step, p.total_steps))),
        push=push,
    ))


@contextmanager
def live_reporter() -> Iterator[JobReporter]:
    """A job's events above rich progress bars (pushes, steps) on a terminal."""
    # At 80 columns the counter, bar and ETA keep their width and the details wrap below them.
    bars = Progress(
        TextColumn("{task.description}"),
        BarColumn(bar_width=16),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.fields[eta]}"),
        TextColumn("{task.fields[info]}", table_column=Column(ratio=1, overflow="fold")),
        console=console.err,
    )
    eta = Eta()
    tasks: dict[str, TaskID] = {}

    def task(key: str, total: int) -> TaskID:
        if key not in tasks:
            tasks[key] = bars.add_task(key, total=total, info="", eta="")
        return tasks[key]

    def push(host: str, done: int, total: int) -> None:
        bars.update(task(f"push {host}", total), completed=done, total=total)

    def progress(p: JobProgress) -> None:
        left = eta.update(p.step, p.total_steps)
        bars.update(task("train", p.total_steps), completed=p.step, total=p.total_steps,
                    info=describe_progress(p), eta=f"eta {left}" if left else "")

    with bars:
        yield screened(JobReporter(
            note=lambda text: bars.console.print(text, markup=False, highlight=False),
            log=lambda prefix, text: bars.console.print(f"[{prefix}] {text}", markup=False, highlight=False),
            progress=progress,
            push=push,
        ))


def train_command(
    job: Path = typer.Argument(..., help="Job spec YAML, e.g. configs/resnet.yaml."),
    cluster: str | None = typer.Option(
        None, "--cluster", help="Cluster made by `deepvm up` (default: the config file's, else the last one used)."
    ),
    resume: bool = typer.Option(
        False, "--resume", help="Continue this job's newest unfinished run (after Ctrl-C or a crash)."
    ),
    python: str | None = typer.Option(
        None,
        "--python",
        help="Python on the nodes, with torch and mpi4py (default: this interpreter in the sandbox, python3 on AWS).",
    ),
    out: Path | None = typer.Option(
        None, "--out", help="Where the final model and metrics go (default: DEEPVM_HOME/jobs/JOB_ID)."
    ),
    replace_nodes: bool = typer.Option(
        True, "--replace/--no-replace", help="Buy a spot node for each one lost, within the plan."
    ),
    stall_timeout: float | None = typer.Option(
        None,
        "--stall-timeout",
        callback=at_least(1, DAY_S),
        help="Seconds without progress after which the job counts as hung and is restarted without the node "
        "that hangs (default: 10x the longest recent gap between progress reports, at least 60 s).",
    ),
    controller: str = typer.Option(
        "head",
        "--controller",
        help="head: the job's controller runs on the cluster's on-demand head node, and the job outlives this "
        "machine; local: it runs in this process, and the job stops when this process does.",
    ),
    detach: bool = typer.Option(False, "--detach", help="Return as soon as the job runs (managed jobs)."),
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON on stdout."),
) -> None:
    """Train JOB on the cluster; survive Spot interruptions with DeepCheck checkpoints."""
    from training.control.controller import TrainRequest, train
    from training.shared.jobspec import load_job_spec

    load_job_spec(job)  # a bad job file is its own one-line answer, before any cluster is looked at
    if controller not in CONTROLLERS:
        raise InputError(f"--controller must be one of {', '.join(CONTROLLERS)}, not {controller!r}")
    if controller == "head" and resume:
        raise InputError("--resume is for --controller local: a managed job's controller resumes it by itself "
                         "(`deepvm jobs` shows it)")  # fmt: skip
    if controller == "local" and detach:
        raise InputError("--detach needs the controller on the head (--controller head)")
    from deepvm_cli.jobs_cmd import default_python

    found = open_chosen(choose_cluster(cluster), "--cluster NAME", running=True)
    if python is None:
        python = default_python(found)
    if found.banner:
        console.info(found.banner)
    request = TrainRequest(
        job_path=job,
        cluster=found.name,
        python=python,
        resume=resume,
        out_dir=out,
        replace_nodes=replace_nodes,
        stall_timeout_s=stall_timeout,
    )
    live = console.err.is_terminal and not as_json
    with billing_reminder(found.name):
        with live_reporter() if live else plain_reporter() as report:
            if controller == "head":
                from deepvm_cli.jobs_cmd import run_managed

                result = run_managed(request, report, detach=detach)
            else:
                console.warning("--controller local: the job's controller runs in this process; the job stops "
                                "if it ends (Ctrl-C, sleep, a lost network)")  # fmt: skip
                result = train(request, report).to_dict()
        if result is None:  # detached
            return
        if as_json:
            console.print_json(result)
            return
        for line in result_lines(result):
            console.out.print(line, markup=False, highlight=False)


@contextmanager
def billing_reminder(cluster: str) -> Iterator[None]:
    """After the block (the job completed, failed, was detached from or stopped with Ctrl-C), one line
    saying that the cluster still bills and the command that stops it: the job's end does not end the
    cluster. Not after a mistake in the input (that line stays alone)."""
    try:
        yield
    except InputError:
        raise
    except (DeepvmError, KeyboardInterrupt):
        _remind(cluster)
        raise
    _remind(cluster)


def _remind(cluster: str) -> None:
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
    bills = (f"still up ({rate} at AWS prices; the sandbox bills nothing)" if view.cluster.cloud == "sandbox"
             else f"still billing {rate}")  # fmt: skip
    console.plain(f"cluster {cluster} is {bills}: `deepvm down {cluster}` stops it")  # unwrapped: one command


def register(app: typer.Typer) -> None:
    app.command("train")(train_command)
