"""The planner: FLOPP ranking, DeepVM's overhead model and an exact MILP over the cluster shapes."""

from provisioning.planner.plan import Architecture, NodeGroup, Objective, Plan, Role
from provisioning.planner.request import PlanRequest, PlanResult

__all__ = [
    "Architecture",
    "NodeGroup",
    "Objective",
    "Plan",
    "PlanRequest",
    "PlanResult",
    "Role",
    "plan_budgets",
    "plan_cluster",
]


def __getattr__(name: str) -> object:
    """The solver on first use: importing it loads PuLP, which every command that only reads a plan (and
    the CLI's start) would otherwise pay for."""
    if name in ("plan_budgets", "plan_cluster"):
        from provisioning.planner import solve

        return getattr(solve, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
