"""`deepvm train`: run a job on a cluster made by `deepvm up`, through Spot interruptions.

Rendering only: a rich progress bar (step, epoch, loss, samples/s, trainers, $ spent) with controller
events and the ranks' own output printed above it; plain lines when stderr is not a terminal. With
--json the result is one JSON document on stdout (progress still goes to stderr, as plain lines).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

from deepvm_cli import console
from provisioning.cloud.names import DEFAULT_CLUSTER_NAME
from training.progress import JobReporter
from training.progress import Progress as JobProgress


def _describe(p: JobProgress) -> str:
    data = " · synthetic data" if p.synthetic else ""
    return (
        f"epoch {p.epoch} · loss {p.loss:.4f} · {p.samples_per_s:,.1f} samples/s · "
        f"{p.world_size} trainers · ${p.cost_usd:.4f}{data}"
    )


@contextmanager
def _plain_reporter() -> Iterator[JobReporter]:
    pushed: set[str] = set()

    def push(host: str, done: int, total: int) -> None:
        if done == total and host not in pushed:
            pushed.add(host)
            console.plain(f"pushed {total:,} bytes to {host}")

    yield JobReporter(
        note=console.plain,
        log=lambda prefix, text: console.plain(f"[{prefix}] {text}"),
        progress=lambda p: console.plain(f"step {p.step}/{p.total_steps} · {_describe(p)}"),
        push=push,
    )


@contextmanager
def _live_reporter() -> Iterator[JobReporter]:
    bars = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.fields[info]}"),
        console=console.err,
    )
    tasks: dict[str, TaskID] = {}

    def task(key: str, total: int) -> TaskID:
        if key not in tasks:
            tasks[key] = bars.add_task(key, total=total, info="")
        return tasks[key]

    def push(host: str, done: int, total: int) -> None:
        bars.update(task(f"push {host}", total), completed=done, total=total)

    def progress(p: JobProgress) -> None:
        bars.update(task("train", p.total_steps), completed=p.step, total=p.total_steps, info=_describe(p))

    with bars:
        yield JobReporter(
            note=lambda text: bars.console.print(text, markup=False, highlight=False),
            log=lambda prefix, text: bars.console.print(f"[{prefix}] {text}", markup=False, highlight=False),
            progress=progress,
            push=push,
        )


def train_command(
    job: Path = typer.Argument(..., help="Job spec YAML, e.g. configs/resnet.yaml."),
    cluster: str = typer.Option(DEFAULT_CLUSTER_NAME, "--cluster", help="Cluster made by `deepvm up`."),
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
        min=1.0,
        help="Seconds without progress after which the job counts as hung and is restarted without the node "
        "that hangs (default: 10x the longest recent gap between progress reports, at least 60 s).",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON on stdout."),
) -> None:
    """Train JOB on the cluster; survive Spot interruptions with DeepCheck checkpoints."""
    from provisioning.state import Store
    from training.controller import TrainRequest, train

    row = Store().cluster(cluster)
    if python is None:
        python = sys.executable if row is not None and row.cloud == "sandbox" else "python3"
    if row is not None and row.cloud == "sandbox":
        from provisioning.sandbox.control import BANNER

        console.info(BANNER)
    request = TrainRequest(
        job_path=job,
        cluster=cluster,
        python=python,
        resume=resume,
        out_dir=out,
        replace_nodes=replace_nodes,
        stall_timeout_s=stall_timeout,
    )
    live = console.err.is_terminal and not as_json
    with _live_reporter() if live else _plain_reporter() as report:
        result = train(request, report)
    if as_json:
        console.print_json(result.to_dict())
        return
    console.out.print(
        f"[bold]{result.job_id}[/] completed: step {result.steps}/{result.total_steps}, "
        f"final loss {result.final_loss:.4f}{' (synthetic data)' if result.synthetic else ''}, "
        f"{result.restarts} restarts, {result.lost_steps} steps lost, ${result.cost_usd:.4f}, "
        f"{result.wall_s:.0f}s"
    )
    for r in result.recoveries:
        resumed = "-" if r.detect_to_resumed_s is None else f"{r.detect_to_resumed_s:.1f}s"
        console.out.print(
            f"  {r.reason}: {r.world_before} -> {r.world_after} trainers, resumed at step {r.resumed_step} "
            f"({r.lost_steps} steps lost), {resumed} from detection to training again"
        )
    console.out.print(f"model and metrics: {result.out_dir}")


def register(app: typer.Typer) -> None:
    app.command("train")(train_command)
