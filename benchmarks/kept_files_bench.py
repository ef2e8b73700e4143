"""What keeping a launched script's snapshot costs (issue 36: goal <= 1.5x) against copying the same bytes over
the same link, in the same run.

    python benchmarks/kept_files_bench.py [--size 1GiB] [--roles trainer,trainer,holder trainer,holder] [--parts]

ours: `python -m training.node.rank` under a local mpirun, one rank per role, a job whose script
(`run: {calls_step: false}`, checkpoint.files [snapshot.bin]) writes one file of SIZE on RANK 0, as torchrun's
examples save theirs, prints when it closed it, and waits. Measured: from the close to the moment the holder's
L2 manifest of that checkpoint is committed (ROOT/ckpt-*/manifest.json appears; DeepCheck renames it in last,
after every shard is fsynced), i.e. until the kept copy survives the node and the holder's process. Its
parts, from the rank's `kept` event: close -> the tick that found the file (up to training.node.launched's
TICK_S of waiting, then reading it), the agreement + L0 snapshot (the event's `seconds`), and L1 + L2 in
DeepCheck's background (the event's arrival -> the manifest).

baseline: the same bytes from the same just-written file (in the page cache, as ours reads it) sent over a TCP
socket on loopback (`socket.sendfile`, zero copy) to a receiver process that writes them to a file beside
the holder's and fsyncs it and its directory. Why this one: between nodes the only link is the network, and
the least a copy "safe on the other node's disk" can do is read, send, write, fsync once; `cp` + fsync skips
the link, and a read/sendall loop would only add copies to the baseline and flatter ours. The ranks talk over
the same link: `--btl self,tcp` (the default, with pml ob1) makes Open MPI use TCP on loopback, as between the
sandbox's hosts, not shared memory (`--btl` "" leaves Open MPI's own choice).

The peak RSS (VmHWM) of each trainer rank and of the holder is read from /proc once the copy is safe.

--parts then times the pieces of ours one by one inside a fresh mpirun with the same roles and link (through
DeepCheck's own API and training.node's own functions, not a copy of them): reading the file, DeepCheck's save
of it from the trainer that read it (training.node.kepttable: the others hold none of it; the save's L0 copy),
its L1 and L2, and its checksum alone.

Runs on the CPUs of one machine (two cores here): one size at a time, nothing left running. Open MPI as root
needs OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1, set here.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import queue
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MiB = 1 << 20
GOAL = 1.5
SNAPSHOT = "snapshot.bin"
DONE = "done"  # the bench creates it in the job's directory once it measured: every script then exits 0
POLL_S = 0.005  # between two looks for the holder's manifest: the resolution of `ours`
PIECE = 64 * MiB  # the script writes its file in pieces of this size, as torch.save writes its stream

# the launched script: on RANK 0, one snapshot of SIZE bytes written and closed after the rank's loop settled;
# on every rank, waits for DONE
WRITER = f"""\
import json, os, sys, time
size, rank = int(sys.argv[1]), int(os.environ["RANK"])
def say(**fields):
    print("BENCH " + json.dumps({{"rank": rank, "rank_pid": os.getppid(), **fields}}), flush=True)
say(what="started", t=time.time())
if rank == 0:
    time.sleep(2.5)  # a few of the rank's ticks with nothing to keep: the rank's start-up is not measured
    piece = os.urandom(1 << 20) * ({PIECE} // (1 << 20))
    t0 = time.time()
    with open("{SNAPSHOT}", "wb") as f:
        left = size
        while left:
            left -= f.write(memoryview(piece)[: min(left, len(piece))])
    say(what="closed", t=time.time(), write_s=time.time() - t0)
while not os.path.exists("{DONE}"):
    time.sleep(0.05)
"""

JOB = """\
name: kept-files-bench
run: {{script: writer.py, calls_step: false, args: ["{size}"]}}
checkpoint: {{files: [{snapshot}], levels: [l1, l2]}}
env: {{OMP_NUM_THREADS: "1"}}
"""


@dataclass(frozen=True)
class Ours:
    """One launch's times, seconds from the script's close of its file (time.time(): one machine, one clock)."""

    total_s: float  # -> the holder's L2 manifest committed
    found_s: float  # -> the tick that found the file had read it and began to agree (tick wait + read)
    agree_save_s: float  # the kept event's own seconds: the trainers' agreement (Bcast) + DeepCheck's L0 save
    background_s: float  # the kept event -> the manifest: L1 (ship + checksum) and L2 (write + fsync)
    write_s: float  # how long the script took to write the file (not part of any time above)
    trainer_peak_mib: dict[int, float]  # VmHWM by trainer rank
    holder_peak_mib: float


def mpirun(roles: str, btl: str, argv: list[str], names: tuple[str, ...] | list[str] = ()) -> list[str]:
    """The local mpirun of one process per role, as tests/training/worker_jobs.launch_ranks starts the ranks;
    `names`: more of this environment's variables for the ranks."""
    link = ["--mca", "pml", "ob1", "--mca", "btl", btl] if btl else []  # ob1: the pml that honours btl (not UCX's)
    exported = [x for name in ("PYTHONPATH", *names) for x in ("-x", name)]
    return [
        "mpirun",
        "-np",
        str(len(roles.split(","))),
        "--oversubscribe",
        "--bind-to",
        "none",
        *link,
        *exported,
        "-x",
        "OMP_NUM_THREADS=1",
        sys.executable,
        "-W",
        "ignore",
        *argv,
    ]


def mpi_env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO), "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}


def peak_mib(pid: int) -> float:
    """A live process's peak resident set (VmHWM), MiB; NaN when it is gone."""
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def run_ours(roles: str, size: int, btl: str, work: Path, timeout: float = 600.0) -> Ours:
    """One launch of the ranks (see the module docstring); leaves the snapshot in `work` for the baseline."""
    (work / "writer.py").write_text(WRITER)
    job = work / "job.yaml"
    job.write_text(JOB.format(size=size, snapshot=SNAPSHOT))
    ckpt = work / "ckpt"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    argv = [
        "-m",
        "training.node.rank",
        str(job),
        "--out",
        str(work / "out"),
        "--checkpoint-dir",
        str(ckpt),
        "--roles",
        roles,
        "--planned-trainers",
        str(roles.split(",").count("trainer")),
        "--master-addr",
        "127.0.0.1",
        "--master-port",
        str(port),
        "--no-watch",
    ]
    proc = subprocess.Popen(
        mpirun(roles, btl, argv), env=mpi_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=work
    )
    lines: queue.Queue[tuple[float, str]] = queue.Queue()
    err: list[str] = []

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.put((time.time(), line))

    threading.Thread(target=pump, daemon=True).start()
    threading.Thread(target=lambda: err.extend(proc.stderr or []), daemon=True).start()
    closed: dict[str, float] | None = None
    kept: tuple[float, float] | None = None  # (arrival, seconds)
    rank_pids: dict[int, int] = {}
    holder_pid = 0
    manifest_at = None
    deadline = time.monotonic() + timeout
    try:
        while manifest_at is None or kept is None:
            if proc.poll() is not None and lines.empty():
                sys.exit(f"the ranks exited ({proc.returncode}) before the copy was kept: {''.join(err)[-3000:]}")
            if time.monotonic() > deadline:
                sys.exit(f"nothing kept at L2 within {timeout:.0f} s")
            with contextlib.suppress(queue.Empty):
                while True:
                    at, line = lines.get_nowait()
                    if line.startswith("BENCH "):
                        said = json.loads(line[6:])
                        rank_pids[said["rank"]] = said["rank_pid"]
                        if said["what"] == "closed":
                            closed = said
                    elif line.startswith("{"):
                        event = json.loads(line)
                        if event.get("event") == "kept" and event["how"] == "kept" and kept is None:
                            kept = (at, event["seconds"])
                        elif event.get("event") == "holder":
                            holder_pid = event["pid"]
            if closed is not None and manifest_at is None and list(ckpt.glob("ckpt-*/manifest.json")):
                manifest_at = time.time()
            time.sleep(POLL_S)
        assert closed is not None
        peaks = {rank: peak_mib(pid) for rank, pid in sorted(rank_pids.items())}
        holder = peak_mib(holder_pid)
        (work / DONE).touch()
        proc.wait(timeout=120)
        if proc.returncode != 0:
            sys.exit(f"the ranks failed ({proc.returncode}): {''.join(err)[-3000:]}")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    t_close = closed["t"]
    return Ours(
        total_s=manifest_at - t_close,
        found_s=kept[0] - kept[1] - t_close,
        agree_save_s=kept[1],
        background_s=manifest_at - kept[0],
        write_s=closed["write_s"],
        trainer_peak_mib=peaks,
        holder_peak_mib=holder,
    )


RECEIVER = """\
import os, socket, sys, time
size, target = int(sys.argv[1]), sys.argv[2]
with socket.socket() as server:
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    print(server.getsockname()[1], flush=True)
    conn, _ = server.accept()
buf = memoryview(bytearray(8 << 20))
fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
got = 0
while got < size:
    n = conn.recv_into(buf)
    if not n:
        sys.exit("the sender closed early")
    os.write(fd, buf[:n])
    got += n
os.fsync(fd)
os.close(fd)
d = os.open(os.path.dirname(target), os.O_RDONLY)
os.fsync(d)
os.close(d)
print(time.time(), flush=True)
"""


def run_baseline(source: Path, target: Path) -> float:
    """Seconds from the sender opening `source` to the receiver's fsync of `target` done (see the docstring)."""
    size = source.stat().st_size
    receiver = subprocess.Popen(
        [sys.executable, "-c", RECEIVER, str(size), str(target)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert receiver.stdout is not None
        port = int(receiver.stdout.readline())
        with socket.create_connection(("127.0.0.1", port)) as conn:
            t0 = time.time()
            with source.open("rb") as f:
                conn.sendfile(f)
            done = float(receiver.stdout.readline())
        receiver.wait(timeout=60)
    finally:
        if receiver.poll() is None:
            receiver.kill()
            receiver.wait()
    target.unlink()
    return done - t0


# --- --parts: the pieces of ours, one at a time, inside mpirun ---------------------------------------------------
def parts_rank(size: int, work: Path) -> None:
    """One rank of --parts: the trainers time each piece; the holder serves DeepCheck."""
    from mpi4py import MPI

    import deepcheck
    from deepcheck.checksum import Digest
    from training.node.keptfiles import FileCopy, KeptFiles
    from training.node.kepttable import KeptTable

    comm = MPI.COMM_WORLD
    roles = os.environ["BENCH_ROLES"].split(",")
    role = roles[comm.Get_rank()]
    ck = deepcheck.init(comm, role, directory=work / "parts-ckpt" if role == "holder" else None)
    trainers = comm.Split(0 if role == "trainer" else MPI.UNDEFINED, comm.Get_rank())
    if role == "holder":
        ck.serve(timeout=None)
        return
    t = trainers.Get_rank()
    files = KeptFiles(work, [SNAPSHOT], work / "parts-kept")
    took: dict[str, float] = {}

    def timed(name: str, start: float) -> None:
        took[name] = time.perf_counter() - start

    t0 = time.perf_counter()
    copies = files.changed(set) if t == 0 else []  # the tick's read: KeptFiles.changed
    timed("read (KeptFiles.changed)", t0)
    key, stamp = trainers.bcast((copies[0].key, copies[0].stamp) if t == 0 else None, root=0)  # as _agree tells
    table = KeptTable(t)
    table.take(copies[0] if t == 0 else FileCopy(key, stamp, None), 0)  # the file stays on trainer 0
    tree, owners = table.state()
    trainers.Barrier()
    t0 = time.perf_counter()
    handle = ck.save(tree, 1, owners=owners)
    took["DeepCheck save (L0 copy of the owner's file)"] = handle.stall_s
    ck.wait(deepcheck.Level.L1, step=1)
    timed("save -> L1 (ship + checksum)", t0)
    ck.wait(deepcheck.Level.L2, step=1)
    timed("save -> L2 (+ write + fsync)", t0)
    trainers.Barrier()
    if t == 0:
        t0 = time.perf_counter()
        digest, view = Digest(), memoryview(copies[0].data)
        for lo in range(0, size, 8 * MiB):
            digest.update(view[lo : lo + 8 * MiB])
        digest.value()
        timed("checksum of SIZE alone (1 core)", t0)
        del view
    gathered = trainers.gather(took, root=0)
    ck.close()
    trainers.Free()
    if t == 0:
        print("PARTS " + json.dumps(gathered), flush=True)


def run_parts(roles: str, size: int, btl: str, work: Path) -> list[dict[str, float]]:
    env = {**mpi_env(), "BENCH_ROLES": roles}
    argv = [__file__, "--parts-rank", "--size", str(size), "--work", str(work)]
    done = subprocess.run(
        mpirun(roles, btl, argv, ["BENCH_ROLES"]), env=env, capture_output=True, text=True, timeout=600
    )
    if done.returncode != 0:
        sys.exit(f"--parts failed ({done.returncode}): {done.stderr[-3000:]}")
    (line,) = [ln for ln in done.stdout.splitlines() if ln.startswith("PARTS ")]
    return json.loads(line[6:])


def parse_size(text: str) -> int:
    match = re.fullmatch(r"(\d+(?:\.\d+)?)\s*(B|KiB|MiB|GiB)?", text.strip())
    if match is None:
        raise argparse.ArgumentTypeError(f"{text!r}: a size such as 256MiB or 1GiB")
    unit = {"B": 1, "KiB": 1 << 10, "MiB": MiB, "GiB": 1 << 30}[match.group(2) or "B"]
    return int(float(match.group(1)) * unit)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=parse_size, default=1 << 30, help="the snapshot's size (default 1GiB)")
    parser.add_argument("--roles", nargs="+", default=["trainer,trainer,holder", "trainer,holder"])
    parser.add_argument("--btl", default="self,tcp", help="Open MPI's btl ('' for its own choice)")
    parser.add_argument("--parts", action="store_true", help="then time the pieces of ours one by one")
    parser.add_argument("--parts-rank", action="store_true", help=argparse.SUPPRESS)  # mpirun's ranks of --parts
    parser.add_argument("--work", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.parts_rank:
        parts_rank(args.size, args.work)
        return
    if shutil.which("mpirun") is None:
        sys.exit("needs Open MPI's mpirun")
    print(f"snapshot {args.size / MiB:.0f} MiB, btl {args.btl or 'Open MPI default'}")
    for roles in args.roles:
        with tempfile.TemporaryDirectory(prefix="kept-bench-") as tmp:
            work = Path(tmp)
            ours = run_ours(roles, args.size, args.btl, work)
            base = run_baseline(work / SNAPSHOT, work / "ckpt" / "baseline.bin")
            ratio = ours.total_s / base
            print(
                f"[{roles}] ours {ours.total_s:.2f} s (close->found {ours.found_s:.2f}, agree+L0 "
                f"{ours.agree_save_s:.2f}, L1+L2 {ours.background_s:.2f}); baseline TCP+fsync {base:.2f} s "
                f"({args.size / base / 1e9:.2f} GB/s); script's write {ours.write_s:.2f} s"
            )
            peaks = ", ".join(f"trainer {r} {m:.0f}" for r, m in ours.trainer_peak_mib.items())
            print(f"[{roles}] peak RSS MiB: {peaks}, holder {ours.holder_peak_mib:.0f}")
            verdict = "met" if ratio <= GOAL else "NOT met"
            print(f"RESULT [{roles}] ours / baseline x{ratio:.2f} (goal <= {GOAL}x: {verdict})")
            if args.parts:
                shutil.rmtree(work / "ckpt")
                for t, took in enumerate(run_parts(roles, args.size, args.btl, work)):
                    print(f"[{roles}] parts, trainer {t}: " + ", ".join(f"{k} {v:.2f} s" for k, v in took.items()))


if __name__ == "__main__":
    main()
