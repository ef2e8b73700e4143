"""`deepvm profile`: measure how a job speeds up on 1..N trainer nodes of a cluster that is up, fit
DeepVM's scaling curve to it, and save the profile that `deepvm plan --profile` plans with.

Rendering only: training.client.profiling runs and measures, provisioning.scaling.profile fits and saves. It buys
nothing, so it asks nothing; it says up front what the cluster bills while it runs, and once the first
size is measured how long the rest should take.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.table import Table

from deepvm_cli.render.curves import estimate_text
from deepvm_cli.ui import console
from deepvm_cli.ui.cluster_choice import choose_cluster, open_chosen
from provisioning.core.errors import InputError

MAX_STEPS = 1_000_000  # --steps, --warmup: a profile measures minutes, not weeks

if TYPE_CHECKING:
    from provisioning.scaling.profile import Profile
    from training.client.profiling import ProfileTarget


def profile_command(
    job: Path = typer.Argument(..., help="Job spec YAML, e.g. configs/resnet.yaml."),
    cluster: str | None = typer.Option(
        None, "--cluster", help="A cluster made by `deepvm up` (default: the config file's, else the last one used)."
    ),
    sizes: str | None = typer.Option(
        None, "--sizes", help="Trainer node counts to measure, e.g. 1,2,4 (default: 1, 2, 4, ... and all of them)."
    ),
    steps: int = typer.Option(60, "--steps", min=1, max=MAX_STEPS, help="Steps in each measured repeat."),
    warmup: int = typer.Option(10, "--warmup", min=0, max=MAX_STEPS, help="Steps run and not measured, at each size."),
    repeats: int = typer.Option(3, "--repeats", min=1, max=100, help="Measured repeats at each size."),
    out: Path = typer.Option(Path("profile.json"), "--out", help="Where the profile is written."),
    plot: Path | None = typer.Option(None, "--plot", help="Also draw the points and the fitted curve (PNG)."),
    python: str | None = typer.Option(
        None, "--python", help="Python on the nodes (default: this interpreter in the sandbox, python3 on AWS)."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the profile and where it went as JSON."),
) -> None:
    """Measure JOB's speed-up on 1..N trainers of the cluster and fit DeepVM's scaling curve to it."""
    import time
    from datetime import datetime, timezone

    from deepvm_cli.ui.reporters import live_reporter, plain_reporter
    from provisioning.scaling.profile import ProfileSetup, make_profile, save_profile
    from training.client.profiling import ProfileRequest, measure, profile_target
    from training.shared.jobdir import checked_job_file
    from training.shared.jobspec import load_job_spec

    load_job_spec(job)  # a bad job file or --sizes is its own one-line answer, before any cluster is looked at
    job = checked_job_file(job)  # so is a symbolic link its directory's push would refuse
    counts = _sizes(sizes)
    found = open_chosen(choose_cluster(cluster), "--cluster NAME", running=False)
    request = ProfileRequest(
        job_path=job,
        cluster=found.name,
        python=python or found.node_python,
        sizes=counts,
        steps=steps,
        warmup=warmup,
        repeats=repeats,
    )
    target = profile_target(request, found)
    _announce(target, found.banner)
    started = time.monotonic()
    measured_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
    live = console.err.is_terminal and not as_json
    with live_reporter() if live else plain_reporter() as report:

        def estimate(seconds: float) -> None:
            cost = target.usd_per_hour * seconds / 3600
            report.note(
                f"estimate: about {seconds / 60:.1f} min more for the other sizes (~${cost:.4f}), if their "
                "steps are as fast as on 1 node (they are slower where nodes share a network)"
            )

        measured = measure(found, target, request, report, on_estimate=estimate)
    wall_s = time.monotonic() - started
    setup = ProfileSetup(target.instance_type, target.job, target.cluster, warmup, steps, repeats, measured_at)
    profile = make_profile(setup, measured)
    save_profile(profile, out)
    if plot is not None:
        from deepvm_cli.render.profile_plot import plot_profile

        plot_profile(profile, plot)
    cost = target.usd_per_hour * wall_s / 3600
    if as_json:
        console.print_json(profile_json(profile, out, plot, wall_s, cost))
        return
    _render(profile, out, plot, wall_s, cost)


def profile_json(profile: Profile, out: Path, plot: Path | None, wall_s: float, cost: float) -> dict[str, Any]:
    """`deepvm profile --json`: the profile as written, where it and its plot went, and what it took."""
    return {
        "profile": profile.model_dump(mode="json"),
        "saved_to": str(out),
        "plot": None if plot is None else str(plot),
        "wall_s": round(wall_s, 1),
        "cost_usd": round(cost, 6),
    }


def _sizes(text: str | None) -> tuple[int, ...] | None:
    if text is None:
        return None
    try:
        sizes = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise InputError(f"--sizes must be comma-separated trainer node counts, e.g. 1,2,4; got {text!r}") from None
    if not sizes:
        raise InputError("--sizes needs node counts, e.g. 1,2,4")
    return sizes


def _announce(target: ProfileTarget, banner: str) -> None:
    if banner:
        console.info(banner)
    sizes = ", ".join(map(str, target.sizes))
    console.info(
        f"profiling {target.job.name} on cluster {target.cluster}: {sizes} of its {target.trainer_nodes} "
        f"{target.instance_type} trainer nodes, {target.warmup_steps} warm-up + {target.repeats} x "
        f"{target.steps} measured steps at each size; nothing is bought"
    )
    console.info(
        f"cost: the cluster bills ${target.usd_per_hour:.4f}/h whatever runs on it, about "
        f"${target.usd_per_hour / 60:.4f} a minute of profiling; the first size shows how many minutes"
    )


def _render(profile: Profile, out: Path, plot: Path | None, wall_s: float, cost: float) -> None:
    fit = profile.fit
    table = Table(title=f"{profile.job.name} on {profile.instance_type}, cluster {profile.cluster}")
    for column in ("nodes", "samples/s (each repeat)", "mean", "speed-up"):
        table.add_column(column, justify="left" if column.startswith("samples") else "right")
    for size in profile.sizes:
        mean = sum(size.samples_per_s) / len(size.samples_per_s)
        table.add_row(
            str(size.nodes), ", ".join(f"{r:,.1f}" for r in size.samples_per_s), f"{mean:,.1f}", f"{size.speedup:.3f}"
        )
    console.out.print(table)
    console.out.print(
        f"S(n) = c / (1 + exp(-a (n - b))): a = {estimate_text(fit.a)}, b = {estimate_text(fit.b)}, "
        f"c = {estimate_text(fit.c)}, RMSE {fit.rmse:.3f}; measured up to {fit.max_nodes_measured} nodes, "
        f"so plans hold at most {profile.node_bound}",
        markup=False,
        highlight=False,
        soft_wrap=True,
    )
    for message in profile.warnings:
        console.warning(message)
    console.info(f"took {wall_s / 60:.1f} min (~${cost:.4f} of cluster time)")
    console.info(
        f"saved the profile to {out}"
        + (f" and its plot to {plot}" if plot else "")
        + f"; `deepvm plan --max-price X --profile {out}` plans with it"
    )


def register(app: typer.Typer) -> None:
    app.command("profile")(profile_command)
