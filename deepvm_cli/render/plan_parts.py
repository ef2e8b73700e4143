"""The pieces of a plan that both `deepvm plan`'s tables and its `--interruptions` view print: the label of
each objective's value, the node groups one per line, and a number at a readable precision."""

from __future__ import annotations

from provisioning.planner import Objective, Plan, Role

OBJECTIVE_LABEL = {
    Objective.DEEPVM: "Z (FLOPP x n x K(n))",
    Objective.THROUGHPUT: "effective TFLOPS",
    Objective.COST: "USD per PFLOP",
    Objective.DEADLINE: "USD for the job",
}


def node_lines(plan: Plan) -> str:
    """e.g. "76 g4dn.xlarge spot" and "1 c5n.xlarge on-demand holder", one group per line."""
    return "\n".join(
        f"{g.count} {g.instance_type} {g.market.value}" + ("" if g.role is Role.TRAINER else f" {g.role.value}")
        for g in plan.nodes
    )


def number(value: float) -> str:
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.4g}"
