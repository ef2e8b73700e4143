"""The trainers' own MPI communicator: agree on a step to act on, and average a number across trainers.

Why MPI and not torch.distributed: a user's own script (the job spec's `run:`) owns its process group,
backend and device, and may not have created one when deepvm needs to agree; the trainers of a job
always share an MPI world with the checkpoint holders. The group holds only the trainers, in DeepCheck's
trainer order, so its rank is the torch rank; holders never take part. Every call waits without spinning
(deepcheck.transport.allreduce: why).
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence

from mpi4py import MPI

from deepcheck.transport import allreduce, any_each


class TrainerComm:
    """A communicator over the trainer ranks of `world`; every call is collective over the trainers."""

    def __init__(self, world: MPI.Comm, trainers: Sequence[int]) -> None:
        self.comm = world.Create_group(world.Get_group().Incl(list(trainers)))  # only the trainers call it
        self.rank, self.size = self.comm.Get_rank(), self.comm.Get_size()

    def any(self, flag: bool) -> bool:
        """True on every trainer when `flag` is True on at least one."""
        return self.any_each(flag)[0]

    def any_each(self, *flags: bool) -> tuple[bool, ...]:
        """`any` of each flag, in one collective (one bit per flag): a step's checks cost one round trip."""
        return any_each(self.comm, *flags)

    def mean(self, value: float) -> float:
        return allreduce(self.comm, array("d", [value]), MPI.SUM)[0] / self.size

    def each(self, value: int) -> list[int]:
        """Every trainer's `value`, in trainer order (one small all-reduce, each trainer filling its slot)."""
        slots = array("d", [0.0] * self.size)
        slots[self.rank] = value
        return [int(v) for v in allreduce(self.comm, slots, MPI.SUM)]

    def free(self) -> None:
        self.comm.Free()
