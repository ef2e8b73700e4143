"""One launch of a job: its head node, the hostfile, the `mpirun` command line, and the running mpirun
(an Attempt).

mpirun runs on the cluster, on a head node, not on the user's machine: Open MPI's daemons connect back
to mpirun, which a laptop behind NAT or a firewall cannot accept, and the user's machine then needs no
Open MPI at all. The head is an on-demand node (Tiering: the first holder; Single Anchor: the anchor),
the node least likely to be taken away. From there mpirun starts the daemon on every node, the head
included, over SSH at their private addresses, with the cluster-internal key and a known_hosts file
pinning every node's host key (staging.prepare_head puts both there; the user's own key never leaves
this machine). Only the head holds the internal key, so tree spawning, where daemons ssh onwards, is off.

Nodes in this order: the anchor ("both") first, then trainers, then holders, so that torch rank = MPI rank
for every trainer and trainer 0, the rendezvous point, is the anchor when there is one. A training node
runs one rank per GPU (a 4-GPU g5.12xlarge is four trainers; the planner paid for all four), with
consecutive MPI ranks, so LOCAL_RANK picks the GPU; on the anchor only the first rank also holds
checkpoints. A holder node runs one rank.
When every node address is a loopback address (the sandbox) MPI's TCP traffic is kept on the loopback
interface.

An Attempt owns one mpirun: it runs under training.head.mpirun_guard, started over SSH, whose stdin carries the
controller's commands (stop, stacks, kill, and a ping every few seconds) and whose output is mpirun's, handed
to a sink line by line with the MPI rank that wrote it. Open MPI forwards SIGUSR1 to every rank: that
is the clean stop (trainers flush a checkpoint and leave); SIGTERM to mpirun and then SIGKILL to all it
started on the head are the hard one. A controller that dies, or whose connection drops, leaves nothing
running: mpirun_guard takes the end of its stdin, or a minute without a ping, as the hard stop.
"""

from __future__ import annotations

import ipaddress
import random
import re
import shlex
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import paramiko

from provisioning.catalog.model import Market
from provisioning.cloud.keys import host_pattern
from provisioning.cloud.ssh import TransportError
from provisioning.cloud.types import HostSpec, SshEndpoint
from provisioning.core.errors import InputError
from provisioning.planner.plan import Role
from training.control.plan_facts import TypeFacts
from training.control.staging import WARM_DIR, JobPaths
from training.shared.transport import OutputLine, RemoteCommand

ROLE_ORDER = {"both": 0, "trainer": 1, "holder": 2}
_ROLES = {Role.TRAINER: "trainer", Role.HOLDER: "holder", Role.ANCHOR: "both"}  # plan role -> DeepCheck role
_TAG = re.compile(r"^\[(\d+),(\d+)\]<(stdout|stderr)>:(.*)$")
_NUMPY_WARNING = "Failed to initialize NumPy"
_PING_S = 10.0  # how often an Attempt tells mpirun_guard that the controller is alive
_LEASE_S = 60.0  # mpirun_guard stops the job after this long without a word from the controller
_LOST = 255  # an Attempt's exit code when the connection to the head ended without one (as ssh's)
_EXIT_MARGIN_S = 15.0  # after a hard stop's grace: mpirun_guard's SIGKILL, its last output and its exit
# how long the ranks' stacks may take to come back (a signal through mpirun and its daemons, then their output's
# way back) before a hung attempt is killed: the kill would end the ranks, and drop their last output, first
_STACKS_S = 3.0
# torch.distributed's rendezvous port on trainer 0: below Linux's ephemeral range (32768-60999), where the
# outgoing connections of SSH, MPI and the cloud clients take their ports; one taken there fails an attempt
_MASTER_PORTS = (20000, 32767)


@dataclass(frozen=True)
class Node:
    """A cluster node as a launch uses it."""

    instance_id: str
    host: HostSpec  # name (used in log prefixes), address, key, pinned known_hosts
    role: str  # DeepCheck role: trainer | holder | both
    market: Market
    private_address: str  # where the other nodes reach it (mpirun's hostfile, the rendezvous)
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
    open_mpi_home: str | None = None  # where Open MPI is installed when it is not on the head's PATH
    restart_count: int = 0  # launches of the job before this one (a launched script's TORCHELASTIC_RESTART_COUNT)
    max_restarts: int = 0  # relaunches the controller tries after failures (TORCHELASTIC_MAX_RESTARTS)

    @property
    def trainers(self) -> tuple[Node, ...]:
        return tuple(n for n in self.nodes if n.trains)

    @property
    def rank_nodes(self) -> tuple[Node, ...]:
        """The node of each MPI rank."""
        return tuple(n for n in self.nodes for _ in range(n.ranks))

    @property
    def trainer_ranks(self) -> int:
        return sum(n.ranks for n in self.trainers)

    @property
    def head(self) -> Node:
        """Where mpirun runs: the first on-demand node in rank order (the anchor, or the first holder),
        the least likely to be taken away; the first node if there is none."""
        return next((n for n in self.nodes if n.market is Market.ON_DEMAND), self.nodes[0])

    @classmethod
    def on(
        cls,
        nodes: Sequence[Node],
        paths: JobPaths,
        job_file: str,
        python: str,
        planned_trainers: int,
        env: dict[str, str],
        rank_batches: tuple[int, ...] | None = None,
        *,
        restart_count: int = 0,
        max_restarts: int = 0,
    ) -> Launch:
        """A launch on `nodes` (put in rank order), on a rendezvous port of its own."""
        return cls(
            arrange(nodes),
            paths,
            job_file,
            python,
            planned_trainers,
            rendezvous_port(),
            env,
            rank_batches,
            restart_count=restart_count,
            max_restarts=max_restarts,
        )


def cluster_node(e: SshEndpoint, facts: TypeFacts) -> Node:
    """A node as a launch uses it: its DeepCheck role from the plan's, its speed and GPUs from its type's
    facts (training.control.plan_facts)."""
    return Node(e.instance_id, e.host, _ROLES[e.role], e.market, e.private_address, facts.tflops or 1.0, facts.gpus)


def rendezvous_port() -> int:
    """A port for torch.distributed's rendezvous on trainer 0 (a new one each launch: the last one's may
    still be in TIME_WAIT)."""
    return random.randint(*_MASTER_PORTS)


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


def mpi_network(addresses: Sequence[str]) -> str:
    """Where Open MPI may open TCP connections: `lo` when every node is on this host (the sandbox), else
    the smallest network that holds every node's private address.

    Left to itself, Open MPI tries every interface whose subnet two nodes share. AWS's Deep Learning AMIs
    run Docker, so every node has docker0 at 172.17.0.1/16: the same subnet everywhere, an address that
    leads back to the node itself, and a job that hangs at its first message."""
    ips = [ipaddress.ip_address(a) for a in addresses]
    if all(ip.is_loopback for ip in ips):
        return "lo"
    first = int(ips[0])
    spread = max(int(ip) ^ first for ip in ips).bit_length()
    return str(ipaddress.ip_network((first >> spread << spread, ips[0].max_prefixlen - spread)))


def mpirun_command(launch: Launch) -> list[str]:
    """The mpirun argv, for the head node: the hostfile (head_files: slots per node, in rank order), the internal key
    and the known_hosts file are where head_files and staging.prepare_head put them."""
    first = launch.nodes[0].host
    if any((n.host.user, n.host.port) != (first.user, first.port) for n in launch.nodes):
        raise InputError("mpirun needs one SSH user and port for all nodes of a cluster")
    paths = launch.paths
    agent = shlex.join(
        [
            "ssh",
            "-i",
            paths.internal_key,
            "-o",
            f"UserKnownHostsFile={paths.known_hosts}",
            "-o",
            "GlobalKnownHostsFile=/dev/null",
            "-o",
            "StrictHostKeyChecking=yes",
            "-o",
            "BatchMode=yes",
            "-o",
            "IdentitiesOnly=yes",
            "-o",
            "ConnectTimeout=15",
            "-o",
            "ServerAliveInterval=5",
            "-p",
            str(first.port),
            "-l",
            first.user,
        ]
    )
    roles = ",".join(role for n in launch.nodes for role in n.rank_roles())
    home = launch.open_mpi_home
    argv = [f"{home}/bin/mpirun", "--prefix", home] if home else ["mpirun"]  # --prefix: for remote daemons too
    argv += [
        "--hostfile",
        paths.hostfile,
        "-np",
        str(len(launch.rank_nodes)),
        "--map-by",
        "slot",
        "--bind-to",
        "none",
        "--tag-output",
        "--mca",
        "plm_rsh_agent",
        agent,
        "--mca",
        "plm_rsh_no_tree_spawn",
        "1",
        "-wdir",
        paths.job,
        "-x",
        f"PYTHONPATH={paths.runtime}",
    ]
    network = mpi_network([n.private_address for n in launch.nodes])
    argv += ["--mca", "btl_tcp_if_include", network, "--mca", "oob_tcp_if_include", network]
    for name, value in launch.env.items():
        argv += ["-x", f"{name}={value}"]
    argv += [
        # torch warns on import when numpy is missing; nothing here needs numpy, so that one line per
        # rank and launch would only bury the job's own output
        launch.python,
        "-W",
        f"ignore:{_NUMPY_WARNING}",
        "-m",
        "training.node.warm",
        f"{paths.home}/{WARM_DIR}",
        "training.node.rank",
        f"{paths.job}/{launch.job_file}",
        "--out",
        paths.out,
        "--checkpoint-dir",
        paths.checkpoints,
        "--roles",
        roles,
        "--planned-trainers",
        str(launch.planned_trainers),
        "--master-addr",
        launch.trainers[0].private_address,
        "--master-port",
        str(launch.master_port),
        "--run-id",
        paths.job_id,
        "--restart-count",
        str(launch.restart_count),
        "--max-restarts",
        str(launch.max_restarts),
        "--job-env",
        paths.env,
    ]
    if launch.rank_batches is not None:
        argv += ["--rank-batches", ",".join(str(b) for b in launch.rank_batches)]
    return argv


def head_files(launch: Launch) -> dict[str, str]:
    """What the head needs for this launch, by path on it: the hostfile, and a known_hosts file that pins
    each node's host key (as pinned on this machine) under the address the head reaches it at."""
    hostfile = "".join(f"{n.private_address} slots={n.ranks}\n" for n in launch.nodes)  # filled in order
    known_hosts = "".join(_pinned_line(n) for n in launch.nodes)
    return {launch.paths.hostfile: hostfile, launch.paths.known_hosts: known_hosts}


def _pinned_line(node: Node) -> str:
    host = node.host
    try:
        keys = paramiko.HostKeys(str(host.known_hosts)).lookup(host_pattern(host.address, host.port))
    except (OSError, paramiko.SSHException) as exc:
        raise TransportError(f"{host.where}: cannot read known_hosts {host.known_hosts}: {exc}") from None
    if not keys:
        raise TransportError(f"{host.where}: no host key pinned in {host.known_hosts}")
    pattern = host_pattern(node.private_address, host.port)
    return "".join(f"{pattern} {key.get_name()} {key.get_base64()}\n" for key in keys.values())


def guarded_mpirun_command(launch: Launch) -> str:
    """The command that runs mpirun on the head under training.head.mpirun_guard (for the head's login shell)."""
    guard = [launch.python, "-m", "training.head.mpirun_guard", "--lease", f"{_LEASE_S:g}", "--"]
    argv = [*guard, *mpirun_command(launch)]
    return "exec " + shlex.join(argv)


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


class Attempt:
    """One running mpirun on the launch's head node (see the module docstring)."""

    def __init__(self, number: int, launch: Launch, sink: Callable[[object], None]) -> None:
        self.number, self.launch, self.sink = number, launch, sink
        self.returncode: int | None = None
        self._exited = threading.Event()
        self.started_at = time.monotonic()
        self._remote = RemoteCommand(
            launch.head.host, guarded_mpirun_command(launch), self._line, env={"PYTHONPATH": launch.paths.runtime}
        )
        threading.Thread(target=self._reap, daemon=True).start()
        threading.Thread(target=self._keep_alive, daemon=True).start()

    def _line(self, line: OutputLine) -> None:
        match = _TAG.match(line.text)
        if match:
            self.sink(RankLine(self.number, int(match[2]), match[3], match[4], time.monotonic()))
        else:
            self.sink(RankLine(self.number, None, line.stream, line.text, time.monotonic()))

    def _reap(self) -> None:
        code = self._remote.wait()  # after every line of output
        assert code is not None  # no timeout
        if code < 0:
            where = self.launch.head.host.where
            self.sink(
                RankLine(self.number, None, "stderr", f"lost the connection to the head node {where}", time.monotonic())
            )
            code = _LOST
        self._remote.close()
        self.returncode = code
        self._exited.set()
        self.sink(AttemptExit(self.number, code, time.monotonic()))

    def _keep_alive(self) -> None:
        while not self._exited.wait(_PING_S):
            self._remote.send_line("ping")

    def node_of(self, rank: int | None) -> Node | None:
        ranks = self.launch.rank_nodes
        return ranks[rank] if rank is not None and 0 <= rank < len(ranks) else None

    @property
    def running(self) -> bool:
        return not self._exited.is_set()

    def request_stop(self) -> None:
        """Clean stop: every trainer flushes a checkpoint at its next step and the job exits."""
        if self.running:
            self._remote.send_line("stop")

    def dump_stacks(self) -> None:
        """Every rank prints its threads' stacks on stderr (lines the sink gets as any other); returns once they
        had time to come back, or mpirun has exited."""
        if self.running:
            self._remote.send_line("stacks")
            self._exited.wait(_STACKS_S)

    def kill(self, grace_s: float = 10.0) -> None:
        """Hard stop: SIGTERM to mpirun (it takes its daemons and ranks down), then SIGKILL to all it
        started on the head after `grace_s`. Returns once mpirun has exited, or the connection to the
        head is closed."""
        if not self.running:
            return
        self._remote.send_line(f"kill {grace_s:g}")
        if not self._exited.wait(grace_s + _EXIT_MARGIN_S):
            self._remote.close()  # mpirun_guard's stdin ends: the hard stop there, whatever happened here
            self._exited.wait()
