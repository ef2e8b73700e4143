"""Where this process sits in the job: rank, world size and rendezvous, read from the launcher's env.

Under Open MPI every rank gets OMPI_COMM_WORLD_{RANK,SIZE,LOCAL_RANK,LOCAL_SIZE}; under torchrun or a
hand-written launch RANK, WORLD_SIZE and LOCAL_RANK. torch.distributed needs MASTER_ADDR/MASTER_PORT
as well, which mpirun does not set: the launcher exports them (`mpirun -x`) or passes them as args.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist

from provisioning.core.errors import InputError

DEFAULT_PORT = 29500


@dataclass(frozen=True)
class DistEnv:
    """This rank's place in the job."""

    rank: int
    world_size: int
    local_rank: int  # index among the ranks on this node: picks the GPU
    local_size: int  # ranks on this node: shares the CPU cores
    master_addr: str  # rank 0's address, where torch.distributed meets
    master_port: int


def _first(environ: Mapping[str, str], *names: str) -> str | None:
    return next((environ[name] for name in names if environ.get(name)), None)


def from_environment(
    environ: Mapping[str, str] | None = None, master_addr: str | None = None, master_port: int | None = None
) -> DistEnv:
    """Read the rank layout from MPI's or torchrun's variables; without either, a single process."""
    env = os.environ if environ is None else environ
    try:
        rank = int(_first(env, "OMPI_COMM_WORLD_RANK", "PMI_RANK", "RANK") or 0)
        world = int(_first(env, "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "WORLD_SIZE") or 1)
        local_rank = int(_first(env, "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "LOCAL_RANK") or 0)
        local_size = int(_first(env, "OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "LOCAL_WORLD_SIZE") or 1)
        port = master_port or int(env.get("MASTER_PORT") or DEFAULT_PORT)
    except ValueError as exc:
        raise InputError(f"bad rank environment: {exc}") from None
    if not 0 <= rank < world:
        raise InputError(f"rank {rank} is outside a world of {world}")
    addr = master_addr or env.get("MASTER_ADDR") or "127.0.0.1"
    return DistEnv(rank, world, local_rank, local_size, addr, port)


def pick_device(choice: str, env: DistEnv) -> torch.device:
    """The device a rank trains on: `cuda` (this rank's GPU on its node), `cpu`, or `auto` (a GPU if any)."""
    if choice == "cuda" or (choice == "auto" and torch.cuda.is_available()):
        if not torch.cuda.is_available():
            raise InputError("--device cuda: no CUDA device visible")
        torch.cuda.set_device(env.local_rank % torch.cuda.device_count())
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def init_process_group(env: DistEnv, device: torch.device, timeout_s: float = 300) -> None:
    """Join the torch.distributed group: NCCL between GPUs, gloo between CPUs."""
    backend = "nccl" if device.type == "cuda" else "gloo"
    dist.init_process_group(
        backend,
        init_method=f"tcp://{env.master_addr}:{env.master_port}",
        rank=env.rank,
        world_size=env.world_size,
        timeout=timedelta(seconds=timeout_s),
    )
