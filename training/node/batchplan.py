"""How many samples each trainer takes per step, and how the learning rate follows the global batch.

The job spec's batch_size is per trainer for the planned number of trainers. When the cluster shrinks
the policy decides: `per_trainer_batch` keeps the global batch (survivors take more each), and
`lr_scaling` keeps each trainer's batch and scales the learning rate by the global batch (Goyal et
al.'s linear rule). A mixed plan can give explicit per-rank batches, proportional to node speed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from provisioning.core.errors import InputError


@dataclass(frozen=True)
class BatchPlan:
    """Per-rank batch sizes for one run."""

    per_rank: tuple[int, ...]  # samples per step on each rank, by rank
    lr_scale: float  # multiplies the spec's learning rate

    @property
    def global_batch(self) -> int:
        return sum(self.per_rank)

    def offset(self, rank: int) -> int:
        """Where rank's slice starts within a global batch."""
        return sum(self.per_rank[:rank])

    def loss_weight(self, rank: int) -> float:
        """Scale for rank's mean loss so that DDP's gradient average equals the global-batch mean."""
        return self.per_rank[rank] * len(self.per_rank) / self.global_batch


def plan_batches(
    batch_size: int,
    world_size: int,
    planned_world_size: int,
    policy: str,
    explicit: Sequence[int] | None = None,
) -> BatchPlan:
    """The batch plan for ``world_size`` ranks of a job planned for ``planned_world_size`` trainers."""
    planned_global = batch_size * planned_world_size
    if explicit is not None:
        if len(explicit) != world_size or any(b <= 0 for b in explicit):
            raise InputError(f"rank batches {list(explicit)}: need {world_size} positive sizes, one per rank")
        scale = sum(explicit) / planned_global if policy == "lr_scaling" else 1.0
        return BatchPlan(tuple(explicit), scale)
    if policy == "lr_scaling":
        return BatchPlan((batch_size,) * world_size, world_size / planned_world_size)
    if policy != "per_trainer_batch":
        raise InputError(f"unknown batch policy {policy!r}")
    if planned_global < world_size:
        raise InputError(f"global batch {planned_global} cannot be split over {world_size} ranks")
    base, extra = divmod(planned_global, world_size)
    return BatchPlan(tuple(base + (1 if r < extra else 0) for r in range(world_size)), 1.0)
