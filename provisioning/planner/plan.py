"""What the planner proposes: a cluster as node groups, with the numbers that justify it.

A `Plan` is the hand-off from `deepvm plan` to `deepvm up`: it is saved as JSON and read back, and it
carries the prices it was computed with and when they were observed, so that a later cost report never
silently uses different prices.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from provisioning.catalog.model import InstanceType, Market

# Ranked plans in one saved file, and so the most `deepvm plan --top` may ask for. It lives here, not in
# plan_document.py, so that the CLI's flag rule does not load pydantic at every start.
MAX_PLANS = 32


class Architecture(str, Enum):
    """DeepVM's cluster shapes."""

    SINGLE_ANCHOR = "single-anchor"  # 1 on-demand GPU anchor (trains and holds checkpoints) + spot GPUs
    TIERING = "tiering"  # spot GPU trainers + on-demand CPU checkpoint holders


class Role(str, Enum):
    TRAINER = "trainer"
    ANCHOR = "anchor"
    HOLDER = "holder"


class Objective(str, Enum):
    DEEPVM = "deepvm"  # the paper's Z = FLOPP_spot(v) * n * K(n)
    THROUGHPUT = "throughput"  # most effective FLOPS under the price cap
    COST = "cost"  # lowest price per effective FLOP
    DEADLINE = "deadline"  # cheapest total cost of finishing the given work before the deadline


@dataclass(frozen=True)
class NodeGroup:
    """`count` nodes of one instance type, bought in one market, playing one role; with what training on
    them needs to know of the type, from the catalog the plan was made with (which `--catalog FILE` may
    be, holding types the built-in snapshot lacks)."""

    instance_type: str
    market: Market
    count: int
    role: Role
    usd_per_hour: float  # price of one node, as planned
    gpus: int | None = None  # GPUs of one node: a training node runs one rank per GPU (None: not stated)
    tflops: float | None = None  # TFLOPS of one node: trainers' relative speed (None: not stated)

    @classmethod
    def of(cls, itype: InstanceType, market: Market, count: int, role: Role, usd_per_hour: float) -> NodeGroup:
        """A group of the catalog's type `itype`, stating its GPUs and TFLOPS."""
        return cls(itype.name, market, count, role, usd_per_hour, itype.gpu_count, itype.flops)

    def to_dict(self) -> dict[str, Any]:
        stated = {"gpus": self.gpus, "tflops": self.tflops}
        return {
            "instance_type": self.instance_type,
            "market": self.market.value,
            "count": self.count,
            "role": self.role.value,
            "usd_per_hour": self.usd_per_hour,
            **{k: v for k, v in stated.items() if v is not None},
        }


@dataclass(frozen=True)
class Plan:
    """One proposed cluster in one availability zone."""

    architecture: Architecture
    region: str
    availability_zone: str
    nodes: tuple[NodeGroup, ...]
    price_per_hour: float
    effective_flops: float  # TFLOPS after the scaling factor K(n)
    objective_value: float  # the value the chosen objective ranked it by (DeepVM's Z for "deepvm")
    objective: Objective = Objective.DEEPVM
    catalog_source: str = ""
    prices_as_of: str = ""
    notes: tuple[str, ...] = field(default_factory=tuple)
    # the --max-price it was planned under, once read back from a plan file that says it (plan_document.py);
    # what a running job's recovery ladder may spend per hour (training/control/market.py). None: not known
    price_cap: float | None = None

    def summary(self) -> str:
        """e.g. "17 g4dn.xlarge spot + 1 c5.xlarge on-demand holder"."""
        parts = []
        for g in self.nodes:
            role = "" if g.role is Role.TRAINER else f" {g.role.value}"
            parts.append(f"{g.count} {g.instance_type} {g.market.value}{role}")
        return " + ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        return {
            "architecture": self.architecture.value,
            "price_per_hour": round(self.price_per_hour, 6),
            "objective_value": self.objective_value,
            "effective_flops": self.effective_flops,
            "region": self.region,
            "availability_zone": self.availability_zone,
            "nodes": [g.to_dict() for g in self.nodes],
            "objective": self.objective.value,
            "catalog_source": self.catalog_source,
            "prices_as_of": self.prices_as_of,
            "notes": list(self.notes),
            **({} if self.price_cap is None else {"price_cap": self.price_cap}),
        }
