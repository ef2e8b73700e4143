"""The environment a launched script (run.calls_step: false) gets: the one torchrun gives its workers.

A user's own script written for `torchrun` (or a framework that finds its cluster from the environment:
Lightning, Accelerate, DeepSpeed) reads its place from the variables torch's elastic agent sets
(torch/distributed/elastic/agent/server/local_elastic_agent.py, `_start_workers`, in torch 2.13: RANK,
GROUP_RANK, ROLE_RANK, ROLE_NAME, LOCAL_WORLD_SIZE, WORLD_SIZE, GROUP_WORLD_SIZE, ROLE_WORLD_SIZE,
MASTER_ADDR, MASTER_PORT, TORCHELASTIC_RESTART_COUNT, TORCHELASTIC_MAX_RESTARTS, TORCHELASTIC_RUN_ID,
TORCHELASTIC_USE_AGENT_STORE, TORCH_NCCL_ASYNC_ERROR_HANDLING, and LOCAL_RANK). The agent's store is not
there (no agent runs): TORCHELASTIC_USE_AGENT_STORE is False, so `init_process_group("env://")` makes rank
0's own TCPStore at MASTER_ADDR:MASTER_PORT, as torchrun's workers do with a static rendezvous.

The trainer rank that starts the script is an MPI rank: Open MPI's variables (OMPI_*, PMIX_*, PMI_*, and its
OPAL_/ORTE_/PRTE_ internals) are taken out of the script's environment, or Lightning picks MPIEnvironment and
mpi4py in the script would join deepvm's world. deepvm's own variables tell the script where its kept files
go (DEEPVM_CHECKPOINT_DIR) and where rank 0's outputs are fetched from (DEEPVM_OUT).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

_MPI_PREFIXES = ("OMPI_", "PMIX_", "PMI_", "OPAL_", "ORTE_", "PRTE_")
ROLE_NAME = "default"  # torchrun's role when none is named (--role)


@dataclass(frozen=True)
class ScriptPlace:
    """Where one launched process sits in the job, in torchrun's terms: a node is a group."""

    rank: int  # among all the job's script processes (trainer index)
    world_size: int
    local_rank: int  # among this node's script processes: picks the GPU
    local_world_size: int
    group_rank: int  # this node's index among the training nodes
    group_world_size: int  # training nodes
    master_addr: str  # rank 0's node's private address
    master_port: int
    run_id: str  # the job's id: the same on every node and relaunch
    restart_count: int  # launches of this job before this one
    max_restarts: int  # how many more the controller would try after failures


def worker_environment(base: Mapping[str, str], place: ScriptPlace, extra: Mapping[str, str]) -> dict[str, str]:
    """`base` without the MPI launcher's variables, with torchrun's worker variables for `place` and `extra`
    (deepvm's own) on top."""
    return {**_without_mpi(base), **node_variables(base, place), **process_variables(place), **extra}


def node_environment(base: Mapping[str, str], place: ScriptPlace, extra: Mapping[str, str]) -> dict[str, str]:
    """A launch line's environment (run.command, once per node): the node's place, as SkyPilot gives its run
    commands, and no process's (the command's torchrun gives each of its processes its own); nothing of MPI's."""
    return {
        **_without_mpi(base),
        **node_variables(base, place),
        "DEEPVM_GPUS_PER_NODE": str(place.local_world_size),
        **extra,
    }


def node_variables(base: Mapping[str, str], place: ScriptPlace) -> dict[str, str]:
    """What every process of a node shares: where rank 0 meets the others."""
    return {
        "MASTER_ADDR": place.master_addr,
        "MASTER_PORT": str(place.master_port),
        "TORCH_NCCL_ASYNC_ERROR_HANDLING": base.get("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1"),
    }


def process_variables(place: ScriptPlace) -> dict[str, str]:
    """torchrun's variables of one worker process at `place`."""
    return {
        "RANK": str(place.rank),
        "LOCAL_RANK": str(place.local_rank),
        "GROUP_RANK": str(place.group_rank),
        "ROLE_RANK": str(place.rank),
        "ROLE_NAME": ROLE_NAME,
        "LOCAL_WORLD_SIZE": str(place.local_world_size),
        "WORLD_SIZE": str(place.world_size),
        "GROUP_WORLD_SIZE": str(place.group_world_size),
        "ROLE_WORLD_SIZE": str(place.world_size),
        "TORCHELASTIC_RESTART_COUNT": str(place.restart_count),
        "TORCHELASTIC_MAX_RESTARTS": str(place.max_restarts),
        "TORCHELASTIC_RUN_ID": place.run_id,
        "TORCHELASTIC_USE_AGENT_STORE": str(False),
    }


def _without_mpi(base: Mapping[str, str]) -> dict[str, str]:
    return {name: value for name, value in base.items() if not name.startswith(_MPI_PREFIXES)}
