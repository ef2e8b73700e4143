"""Which samples each rank trains on at each step: a resumable, elastic distributed batch sampler.

torch's DistributedSampler gives every rank an equal share per epoch and can only restart at an epoch
boundary. Here each epoch is one seeded permutation of the dataset cut into global batches; rank r
takes its slice of each global batch (sizes from the BatchPlan, so they may differ per rank). The
position is (epoch, samples consumed in that epoch), which stays meaningful when the number of ranks
or their batch sizes change, so a job resumed on fewer trainers continues exactly where it stopped.
An incomplete last global batch of an epoch is dropped, as with drop_last=True.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from training.node.batchplan import BatchPlan


@dataclass(frozen=True)
class SamplerPosition:
    """Where the next global batch starts."""

    epoch: int = 0
    offset: int = 0  # samples of this epoch's permutation already consumed by all ranks together


class GlobalBatchSampler:
    """Yields this rank's index tensor for each step; advance() after the step commits."""

    def __init__(self, dataset_size: int, plan: BatchPlan, rank: int, seed: int, position=SamplerPosition()):
        if plan.global_batch > dataset_size:
            raise ValueError(f"global batch {plan.global_batch} is larger than the dataset ({dataset_size})")
        self.size = dataset_size
        self.plan = plan
        self.rank = rank
        self.seed = seed
        self.position = position
        self._perm: tuple[int, torch.Tensor] | None = None

    @property
    def steps_per_epoch(self) -> int:
        return self.size // self.plan.global_batch

    def _permutation(self, epoch: int) -> torch.Tensor:
        if self._perm is None or self._perm[0] != epoch:
            gen = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
            self._perm = (epoch, torch.randperm(self.size, generator=gen))
        return self._perm[1]

    def _normalised(self) -> SamplerPosition:
        epoch, offset = self.position.epoch, self.position.offset
        if offset + self.plan.global_batch > self.size:
            return SamplerPosition(epoch + 1, 0)
        return self.position

    def indices(self) -> torch.Tensor:
        """This rank's sample indices for the next step."""
        pos = self._normalised()
        start = pos.offset + self.plan.offset(self.rank)
        return self._permutation(pos.epoch)[start : start + self.plan.per_rank[self.rank]]

    @property
    def epoch(self) -> int:
        """The epoch the next step belongs to."""
        return self._normalised().epoch

    def advance(self) -> None:
        pos = self._normalised()
        self.position = SamplerPosition(pos.epoch, pos.offset + self.plan.global_batch)
