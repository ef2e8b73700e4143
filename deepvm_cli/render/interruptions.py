"""How `deepvm plan --interruptions` shows the decision with and without interruptions, and its JSON."""

from __future__ import annotations

import math
from typing import Any

from rich.table import Table

from deepvm_cli.render.plan_parts import OBJECTIVE_LABEL, node_lines, number
from deepvm_cli.ui import console
from provisioning.planner.interruptions import InterruptionReport


def interruptions_json(report: InterruptionReport) -> dict[str, Any]:
    """The `interruptions` object of `plan --json`: what was counted, per plan and per type, and the
    best plan when interruptions are not counted."""
    shown = [*report.plans, report.without]
    types = sorted({(g.plan.region, g.instance_type) for g in shown})
    return {
        **report.interruptions.to_dict(),
        "stop_per_interruption_s": round(report.interruptions.recovery.stop_h * 3600, 6),
        "types": [_type_json(report, region, name) for region, name in types],
        "plans": [g.to_dict() for g in report.plans],
        "without_interruptions": {
            "plan": report.without.plan.to_dict(),
            **report.without.to_dict(),
            "objective_value_with_interruptions": report.without_value,
        },
        "decision_changed": report.changed,
        "summary": report.summary(),
    }


def _type_json(report: InterruptionReport, region: str, name: str) -> dict[str, Any]:
    pool = report.interruptions.pool(region, name)
    return {
        "region": region,
        "instance_type": name,
        "market": "spot",
        "hazard_per_h": pool.hazard_per_h,
        "mttf_h": None if math.isinf(pool.mttf_h) else pool.mttf_h,
        "alive_share": pool.alive_share,
        "factor": pool.node_factor(report.interruptions.recovery),  # one node alone; on-demand nodes: 1
        "source": pool.source,
    }


def render_interruptions(report: InterruptionReport) -> None:
    """The decision without and with interruptions side by side, and one line on what changed."""
    recovery = report.interruptions.recovery
    table = Table(title=f"Counting Spot interruptions {report.interruptions.label}")
    table.add_column("")
    table.add_column("without interruptions", justify="right")
    table.add_column("with interruptions", justify="right")
    old, new = report.without, report.best
    for label, show in (
        ("nodes", lambda g: node_lines(g.plan)),
        ("$/h (all nodes up)", lambda g: f"{g.plan.price_per_hour:.4f}"),
        ("expected $/h", lambda g: f"{g.expected_usd_per_hour:.4f}"),
        ("effective TFLOPS", lambda g: f"{g.plan.effective_flops:,.1f}"),
        ("goodput factor", lambda g: f"{g.share:.6f}"),
        ("expected goodput TFLOPS", lambda g: f"{g.expected_goodput_tflops:,.1f}"),
    ):
        table.add_row(label, show(old), show(new))
    objective = OBJECTIVE_LABEL[new.plan.objective]
    table.add_row(f"{objective}, interruptions counted", number(report.without_value), number(new.plan.objective_value))
    console.out.print(table)
    console.out.print(f"[bold]{'Changed' if report.changed else 'Unchanged'}:[/] {report.summary()}")
    console.info(
        f"note: each interruption stops the cluster {recovery.stop_h * 3600:.1f} s (relaunch on the "
        f"survivors and again to fold the replacement in, {recovery.relaunch_s:g} s each) and leaves "
        f"its slot empty {recovery.replacement_delay_s:g} s (--relaunch-time, --replacement-delay)"
    )
