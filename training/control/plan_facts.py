"""What training needs to know of a plan's instance types: GPUs (a training node runs one rank per GPU)
and TFLOPS (trainers' relative speed, by which a mixed plan's batch is split).

A plan states both for each node group, from the catalog it was made with (NodeGroup.gpus and .tflops,
checked against that catalog by `deepvm up`), so a `--catalog FILE` type that the built-in snapshot lacks
runs as many ranks as it has GPUs. A plan that a deepvm of an earlier version recorded states neither;
for it the built-in snapshot is asked, as before (it knows nothing of a type it does not list).
"""

from __future__ import annotations

from dataclasses import dataclass

from provisioning.ladder.offers import MarketOffers
from provisioning.planner.plan import NodeGroup, Plan, Role


@dataclass(frozen=True)
class TypeFacts:
    tflops: float  # of one node; 0 when unknown
    gpus: int  # of one node; 0 for a CPU node (or when unknown)


UNKNOWN = TypeFacts(0.0, 0)  # a type the plan does not have (no node of a cluster is of one)


def type_facts(plan: Plan) -> dict[str, TypeFacts]:
    """{instance type: its facts} for every type of the plan."""
    return {g.instance_type: _facts(g) for g in plan.nodes}


def with_market(facts: dict[str, TypeFacts], offers: MarketOffers) -> dict[str, TypeFacts]:
    """`facts` and those of every other type the recovery ladder may buy (a repair of another type)."""
    return {**{t.instance_type: TypeFacts(t.tflops, t.gpus) for t in offers.types}, **facts}


def planned_trainer_ranks(plan: Plan) -> int:
    """Trainer ranks of the whole plan: one per GPU of every trainer (and the anchor), at least one a node."""
    facts = type_facts(plan)
    return sum(g.count * max(1, facts[g.instance_type].gpus) for g in plan.nodes if g.role is not Role.HOLDER)


def _facts(group: NodeGroup) -> TypeFacts:
    if group.gpus is not None and group.tflops is not None:
        return TypeFacts(group.tflops, group.gpus)
    from provisioning.catalog.snapshot import load_snapshot  # a plan of an earlier version

    known = load_snapshot().types.get(group.instance_type)
    return TypeFacts(known.flops, known.gpu_count) if known else UNKNOWN
