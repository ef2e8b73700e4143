"""How `deepvm plan` shows DeepVM's four stages, and its `--json` document."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.table import Table

from deepvm_cli.render.curves import ProfileUsed, curves_json, curves_lines
from deepvm_cli.render.plan_parts import OBJECTIVE_LABEL, node_lines, number
from deepvm_cli.ui import console
from provisioning.catalog.model import Catalog
from provisioning.planner import Architecture, Objective, Plan, PlanResult, Role

if TYPE_CHECKING:  # loaded only by plan --interruptions
    from provisioning.planner.interruptions import InterruptionReport

RANKING_ROWS = 10
_BASELINE_LABEL = {"cost_first": "cost", "performance_first": "speed", "deepvm_no_scaling": "linear"}
_BASELINE_MEANING = (
    "baselines: cost = the GPU type that buys the most nodes under the cap; speed = the GPU type with the "
    "most FLOPS; linear = DeepVM's objective without its scaling factor K(n)"
)

_DEEPVM_UNITS = (
    "units: FLOPP = TFLOP bought per dollar (TFLOPS x 3600 / $/h); objective = DeepVM's Z = the GPU type's "
    "spot FLOPP x n GPU nodes x K(n), in TFLOP per dollar (K(n) = scaling efficiency, 1 = linear)"
)


def plan_result_json(
    result: PlanResult, catalog: Catalog, saved: Path, profiles: Sequence[ProfileUsed] = ()
) -> dict[str, Any]:
    request = result.request
    return {
        "max_price": request.max_price,
        "objective": (result.plans[0].objective if result.plans else request.objective).value,
        "plans": [p.to_dict() for p in result.plans],
        "baselines": {name: (p.to_dict() if p else None) for name, p in result.baselines.items()},
        "best_per_architecture": {
            arch.value: (p.to_dict() if p else None) for arch, p in result.best_per_architecture.items()
        },
        "catalog": {"source": catalog.source, "as_of": catalog.as_of, "warnings": list(catalog.warnings)},
        "scaling_curves": curves_json(_ranked_types(result), catalog, profiles),
        "saved_to": str(saved),
        "solve_seconds": round(result.solve_seconds, 4),
    }


def render_plan_result(
    result: PlanResult,
    catalog: Catalog,
    saved: Path,
    interruptions: InterruptionReport | None = None,
    profiles: Sequence[ProfileUsed] = (),
) -> None:
    out = console.out
    out.print(
        f"[bold]deepvm plan[/] — prices from {catalog.source}" + (f" as of {catalog.as_of}" if catalog.as_of else "")
    )
    out.print(_ranking_table(result))
    out.print(_architecture_table(result))
    best = result.plans[0]
    out.print(
        f"\n[bold green]Decision:[/] {best.summary()}  —  ${best.price_per_hour:.4f}/h in "
        f"{best.availability_zone}, {best.effective_flops:,.1f} effective TFLOPS, "
        f"{OBJECTIVE_LABEL[best.objective]} = {number(best.objective_value)}"
    )
    if best.objective is Objective.DEEPVM:
        console.info(_DEEPVM_UNITS)
    out.print(_plans_table("Ranked plans (decision first)", result.plans))
    if result.baselines:
        found = {_BASELINE_LABEL[name]: p for name, p in result.baselines.items() if p}
        out.print(_plans_table("The paper's baselines", list(found.values()), names=list(found)))
        console.info(_BASELINE_MEANING)
    if interruptions is not None:
        from deepvm_cli.render.interruptions import render_interruptions

        render_interruptions(interruptions)
    if profiles:
        planned = [g.instance_type for p in result.plans for g in p.nodes if g.role is not Role.HOLDER]
        out.print("\n[bold]Scaling curves[/]")
        for line in curves_lines(_ranked_types(result), planned, catalog, profiles):
            out.print(f"  {line}", markup=False, highlight=False, soft_wrap=True)  # a path is never cut
    for note in sorted({n for p in result.plans for n in p.notes}):
        console.info(f"note: {note}")
    console.info(f"Saved the decision to {saved}; `deepvm up` provisions it.")


def _ranked_types(result: PlanResult) -> list[str]:
    """The GPU types the planner considered, in FLOPP order."""
    return list(dict.fromkeys(row.instance_type for row in result.ranking))


def _ranking_table(result: PlanResult) -> Table:
    shown = min(RANKING_ROWS, len(result.ranking))
    table = Table(title=f"1. Instance-level analysis: FLOPP (top {shown} of {len(result.ranking)})")
    for column in ("instance type", "region / AZ", "TFLOPS", "spot $/h", "on-demand $/h", "FLOPP spot"):
        table.add_column(column, justify="left" if column.startswith(("instance", "region")) else "right")
    for row in result.ranking[:RANKING_ROWS]:
        table.add_row(
            row.instance_type,
            row.availability_zone,
            f"{row.flops:g}",
            _money(row.spot_price),
            _money(row.on_demand_price),
            f"{row.flopp_spot:,.0f}" if row.flopp_spot else "-",
        )
    return table


def _architecture_table(result: PlanResult) -> Table:
    table = Table(title="2-3. Best plan per architecture")
    for column in ("architecture", "nodes", "$/h", "eff. TFLOPS", "objective"):
        table.add_column(column, justify="left" if column in ("architecture", "nodes") else "right")
    for arch in (Architecture.SINGLE_ANCHOR, Architecture.TIERING):
        plan = result.best_per_architecture.get(arch)
        if plan is None:
            table.add_row(arch.value, "no plan fits", "-", "-", "-")
        else:
            table.add_row(
                arch.value,
                node_lines(plan),
                f"{plan.price_per_hour:.4f}",
                f"{plan.effective_flops:,.1f}",
                number(plan.objective_value),
            )
    return table


def _plans_table(title: str, plans: list[Plan], names: list[str] | None = None) -> Table:
    """One row per plan, readable at 80 columns: architecture and AZ share a cell, each node group gets a
    line of its own, and numbers are never cut (the text columns wrap instead)."""
    table = Table(title=title)
    table.add_column("#", no_wrap=True)
    table.add_column("shape / AZ", overflow="fold")
    table.add_column("nodes", overflow="fold")
    for column in ("$/h", "eff. TFLOPS", "objective"):
        table.add_column(column, justify="right", no_wrap=True)
    for i, plan in enumerate(plans):
        table.add_row(
            names[i] if names else str(i + 1),
            f"{plan.architecture.value}\n{plan.availability_zone}",
            node_lines(plan),
            f"{plan.price_per_hour:.4f}",
            f"{plan.effective_flops:,.1f}",
            number(plan.objective_value),
        )
    return table


def _money(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"
