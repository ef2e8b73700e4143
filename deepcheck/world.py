"""Which rank does what: trainers send checkpoints, holders keep them, the lowest holder leads.

A rank may be both (the Single Anchor deployment: the anchor trains and holds). Indices (trainer index,
holder index) are positions in rank order and are what shard plans and manifests refer to, so that a
world with a different number of ranks can still read a checkpoint.
"""

from __future__ import annotations

from dataclasses import dataclass

from mpi4py import MPI

from .errors import ConfigError

ROLES = {"trainer": (True, False), "holder": (False, True), "both": (True, True), "anchor": (True, True)}


@dataclass(frozen=True)
class World:
    rank: int  # this rank in DeepCheck's communicator
    size: int
    trainers: tuple[int, ...]  # ranks that train, in order: trainer index = position
    holders: tuple[int, ...]  # ranks that hold, in order: holder index = position

    @property
    def lead(self) -> int:
        return self.holders[0]

    @property
    def is_trainer(self) -> bool:
        return self.rank in self.trainers

    @property
    def is_holder(self) -> bool:
        return self.rank in self.holders

    @property
    def trainer_index(self) -> int:
        return self.trainers.index(self.rank)

    @property
    def holder_index(self) -> int:
        return self.holders.index(self.rank)

    @property
    def everyone(self) -> tuple[int, ...]:
        return tuple(sorted(set(self.trainers) | set(self.holders)))


def discover(comm: MPI.Comm, role: str) -> World:
    """Collective: each rank of `comm` states its role; ConfigError unless there is a trainer and a holder."""
    if role not in ROLES:
        raise ConfigError(f"role must be one of {', '.join(ROLES)}; got {role!r}")
    roles = comm.allgather(role)
    trainers = tuple(r for r, x in enumerate(roles) if ROLES[x][0])
    holders = tuple(r for r, x in enumerate(roles) if ROLES[x][1])
    if not trainers or not holders:
        raise ConfigError(
            f"DeepCheck needs at least one trainer and one holder rank; got roles {roles}. "
            "Give the on-demand ranks role='holder' (or role='both' for a Single Anchor)"
        )
    return World(comm.Get_rank(), comm.Get_size(), trainers, holders)
