"""One launch of a job: the hostfile, the `mpirun` command line, and the running mpirun (an Attempt).

mpirun runs on the controller's machine and starts Open MPI's daemon on each node over SSH with the
cluster's own key and pinned known_hosts (host keys are checked; the key never leaves this machine, so
tree spawning, where daemons ssh onwards, is off). Nodes in this order: the anchor ("both") first, then
trainers, then holders, so that torch rank = MPI rank for every trainer and trainer 0, the rendezvous
point, is the anchor when there is one. A training node runs one rank per GPU (a 4-GPU g5.12xlarge is
four trainers; the planner paid for all four), with consecutive MPI ranks, so LOCAL_RANK picks the GPU;
on the anchor only the first rank also holds checkpoints. A holder node runs one rank. When every node address is a
loopback address (the sandbox) MPI's TCP traffic is kept on the loopback interface.

An Attempt owns one mpirun process: it runs in its own session (a Ctrl-C in the terminal reaches the
controller, which decides what the job gets), it is sent SIGTERM if the controller dies (so a crashed
controller leaves nothing running), and its tagged output lines are handed to a sink one by one with
the MPI rank that wrote them. Open MPI forwards SIGUSR1 to every rank: that is the clean stop (trainers
flush a checkpoint and leave); SIGTERM and then SIGKILL of its process group are the hard one.
"""

from __future__ import annotations

import ctypes
import ipaddress
import os
import re
import shlex
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from provisioning.catalog import Market
from provisioning.errors import InputError
from training.staging import JobPaths
from training.transport import HostSpec

ROLE_ORDER = {"both": 0, "trainer": 1, "holder": 2}
_TAG = re.compile(r"^\[(\d+),(\d+)\]<(stdout|stderr)>:(.*)$")
_PR_SET_PDEATHSIG = 1
_NUMPY_WARNING = "Failed to initialize NumPy"


@dataclass(frozen=True)
class Node:
    """A cluster node as a launch uses it."""

    instance_id: str
    host: HostSpec  # name (used in log prefixes), address, key, pinned known_hosts
    role: str  # DeepCheck role: trainer | holder | both
    market: Market
    speed: float = 1.0  # relative training speed (instance TFLOPS) for splitting the global batch
    gpus: int = 0  # from the instance type; a training node runs one rank per GPU

    @property
    def name(self) -> str:
        return self.host.name

    @property
    def trains(self) -> bool:
        return self.role in ("trainer", "both")

    @property
    def ranks(self) -> int:
        return max(1, self.gpus) if self.trains else 1

    def rank_roles(self) -> tuple[str, ...]:
        """The DeepCheck role of each of this node's ranks (the anchor's first rank trains and holds)."""
        return (self.role,) + ("trainer",) * (self.ranks - 1)


@dataclass(frozen=True)
class Launch:
    """Everything one mpirun needs."""

    nodes: tuple[Node, ...]  # in rank order (see arrange)
    paths: JobPaths  # where the job lives on the nodes
    job_file: str  # the YAML's name inside the job directory
    python: str  # the nodes' interpreter
    planned_trainers: int  # the plan's trainer count: the batch policy keeps its global batch
    master_port: int
    env: dict[str, str]  # exported on every rank (the job's env)
    rank_batches: tuple[int, ...] | None = None  # per trainer, when nodes differ in speed

    @property
    def trainers(self) -> tuple[Node, ...]:
        """The nodes that train (each runs `ranks` trainer ranks)."""
        return tuple(n for n in self.nodes if n.trains)

    @property
    def rank_nodes(self) -> tuple[Node, ...]:
        """The node of each MPI rank."""
        return tuple(n for n in self.nodes for _ in range(n.ranks))

    @property
    def trainer_ranks(self) -> int:
        return sum(n.ranks for n in self.trainers)


def arrange(nodes: Sequence[Node]) -> tuple[Node, ...]:
    """Rank order: anchor, trainers, holders (stable within each role)."""
    return tuple(sorted(nodes, key=lambda n: ROLE_ORDER[n.role]))


def split_batch(global_batch: int, speeds: Sequence[float]) -> tuple[int, ...]:
    """`global_batch` split in proportion to `speeds` (largest remainders; every trainer gets >= 1)."""
    if global_batch < len(speeds):
        raise InputError(f"global batch {global_batch} cannot be split over {len(speeds)} trainers")
    total = sum(speeds)
    shares = [global_batch * s / total for s in speeds]
    sizes = [max(1, int(share)) for share in shares]
    order = sorted(range(len(speeds)), key=lambda i: shares[i] - int(shares[i]), reverse=True)
    for i in order[: global_batch - sum(sizes)]:
        sizes[i] += 1
    return tuple(sizes)


def hostfile_text(launch: Launch) -> str:
    """One line per node in rank order, with as many slots as it runs ranks (filled in order: --map-by slot)."""
    return "".join(f"{n.host.address} slots={n.ranks}\n" for n in launch.nodes)


def mpirun_command(launch: Launch, hostfile: Path) -> list[str]:
    """The mpirun argv for a launch whose hostfile (hostfile_text) is at `hostfile`."""
    first = launch.nodes[0].host
    if any((n.host.user, n.host.port, n.host.key_path, n.host.known_hosts) != (first.user, first.port,
           first.key_path, first.known_hosts) for n in launch.nodes):  # fmt: skip
        raise InputError("mpirun needs one SSH user, port and key for all nodes of a cluster")
    agent = shlex.join(
        [
            "ssh",
            "-i", str(first.key_path),
            "-o", f"UserKnownHostsFile={first.known_hosts}",
            "-o", "StrictHostKeyChecking=yes",
            "-o", "BatchMode=yes",
            "-o", "IdentitiesOnly=yes",
            "-o", "ConnectTimeout=15",
            "-o", "ServerAliveInterval=5",
            "-p", str(first.port),
            "-l", first.user,
        ]
    )  # fmt: skip
    roles = ",".join(role for n in launch.nodes for role in n.rank_roles())
    paths = launch.paths
    argv = [
        "mpirun",
        "--hostfile", str(hostfile),
        "-np", str(len(launch.rank_nodes)),
        "--map-by", "slot",
        "--bind-to", "none",
        "--tag-output",
        "--mca", "plm_rsh_agent", agent,
        "--mca", "plm_rsh_no_tree_spawn", "1",
        "-wdir", paths.job,
        "-x", f"PYTHONPATH={paths.runtime}",
    ]  # fmt: skip
    if all(ipaddress.ip_address(n.host.address).is_loopback for n in launch.nodes):
        argv += ["--mca", "btl_tcp_if_include", "lo", "--mca", "oob_tcp_if_include", "lo"]
    for name, value in launch.env.items():
        argv += ["-x", f"{name}={value}"]
    argv += [
        # torch warns on import when numpy is missing; nothing here needs numpy, so that one line per
        # rank and launch would only bury the job's own output
        launch.python, "-W", f"ignore:{_NUMPY_WARNING}", "-m", "training.rank", f"{paths.job}/{launch.job_file}",
        "--out", paths.out,
        "--checkpoint-dir", paths.checkpoints,
        "--roles", roles,
        "--planned-trainers", str(launch.planned_trainers),
        "--master-addr", launch.trainers[0].host.address,
        "--master-port", str(launch.master_port),
    ]  # fmt: skip
    if launch.rank_batches is not None:
        argv += ["--rank-batches", ",".join(str(b) for b in launch.rank_batches)]
    return argv


@dataclass(frozen=True)
class RankLine:
    """One line of output, with the rank that wrote it (None: mpirun itself)."""

    attempt: int
    rank: int | None
    stream: str  # stdout | stderr
    text: str
    at: float  # time.monotonic() when the controller read it


@dataclass(frozen=True)
class AttemptExit:
    attempt: int
    returncode: int
    at: float


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM when the controller dies, even by kill -9."""
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


class Attempt:
    """One running mpirun (see the module docstring). Create it from the controller's main thread:
    the parent-death signal follows the thread that started the child."""

    def __init__(self, number: int, launch: Launch, workdir: Path, sink: Callable[[object], None]) -> None:
        self.number, self.launch, self.sink = number, launch, sink
        hostfile = workdir / f"hostfile.{number}"
        hostfile.write_text(hostfile_text(launch))
        env = dict(os.environ)
        if os.geteuid() == 0:  # Open MPI refuses root unless told; the sandbox runs as root
            env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
        self.started_at = time.monotonic()
        self.proc = subprocess.Popen(
            mpirun_command(launch, hostfile),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            start_new_session=True,
            preexec_fn=_die_with_parent,  # only a prctl: safe between fork and exec
        )
        self._readers = [
            threading.Thread(target=self._pump, args=(self.proc.stdout, "stdout"), daemon=True),
            threading.Thread(target=self._pump, args=(self.proc.stderr, "stderr"), daemon=True),
        ]
        for reader in self._readers:
            reader.start()
        threading.Thread(target=self._reap, daemon=True).start()

    def _pump(self, stream, name: str) -> None:
        for raw in stream:
            text = raw.decode("utf-8", "replace").rstrip("\r\n")
            match = _TAG.match(text)
            if match:
                self.sink(RankLine(self.number, int(match[2]), match[3], match[4], time.monotonic()))
            else:
                self.sink(RankLine(self.number, None, name, text, time.monotonic()))

    def _reap(self) -> None:
        code = self.proc.wait()
        for reader in self._readers:
            reader.join()  # every line before the exit
        self.sink(AttemptExit(self.number, code, time.monotonic()))

    def node_of(self, rank: int | None) -> Node | None:
        ranks = self.launch.rank_nodes
        return ranks[rank] if rank is not None and 0 <= rank < len(ranks) else None

    @property
    def running(self) -> bool:
        return self.proc.poll() is None

    def request_stop(self) -> None:
        """Clean stop: every trainer flushes a checkpoint at its next step and the job exits."""
        if self.running:
            self.proc.send_signal(signal.SIGUSR1)

    def kill(self, grace_s: float = 10.0) -> None:
        """Hard stop: SIGTERM to mpirun (it takes its daemons and ranks down), then SIGKILL to its group."""
        if not self.running:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
