"""The planner: FLOPP ranking, DeepVM's overhead model and an exact MILP over the cluster shapes."""

from provisioning.planner.plan import Architecture, NodeGroup, Objective, Plan, Role
from provisioning.planner.request import PlanRequest, PlanResult
from provisioning.planner.solve import plan_budgets, plan_cluster

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
