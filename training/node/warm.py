"""Warm starts: a rank whose Python has torch imported before mpirun asks for it.

Why: after a Spot notice the relaunch waits for its slowest rank, and every trainer rank began by importing
torch: 1.9 CPU-s each, 4.3-4.6 s of the 7-8 s from notice to training again on the sandbox's two cores (a
GPU node adds CUDA's libraries to it). A node keeps one warm interpreter that has imported torch and the
libraries ranks use, and each rank of every launch after the first is a fork of it.

How, on one node:
1. Preparing the node for a job (training.control.staging) starts its warm server, `python -m
   training.node.warm --serve DIR`, from the SSH session, detached: not below mpirun's guard, which ends all it
   started when an attempt ends. The server imports torch and what ranks import besides (never mpi4py.MPI),
   deepvm's own job spec and rank records among them (a rank forked after a push that changed deepvm's code
   imports deepvm anew: _drop_stale), listens at DIR/KEY.sock (KEY names the interpreter, the torch install
   and this module: a new torch or warm-start protocol, a new server) and ends after IDLE_S without a rank; a
   second one for the same KEY leaves at once.
2. The launcher's command runs `python -m training.node.warm DIR MODULE ARGS...`: the starter (this module's
   main, the standard library only) connects to the server. The server listens before it imports, so the
   first launch after preparing the node waits for that one import instead of every rank importing torch
   again beside it, on the same cores. When none answers (not started, gone, or not done importing in
   PID_WAIT_S), the starter becomes the rank itself, cold: os.execv of `python -m MODULE ARGS`.
3. When one answers, the starter hands it its argv, environment, working directory and its stdin, stdout and
   stderr (SCM_RIGHTS); the server forks, and the child takes all of them, names itself as the cold rank
   would be named (setproctitle, where installed: `ps` and whoever looks for a job's ranks by their command
   line see `python -m MODULE ARGS`) and runs MODULE as `python -m` would. MPI is initialised in the child,
   as in a cold rank: Open MPI's daemon accepts a rank that is a descendant of another process than the one
   it started, given that process's environment (tests/training/test_warm.py runs ranks so under mpirun).
4. The starter stays as the rank's stand-in for mpirun: it forwards the signals mpirun sends (SIGTERM, SIGINT,
   SIGUSR1, SIGUSR2, SIGHUP) to the child and exits with the child's status, by the same signal if a signal
   ended it. If the starter is killed (SIGKILL from mpirun or its guard), its connection closes and the server
   kills the child; if the server dies, so does the child (PR_SET_PDEATHSIG), and its starter after it: no
   rank outlives its attempt or runs without a stand-in.

OpenMP reads OMP_NUM_THREADS when torch loads it, in the server: a child applies the rank's value itself. Set
DEEPVM_COLD_START=1 in a job's env to start every rank cold.
"""

from __future__ import annotations

import array
import contextlib
import fcntl
import hashlib
import importlib.util
import json
import os
import select
import signal
import socket
import struct
import sys
import threading
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO

IDLE_S = 900.0  # a server with no rank for this long ends (the next launch on the node is cold again)
PID_WAIT_S = 120.0  # a starter waits this long for a server still importing (a GPU node's torch: 10-20 s)
WARM_DIR_VARIABLE = "DEEPVM_WARM_DIR"  # where a rank started through this module finds the node's warm server
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1, signal.SIGUSR2, signal.SIGHUP)
PRELOAD = (  # what ranks import beside their own code; torch._dynamo and tensor.parallel.ddp: what
    # DistributedDataParallel.__init__ imports (1.6 s of CPU on its own, a second after torch)
    "torch",
    "torch.distributed",
    "torch.nn.parallel",
    "torch._dynamo",
    "torch.distributed.tensor.parallel.ddp",
    "torch.optim",
    "yaml",
    "pydantic",
    "setproctitle",
)
PRELOAD_OURS = (  # deepvm's own modules every rank imports, mpi4py.MPI aside: 0.4-0.7 s of pydantic models a
    # rank; a rank forked after a push that changed any module the server imported of deepvm imports them anew
    "training.shared.jobspec",
    "training.shared.events",
    "training.shared.storage",
)
_OUR_PACKAGES = ("training", "provisioning", "deepcheck")
_PID = struct.Struct("!q")  # the server's replies: the child's pid, then its exit status (-N: signal N)
_SIZE = struct.Struct("!I")  # a request's length, before it
_MAX_REQUEST = 1 << 22


@dataclass(frozen=True)
class RankRequest:
    """What a starter hands the server, beside its stdin, stdout and stderr (SCM_RIGHTS): the rank to become."""

    argv: tuple[str, ...]  # MODULE ARGS..., as `python -m` takes them
    env: dict[str, str]  # the starter's environment, which mpirun gave the rank (OMPI_*, PMIX_*, the job's)
    cwd: str

    def encode(self) -> bytes:
        body = json.dumps(asdict(self)).encode()
        return _SIZE.pack(len(body)) + body

    @classmethod
    def decode(cls, body: bytes) -> RankRequest:
        raw = json.loads(body)
        return cls(tuple(raw["argv"]), dict(raw["env"]), str(raw["cwd"]))


def server_key(python: str) -> str:
    """The server that fits this interpreter, its torch install (no import: find_spec only) and this very
    module: a starter of a newer deepvm never talks to a server of an older one's protocol."""
    spec = importlib.util.find_spec("torch")
    torch_file = spec.origin if spec is not None and spec.origin else ""
    stamp = os.stat(torch_file).st_mtime_ns if torch_file else 0
    digest = hashlib.sha256(f"{os.path.realpath(python)}\0{torch_file}\0{stamp}\0".encode())
    digest.update(Path(__file__).read_bytes())
    return digest.hexdigest()[:16]


# the starter: what mpirun starts


def socket_path(directory: Path) -> Path:
    return directory / f"{server_key(sys.executable)}.sock"


def start(directory: Path, module: str, args: Sequence[str]) -> int:
    """Run `python -m module args` warm through the node's server, or cold (see the module docstring)."""
    argv = [module, *args]
    os.environ[WARM_DIR_VARIABLE] = str(directory)  # the rank's own processes may start warm too (a launched script)
    if os.environ.get("DEEPVM_COLD_START") != "1":
        conn = _connect(socket_path(directory))
        if conn is not None:
            with conn:
                status = _run_warm(conn, argv)
            if status is not None:
                return status
    os.execv(sys.executable, [sys.executable, *(f"-W{w}" for w in sys.warnoptions), "-m", *argv])


def _connect(path: Path) -> socket.socket | None:
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(str(path))
    except OSError:  # no server, or a stale socket of one that ended
        conn.close()
        return None
    return conn


def _run_warm(conn: socket.socket, argv: list[str]) -> int | None:
    """The rank's exit status once the server's fork of it ended; None when the server started none (it went
    away, or did not finish its imports in PID_WAIT_S): nothing runs, and the caller starts the rank cold."""
    request = RankRequest(tuple(argv), dict(os.environ), os.getcwd())
    # the forwarding is in place before the request: the fork runs (and may print, and be signalled through this
    # process) before its pid reaches here; a signal of that moment waits for the pid (test_warm's SIGUSR1 after
    # the rank's first line ended this starter by SIGUSR1's default on a loaded machine)
    relay = _Relay()
    previous = {sig: signal.signal(sig, relay.signalled) for sig in FORWARDED}
    conn.settimeout(PID_WAIT_S)
    try:
        conn.sendmsg([request.encode()], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [0, 1, 2]))])
        pid = _read_number(conn)
    except (OSError, EOFError):  # TimeoutError is an OSError; a server that reads the request later sees it closed
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        relay.replay_on(os.getpid())  # no rank started: what came is this process's, as for a cold rank
        return None
    conn.settimeout(None)
    relay.forward_to(pid)
    try:
        status = _read_number(conn)
    except EOFError:
        raise SystemExit("deepvm warm start: the node's warm server went away") from None
    if status < 0:  # ended by a signal: end the same way, so mpirun sees what it would see of a cold rank
        if -status not in (signal.SIGKILL, signal.SIGSTOP):  # theirs cannot be set (EINVAL): always the default
            signal.signal(-status, signal.SIG_DFL)
        os.kill(os.getpid(), -status)
    return status


class _Relay:
    """The starter's signal handler: signals for the rank, held until its pid is known, then passed on."""

    def __init__(self) -> None:
        self.pid: int | None = None
        self.held: list[int] = []

    def signalled(self, number: int, _frame: object) -> None:
        if self.pid is None:
            self.held.append(number)
        else:
            _forward(self.pid, number)

    def forward_to(self, pid: int) -> None:
        self.pid = pid
        for number in self.held:
            _forward(pid, number)
        self.held.clear()

    def replay_on(self, pid: int) -> None:
        """The held signals to `pid`, under the handlers now in place."""
        for number in self.held:
            os.kill(pid, number)
        self.held.clear()


def _forward(pid: int, number: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, number)


def _read_number(conn: socket.socket) -> int:
    return _PID.unpack(_read_exactly(conn, _PID.size))[0]


def _read_exactly(conn: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = conn.recv(size - len(data))
        if not chunk:
            raise EOFError(f"the connection ended {size - len(data)} bytes short")
        data += chunk
    return data


# the server


def serve(directory: Path) -> int:
    """The node's warm server in `directory` (one per key: a second one leaves at once)."""
    with contextlib.suppress(OSError):
        os.setsid()  # a session of its own: whatever ends the session that started it does not end it
    directory.mkdir(parents=True, exist_ok=True)
    path = socket_path(directory)
    lock = open(path.with_suffix(".lock"), "a+")  # noqa: SIM115 - held for the server's life
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return 0
    lock.truncate(0)
    lock.write(f"{os.getpid()}\n")  # which process the server is, for whoever must end it
    lock.flush()
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen(64)  # before the imports: the first launch's starters wait in the backlog (see start())
    for name in (*PRELOAD, *PRELOAD_OURS):
        with contextlib.suppress(ImportError):
            __import__(name)
    listener.settimeout(IDLE_S)
    server = _Server(listener, lock, _our_sources())
    while True:
        try:
            conn, _ = listener.accept()
        except TimeoutError:
            if server.running:
                continue
            path.unlink(missing_ok=True)
            return 0
        server.start_rank(conn)


class _Server:
    """Forks ranks; one thread per rank waits for its end, one for its starter's."""

    def __init__(self, listener: socket.socket, lock_file: IO[str], ours: dict[str, tuple[str, bytes]]) -> None:
        self.listener, self.lock_file = listener, lock_file
        self.ours = ours  # deepvm's modules this server imported: (file, digest) by name
        self.lock = threading.Lock()
        self.children: set[int] = set()
        self.starters: set[socket.socket] = set()  # the open connections, which a forked rank must not keep

    @property
    def running(self) -> bool:
        with self.lock:
            return bool(self.children)

    def start_rank(self, conn: socket.socket) -> None:
        try:
            request, fds = _receive(conn)
        except (OSError, ValueError, EOFError):
            conn.close()
            return
        if _gone(conn):  # it gave up waiting while this server imported, and started its rank cold
            for fd in fds:
                os.close(fd)
            conn.close()
            return
        server = os.getpid()
        with self.lock:
            inherited = [self.listener, self.lock_file, conn, *self.starters]
            pid = os.fork()
            if pid == 0:
                for held in inherited:  # the server's lock and sockets are the server's alone
                    held.close()
                _become_rank(request, fds, server, self.ours)
            self.starters.add(conn)
            self.children.add(pid)
        for fd in fds:
            os.close(fd)
        try:
            conn.sendall(_PID.pack(pid))
        except OSError:
            _forward(pid, signal.SIGKILL)
        threading.Thread(target=self._reap, args=(conn, pid), daemon=True).start()
        threading.Thread(target=self._watch_starter, args=(conn, pid), daemon=True).start()

    def _reap(self, conn: socket.socket, pid: int) -> None:
        os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)  # ended, not reaped: its pid is not reused yet
        with self.lock:
            self.children.discard(pid)
        _, status = os.waitpid(pid, 0)
        with contextlib.suppress(OSError):
            conn.sendall(_PID.pack(os.waitstatus_to_exitcode(status)))
        with self.lock:
            self.starters.discard(conn)
            conn.close()

    def _watch_starter(self, conn: socket.socket, pid: int) -> None:
        """The starter never writes after its request: a read that returns is its end (or the rank's)."""
        with contextlib.suppress(OSError):
            conn.recv(1)
        with self.lock:
            if pid in self.children:  # not reaped yet (see _reap): the pid is still the rank's
                _forward(pid, signal.SIGKILL)


def _gone(conn: socket.socket) -> bool:
    """Whether the starter closed its end: it never writes after its request, so readable means ended."""
    ready, _, _ = select.select([conn], [], [], 0)
    return bool(ready)


def _receive(conn: socket.socket) -> tuple[RankRequest, list[int]]:
    fds = array.array("i")
    header, ancillary, _, _ = conn.recvmsg(_SIZE.size, socket.CMSG_LEN(3 * fds.itemsize))
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(data[: len(data) - len(data) % fds.itemsize])
    if len(header) != _SIZE.size or len(fds) != 3:
        for fd in fds:
            os.close(fd)
        raise ValueError("not a warm-start request")
    size = _SIZE.unpack(header)[0]
    if size > _MAX_REQUEST:
        raise ValueError("request too large")
    return RankRequest.decode(_read_exactly(conn, size)), list(fds)


def _our_sources() -> dict[str, tuple[str, bytes]]:
    """deepvm's modules imported in this process, each with its file and the digest of that file's bytes."""
    found = {}
    for name, module in list(sys.modules.items()):
        path = getattr(module, "__file__", None)
        if name.split(".")[0] in _OUR_PACKAGES and path:
            found[name] = (path, _digest(path))
    return found


def _digest(path: str) -> bytes:
    try:
        return hashlib.sha256(Path(path).read_bytes()).digest()
    except OSError:  # gone: no digest matches it
        return b""


def _drop_stale(ours: dict[str, tuple[str, bytes]]) -> None:
    """After a push that changed deepvm's code on the node (the server lives across jobs, the pushes are
    incremental: training.control.staging), a rank must run the code pushed, as a cold one would: if any file
    the server imported of deepvm differs now, the rank imports all of deepvm anew (its modules import each
    other: none is kept beside a newer one)."""
    if any(_digest(path) != digest for path, digest in ours.values()):
        for name in ours:
            sys.modules.pop(name, None)


def _become_rank(request: RankRequest, fds: list[int], server: int, ours: dict[str, tuple[str, bytes]]) -> None:
    """In the forked child: take the starter's streams, environment, directory and argv, and run its module
    as `python -m` does; never returns."""
    import atexit
    import runpy
    import traceback

    from training.shared.prctl import die_with_parent

    code = 1
    try:
        # SIGKILL if the server ends: the starter then ends too, and mpirun with it, rather than a rank running
        # on with no stand-in for mpirun to stop; a server gone already never sends it
        die_with_parent(signal.SIGKILL)
        if os.getppid() != server:
            return
        with contextlib.suppress(ImportError):  # before the environment changes: it finds argv's memory by it
            import setproctitle

            setproctitle.setproctitle(" ".join([sys.executable, "-m", *request.argv]))
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        sys.stdin = open(0, closefd=False)  # noqa: SIM115 - the rank's streams, for its life
        sys.stdout = open(1, "w", closefd=False)  # noqa: SIM115
        sys.stderr = open(2, "w", closefd=False)  # noqa: SIM115
        os.chdir(request.cwd)
        os.environ.clear()
        os.environ.update(request.env)
        extra = [request.cwd, *filter(None, request.env.get("PYTHONPATH", "").split(os.pathsep))]
        sys.path[:0] = [p for p in extra if p not in sys.path]
        _drop_stale(ours)
        threads = request.env.get("OMP_NUM_THREADS", "")
        if threads.isdigit() and int(threads) > 0 and "torch" in sys.modules:
            sys.modules["torch"].set_num_threads(int(threads))
        for sig in (*FORWARDED, signal.SIGCHLD):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        sys.argv = list(request.argv)
        try:
            runpy.run_module(request.argv[0], run_name="__main__", alter_sys=True)
            code = 0
        except SystemExit as exc:  # as the interpreter treats it: a number is the code, anything else is said
            code = exc.code if isinstance(exc.code, int) else int(exc.code is not None)
            if exc.code is not None and not isinstance(exc.code, int):
                print(exc.code, file=sys.stderr)
        except BaseException:
            traceback.print_exc()
            code = 1
        atexit._run_exitfuncs()  # what the interpreter's exit would run
        sys.stdout.flush()
        sys.stderr.flush()
        mpi = sys.modules.get("mpi4py.MPI")  # mpi4py finalizes in Py_AtExit, which os._exit skips
        if mpi is not None and mpi.Is_initialized() and not mpi.Is_finalized():
            mpi.Finalize()
    finally:
        os._exit(code)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) == 2 and args[0] == "--serve":
        return serve(Path(args[1]))
    if args and args[0] == "--serve":
        print("usage: python -m training.node.warm --serve DIR", file=sys.stderr)
        return 2
    if len(args) < 2:
        print("usage: python -m training.node.warm DIR MODULE [ARGS...]", file=sys.stderr)
        return 2
    return start(Path(args[0]), args[1], args[2:])


if __name__ == "__main__":
    sys.exit(main())
