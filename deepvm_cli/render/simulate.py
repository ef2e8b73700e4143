"""How `deepvm simulate` shows its answer: three narrow tables (they fit 80 columns), and progress.

Makespan and cost get a table each (mean, p50, p90, p99), then what each policy bought and how often
it was interrupted and relaunched. Progress is a bar per policy on a terminal, and one plain line per
policy otherwise (a script's log gets no redraws).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn
from rich.table import Table

from deepvm_cli.ui import console
from simulation.compare import Progress as ProgressCallback
from simulation.policies import PolicyName
from simulation.report import Quantiles, SimulationReport


def render_simulation(report: SimulationReport) -> None:
    out = console.out
    deadline = f", deadline {report.deadline_h:g} h" if report.deadline_h is not None else ""
    out.print(
        f"[bold]deepvm simulate[/] — {report.work_pflop:,.0f} PFLOP{deadline}, {report.runs:,} runs "
        f"(seed {report.seed}), Spot nodes follow {report.trace}"
    )
    out.print(_quantile_table("Makespan (hours)", report, "makespan_h", "P(miss)", _miss))
    out.print(
        _quantile_table(
            "Cost (USD)",
            report,
            "cost_usd",
            "$/EFLOP",  # 1 EFLOP = 1,000 PFLOP: readable digits
            lambda p: f"{p.usd_per_pflop * 1000:.4g}",
        )
    )
    out.print(_plans_table(report))
    recovery = report.recovery
    console.info(
        f"recovery: {recovery.notice_share:.0%} of reclaims with notice; a notice or a fold-in stops "
        f"training {recovery.relaunch_s:g} s; a loss without notice {recovery.restart_s:g} s and up to "
        f"{recovery.checkpoint_interval_s:g} s of work; replacements join {recovery.replacement_delay_s:g} s "
        "after a loss"
    )


def _quantile_table(title: str, report: SimulationReport, field: str, last: str, last_cell) -> Table:
    table = Table(title=title, title_justify="left")
    table.add_column("policy")
    for column in ("mean", "p50", "p90", "p99", last):
        table.add_column(column, justify="right")
    for policy in report.policies:
        q: Quantiles = getattr(policy, field)
        table.add_row(policy.policy.value, *(_short(v) for v in (q.mean, q.p50, q.p90, q.p99)), last_cell(policy))
    return table


def _plans_table(report: SimulationReport) -> Table:
    table = Table(title="What each policy runs", title_justify="left")
    table.add_column("policy")
    table.add_column("plan", overflow="fold")
    for column in ("$/h", "lost/run", "restarts"):
        table.add_column(column, justify="right")
    for policy in report.policies:
        table.add_row(
            policy.policy.value,
            policy.plan.summary(),
            f"{policy.plan.price_per_hour:.3f}",
            f"{policy.interruptions_per_run:.3g}",
            f"{policy.restarts_per_run:.3g}",
        )
    return table


def _miss(policy) -> str:
    return "-" if policy.p_miss_deadline is None else f"{policy.p_miss_deadline:.1%}"


def _short(value: float) -> str:
    """Four significant digits, thousands separated: 1,234 / 56.78 / 0.1234."""
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.4g}"


@contextmanager
def simulation_progress() -> Iterator[ProgressCallback]:
    """A callback for compare_policies that shows how far each policy got."""
    if not console.err.is_terminal:
        yield _plain_progress()
        return
    bars = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console.err,
        transient=True,
    )
    tasks: dict[PolicyName, TaskID] = {}

    def update(policy: PolicyName, done: int, total: int) -> None:
        if policy not in tasks:
            tasks[policy] = bars.add_task(f"simulating {policy.value}", total=total)
        bars.update(tasks[policy], completed=done)

    with bars:
        yield update


def _plain_progress() -> ProgressCallback:
    """One line per policy when it is done (only for runs that take a while)."""
    started: dict[PolicyName, float] = {}

    def update(policy: PolicyName, done: int, total: int) -> None:
        started.setdefault(policy, time.monotonic())
        seconds = time.monotonic() - started[policy]
        if done == total and seconds >= 1.0:
            console.plain(f"simulated {policy.value}: {total:,} runs in {seconds:.1f} s")

    return update


@contextmanager
def trace_progress(name: str) -> Iterator[Callable[[int, int], None]]:
    """A callback for reading a trace file: a bar of its lines on a terminal, else one line when the file is
    long enough to report at all (simulation/traces/csv_rows.py calls it every PROGRESS_EVERY lines), so a
    10^6-line file is never seconds of silence."""
    if not console.err.is_terminal:
        told: list[bool] = []

        def once(done: int, total: int) -> None:
            if not told:
                told.append(True)
                console.plain(f"reading trace {name}: {total:,} lines")

        yield once
        return
    bar = Progress(
        TextColumn(f"reading trace {name}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console.err,
        transient=True,
    )
    task = bar.add_task("", total=None)
    with bar:
        yield lambda done, total: bar.update(task, completed=done, total=total)
